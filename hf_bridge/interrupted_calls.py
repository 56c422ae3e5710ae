"""An offline call stopped with Ctrl-C (a notebook's interrupt) leaves its engine serving.

KeyboardInterrupt is raised wherever the main thread is when the signal comes. In vLLM's
in-process engine (`VLLM_ENABLE_V1_MULTIPROCESSING=0`: notebooks, hf_bridge's demo and
tests) that is almost always inside an engine step, most of it the model's forward: the
scheduler has planned the step and its output never comes back, so every later step
computes nothing for those requests, and the next `generate` loops for ever (vLLM 0.32,
any model, the in-tree backend alike; vllm-project/vllm#17738). Where the step is whole,
the interrupted call's requests still stay in the engine: the next call runs them to
their end and returns their outputs ahead of its own.

`install` wraps four vLLM methods (vLLM has no hook for this, hence a named private-API
patch): where the engine core runs in this process, an engine step and the adding of one
request run whole, a Ctrl-C during one held until it ends (a step takes milliseconds to a
second) and then raised; and a call, or a step, that ends in KeyboardInterrupt first
aborts every request still unfinished in the engine. An `LLM` serves one call at a time,
so those are the call's own (or, for `wait_for_completion`, those it was waiting for).

With vLLM's engine process, this process only waits for a step's outputs, so nothing is
held: the interrupt comes at once, and the abort keeps the next call's outputs its own
(without it, measured: 9 outputs, the 8 stopped requests' first). Where the interrupt
reaches the engine process too, it stops: vLLM's engine process shuts down on SIGINT by
design, and a terminal's Ctrl-C or a notebook's interrupt signals the whole process group;
notebooks keep the engine in-process.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
from collections.abc import Callable, Iterator

PATCHED = "hf_bridge_interrupt_safe"
"""Marks a wrapped method, so that `install` wraps each once per process."""


def install() -> None:
    from vllm.entrypoints.common.offline import OfflineInferenceMixin
    from vllm.v1.engine.core_client import InprocClient
    from vllm.v1.engine.llm_engine import LLMEngine

    def core_runs_here(engine) -> bool:
        return isinstance(engine.engine_core, InprocClient)

    for owner, name, engine_of, held_where in (
        (LLMEngine, "step", _itself, core_runs_here),
        (LLMEngine, "add_request", _itself, core_runs_here),
        (OfflineInferenceMixin, "_run_engine", _llm_engine, None),
        (OfflineInferenceMixin, "_render_and_add_requests", _llm_engine, None),
    ):
        method = getattr(owner, name)
        if not getattr(method, PATCHED, False):
            setattr(owner, name, _aborting_on_interrupt(method, engine_of, held_where))


def _itself(engine):
    return engine


def _llm_engine(llm):
    return llm.llm_engine


def _aborting_on_interrupt(method: Callable, engine_of: Callable, held_where: Callable | None) -> Callable:
    """`method`, aborting the engine's unfinished requests when it ends in KeyboardInterrupt,
    and run with SIGINT held for an engine `held_where` accepts."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        engine = engine_of(self)
        try:
            with held_interrupts() if held_where is not None and held_where(engine) else contextlib.nullcontext():
                return method(self, *args, **kwargs)
        except KeyboardInterrupt as interrupt:
            try:
                abort_unfinished(engine)
            except Exception as error:  # noqa: BLE001 - an engine that died cannot abort; the interrupt stays what is raised
                interrupt.add_note(f"hf_bridge could not abort the stopped call's requests: {error!r}")
            raise

    setattr(wrapper, PATCHED, True)
    return wrapper


def abort_unfinished(engine) -> None:
    """Abort every request the engine has not finished (by its internal ids, which the
    output processor keys its requests by)."""
    unfinished = list(engine.output_processor.request_states)
    if unfinished:
        engine.abort_request(unfinished, internal=True)


@contextlib.contextmanager
def held_interrupts() -> Iterator[None]:
    """SIGINT held while the block runs, then handled as it would have been (Python's
    handler raises KeyboardInterrupt). Only the main thread can set a handler; a signal
    that is ignored, or handled outside Python, is left as it is."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return
    held = []
    signal.signal(signal.SIGINT, lambda signum, frame: held.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            previous(signal.SIGINT, held[0])
