"""A function run in a clean interpreter that starts warm.

Clean means no vLLM engine has run in it. `transformers_side.py` says why checks need
one. A fresh interpreter spends about 12 s on a CPU importing torch, transformers and
their processing and generation machinery. That cost was paid once per call: by every
reference the suite and the sweeps compute, and by every checkpoint the zoo builds.

The standard library's forkserver pays it once per calling process instead. Its server
is a fresh interpreter that imports those modules and then runs nothing. Each call is a
fork of that server, so it starts clean whatever its caller has run.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import tempfile
import traceback
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

PRELOAD = (
    "torch",
    "transformers",
    "transformers.processing_utils",
    "transformers.image_processing_utils",
    "transformers.video_processing_utils",
    "transformers.feature_extraction_utils",
    "transformers.modeling_utils",
    "transformers.generation",
)
"""What the server imports before its first fork: the imports every check makes. It
must never import vLLM, which would make the server something other than plain
transformers."""

OUTPUT_TAIL = 4000
"""How much of a failed call's output its error quotes, in characters."""


class CleanCallFailed(RuntimeError):
    """The call raised, or its process died. The message holds the end of its output."""


def _context() -> multiprocessing.context.BaseContext:
    """The forkserver where the platform has one (Linux, macOS). Elsewhere, spawn: just
    as clean, with the imports paid per call."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))  # read only when the server starts
    return context


class CleanCall:
    """`function(*args)` in a clean interpreter, started now, beside the caller.
    `result` waits for it. `function` and its arguments must pickle, and so must what
    it returns. A process's first call returns only once the server has made its
    imports (about 12 s on a CPU), so a caller starts its other work before it.
    `doing` names the work for the caller's reader: a failure reads "{doing} failed"."""

    def __init__(self, function: Callable[..., Any], *args: Any, doing: str):
        self._doing = doing
        context = _context()
        self._output = Path(tempfile.mkstemp(prefix="hf_bridge_clean_", suffix=".log")[1])
        self._receiver, sender = context.Pipe(duplex=False)
        # the caller's environment as it is now: the server's dates from its own start
        self._process = context.Process(target=_child, args=(sender, dict(os.environ), str(self._output), function, args),
                                        daemon=True)
        with _main_module_left_out():
            self._process.start()
        sender.close()  # only the child's copy is left, so `recv` ends when the child does

    def result(self) -> Any:
        """Waits for the call and returns its value. Raises `CleanCallFailed` if the call
        raised or its process died."""
        try:
            try:
                outcome, value = self._receiver.recv()
            except EOFError:
                self._process.join()
                outcome, value = "died", f"its process ended with exit code {self._process.exitcode}"
            self._process.join()
            if outcome != "returned":
                raise CleanCallFailed(f"{self._doing} failed:\n{value}\n{self._output_tail()}")
            return value
        finally:
            self._close()

    def stop(self) -> None:
        """Ends the call early, because the caller gave up on it."""
        if self._process.is_alive():
            self._process.kill()
        self._process.join()
        self._close()

    def _output_tail(self) -> str:
        try:
            return self._output.read_text(errors="replace")[-OUTPUT_TAIL:]
        except OSError:
            return ""

    def _close(self) -> None:
        self._receiver.close()
        self._output.unlink(missing_ok=True)


@contextlib.contextmanager
def _main_module_left_out() -> Iterator[None]:
    """A blank `__main__` while the call starts. multiprocessing would import the
    caller's main module again in the child, which runs every line of a script that
    lacks an `if __name__ == "__main__"` guard. A subprocess never did that, and the
    call needs nothing from that module."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def _child(sender, environment: dict[str, str], output: str, function: Callable[..., Any], args: tuple) -> None:
    """The forked side: the caller's environment, output to a file as a subprocess's
    captured output would go, then the call."""
    os.environ.clear()
    os.environ.update(environment)
    with open(output, "w") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
    try:
        sender.send(("returned", function(*args)))
    except BaseException:  # noqa: BLE001 - reported to the caller, with the output
        sender.send(("raised", traceback.format_exc()))
