"""`clean_interpreter.CleanCall`: a function run in a fresh fork of a warm, clean server,
as the transformers side of every check, the zoo's builds and the suite's own builders run."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from helpers import clean_calls
from hf_bridge.clean_interpreter import CleanCall, CleanCallFailed


def test_a_call_sees_plain_transformers_and_the_callers_environment_as_it_is_now(monkeypatch):
    """An engine decorates HF classes in place and imports vLLM: neither reaches the
    call. The caller's environment does, as it stands when the call starts, though the
    server started earlier."""
    import transformers
    import vllm  # noqa: F401 - the caller has vLLM loaded

    CleanCall(clean_calls.sleeps, 0, doing="a warm-up").result()  # the server is up before the changes below
    original = transformers.LlamaModel.forward

    def decorated(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    monkeypatch.setattr(transformers.LlamaModel, "forward", decorated)
    monkeypatch.setenv("HF_BRIDGE_TEST_SET_LATE", "set after the server started")
    held = CleanCall(clean_calls.what_the_interpreter_holds, "HF_BRIDGE_TEST_SET_LATE", doing="a look inside").result()
    assert held == {
        "vllm imported": False,
        "LlamaModel.forward": "LlamaModel.forward",
        "variable": "set after the server started",
        "main module": None,
    }


def test_a_call_that_raises_reports_its_error_and_its_output():
    with pytest.raises(CleanCallFailed) as failed:
        CleanCall(clean_calls.prints_then_raises, "the processor refused", doing="a raising call").result()
    message = str(failed.value)
    assert message.startswith("a raising call failed:\n")
    assert "ValueError: the processor refused" in message
    assert "printed before: the processor refused" in message and "and on stderr" in message


def test_a_call_whose_process_dies_says_so_with_its_output():
    with pytest.raises(CleanCallFailed, match=r"^a dying call failed:\nits process ended with exit code 3\nabout to die"):
        CleanCall(clean_calls.dies, 3, doing="a dying call").result()


def test_a_stopped_call_ends_at_once():
    started = time.monotonic()
    call = CleanCall(clean_calls.sleeps, 600, doing="a long sleep")
    call.stop()
    assert time.monotonic() - started < 60
    assert CleanCall(clean_calls.sleeps, 0, doing="a short sleep").result() == 0  # and the next call runs


def test_a_script_without_a_main_guard_runs_once(tmp_path):
    """multiprocessing imports the caller's main module again in the child; a script
    that lacks `if __name__ == "__main__"` would then run again there, and call again."""
    runs = tmp_path / "runs"
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(clean_calls.__file__.rsplit('/', 2)[0])!r})
        from helpers import clean_calls
        from hf_bridge.clean_interpreter import CleanCall
        with open({str(runs)!r}, "a") as log:
            log.write("ran\\n")
        print(CleanCall(clean_calls.sleeps, 0.5, doing="a short sleep").result())
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "0.5"
    assert runs.read_text() == "ran\n"
