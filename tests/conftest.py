"""Shared fixtures: the tiny zoo and in-process vLLM engines reused across tests.

Engines run in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`): they start in seconds and
real exceptions surface in the test. Tests that need vLLM's default multiprocess engine
(bad input, tensor parallel, serving) start it in a subprocess of their own.
"""

from __future__ import annotations

import gc
import os

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest

from hf_bridge.zoo import build


@pytest.fixture(scope="session")
def zoo():
    """`zoo(name)` -> path of the tiny checkpoint, built once and cached."""
    return build


class Engines:
    """One live in-process engine at a time, rebuilt only when its settings change."""

    def __init__(self):
        self.key = None
        self.llm = None

    def get(self, model_dir, **kwargs):
        from hf_bridge.validate.engine import make_llm

        key = (str(model_dir), repr(sorted(kwargs.items())))
        if key != self.key:
            self.close()
            self.llm = make_llm(model_dir, **kwargs)
            self.key = key
        return self.llm

    def close(self):
        from hf_bridge.validate.engine import shutdown

        if self.llm is not None:
            shutdown(self.llm)
        self.llm = None
        self.key = None
        gc.collect()


@pytest.fixture(scope="session")
def engines():
    cache = Engines()
    yield cache
    cache.close()


@pytest.fixture
def hf_bridge_log(caplog, monkeypatch):
    """`caplog` receiving hf_bridge's records at INFO. They go to vLLM's "vllm" logger, which
    does not propagate to the root logger `caplog` listens on, and whose configuration at
    engine start resets any handler or level set on its children; so the records are
    taken at the logger's own `handle`, and vLLM is asked for INFO."""
    import logging

    from hf_bridge import LOGGER_NAME

    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "INFO")
    logger = logging.getLogger(LOGGER_NAME)
    handle = logger.handle

    def also_captured(record):
        caplog.handler.handle(record)
        handle(record)

    seen: set[int] = set()

    def once(record) -> bool:  # where vLLM's logger propagates, a record reaches caplog twice
        if id(record) in seen:
            return False
        seen.add(id(record))
        return True

    monkeypatch.setattr(logger, "handle", also_captured)
    caplog.handler.addFilter(once)
    try:
        yield caplog
    finally:
        caplog.handler.removeFilter(once)
