"""Every engine in a process computes at the OpenMP thread count its first engine had.

vLLM's CPU linear layers keep their oneDNN matmul primitives in a process-wide cache,
keyed by shape: an in-process engine (`VLLM_ENABLE_V1_MULTIPROCESSING=0`: notebooks,
`hf-bridge validate`, offline scripts) reuses those of an earlier engine whose layers
had the same shapes. Run at another thread count than the one they were created at,
they give wrong numbers: with the count changed from 1 to 2, or from 2 to 1, between
two engines over one checkpoint, the second one's greedy tokens differed from
transformers' from the first (vLLM 0.32, any backend).

vLLM refuses `torch.set_num_threads` once an engine has started, but numba does not
ask: its OpenMP pool sets the process's count to the machine's cores. vLLM's n-gram
drafter (`speculative_config={"method": "ngram"}`) runs such a loop at each step, as
may a notebook's own code, so an engine started after an n-gram engine on a machine
with `OMP_NUM_THREADS` below its core count gave wrong tokens.

`install` wraps `EngineCore` (vLLM has no hook for this, hence a named private-API
patch): the process's first engine core records the count it was built with (after
its workers bound their threads), and each later engine core, before it is built, and
each step, before it computes, sets the count back where something changed it.
"""

from __future__ import annotations

import logging

import torch

from . import LOGGER_NAME

logger = logging.getLogger(LOGGER_NAME)

_ENGINE_THREADS: list[int] = []
"""The OpenMP thread count of the process's first engine core (empty before it is built)."""

STEPS = ("step", "step_with_batch_queue")
"""`EngineCore`'s two step functions: one is each engine's `step_fn`."""


def install() -> None:
    from vllm.v1.engine import core

    engine_core = core.EngineCore
    if getattr(engine_core.step, "hf_bridge_threads", False):  # plugins load once per process, but be safe
        return
    init = engine_core.__init__

    def __init__(self, *args, **kwargs):
        restore_engine_threads()
        init(self, *args, **kwargs)
        if not _ENGINE_THREADS:
            _ENGINE_THREADS.append(torch.get_num_threads())

    engine_core.__init__ = __init__
    for name in STEPS:
        setattr(engine_core, name, _at_engine_threads(getattr(engine_core, name)))


def _at_engine_threads(step):
    def at_engine_threads(self, *args, **kwargs):
        restore_engine_threads()
        return step(self, *args, **kwargs)

    at_engine_threads.hf_bridge_threads = True  # type: ignore[attr-defined]
    return at_engine_threads


def restore_engine_threads() -> None:
    """Set the process's OpenMP thread count back to its first engine's, where it changed."""
    threads = torch.get_num_threads()
    if not _ENGINE_THREADS or threads == _ENGINE_THREADS[0]:
        return
    logger.info("The OpenMP thread count changed from %d to %d since this process's first engine started (numba "
                "sets it, vLLM's n-gram drafter among its users); set back to %d, as vLLM's CPU kernels cached at one "
                "count give wrong results at another", _ENGINE_THREADS[0], threads, _ENGINE_THREADS[0])
    torch._C.set_num_threads(_ENGINE_THREADS[0])  # the builtin: vLLM's CPU worker replaces `torch.set_num_threads`
