"""Functions `test_clean_interpreter.py` runs through `CleanCall`: they must be importable
by name in the clean interpreter, as a call's function must."""

from __future__ import annotations

import os
import sys
import time


def what_the_interpreter_holds(variable: str) -> dict:
    """What a clean interpreter must hold, and must not, as seen from inside it."""
    from transformers import LlamaModel

    return {
        "vllm imported": "vllm" in sys.modules,
        "LlamaModel.forward": LlamaModel.forward.__qualname__,
        "variable": os.environ.get(variable),
        "main module": getattr(sys.modules.get("__mp_main__"), "__file__", None),
    }


def prints_then_raises(message: str) -> None:
    print(f"printed before: {message}")
    print("and on stderr", file=sys.stderr)
    raise ValueError(message)


def dies(code: int) -> None:
    print("about to die", flush=True)
    os._exit(code)


def sleeps(seconds: float) -> float:
    time.sleep(seconds)
    return seconds
