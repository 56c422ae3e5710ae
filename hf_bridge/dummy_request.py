"""Whether the processor is building vLLM's dummy request (profiling, warm-up), which
only sizes and warms the processor: the checks a user's request gets are skipped for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

_DUMMY_REQUEST: ContextVar[bool] = ContextVar("hf_bridge_dummy_inputs", default=False)
"""Set while vLLM builds a dummy request (per thread: its warm-up may run beside requests)."""


def is_dummy_request() -> bool:
    return _DUMMY_REQUEST.get()


@contextlib.contextmanager
def building_dummy_request() -> Iterator[None]:
    token = _DUMMY_REQUEST.set(True)
    try:
        yield
    finally:
        _DUMMY_REQUEST.reset(token)
