"""An in-process engine replaced by a newer one leaves the newer one's state alone.

vLLM's in-process engine (`VLLM_ENABLE_V1_MULTIPROCESSING=0`: notebooks, offline
scripts, hf_bridge's demo and tests) tears down the process's distributed state when it
shuts down, and its `LLM` shuts it down when garbage-collected. Running a notebook cell
`llm = LLM(...)` a second time builds the new engine first and frees the old one after:
the old engine's teardown takes the state the new one has just set up, and the new
one's next request fails with "pipeline model parallel group is not initialized"
(vLLM 0.32, any model, any backend).

`install` wraps `EngineCore` (vLLM has no hook for this, hence a named private-API
patch): the process remembers its newest engine core, and an older one shuts down
everything of its own but the process's distributed state, which is the newest one's
now. An engine shut down before its successor starts, or alone in its process (vLLM's
default engine process, servers), shuts down exactly as before.

An in-process engine shut down also frees its model. In compiled mode (vLLM's default)
each compiled module registers a bytecode hook with Dynamo, which holds the module,
weights and all, for the life of the process. vLLM removes the hooks when it collects
the engine (`LLMEngine._cleanup_instance_caches`), through a weak reference to the
model; an engine shut down first (as `hf-bridge validate` does once it is done with one)
had its model collected before that, so the reference was dead and its decoder stayed
(measured in a clean interpreter, vLLM 0.32, any backend). The patched shutdown runs
vLLM's own removal while the engine still holds its model.
"""

from __future__ import annotations

import weakref
from unittest import mock

_NEWEST: list[weakref.ref] = []
"""The newest engine core built in this process (empty before the first)."""


def install() -> None:
    from vllm.v1.engine import core

    engine_core = core.EngineCore
    if getattr(engine_core.shutdown, "hf_bridge", False):  # plugins load once per process, but be safe
        return
    init, shutdown = engine_core.__init__, engine_core.shutdown

    def __init__(self, *args, **kwargs):
        _NEWEST[:] = [weakref.ref(self)]  # before vLLM's init sets up the process's state
        init(self, *args, **kwargs)

    def shutdown_superseded_engine_without_process_state(self):
        release_compiled_modules(self)
        if is_superseded(self):
            with mock.patch.object(core, "cleanup_dist_env_and_memory", _keep_newer_engine_state):
                return shutdown(self)
        return shutdown(self)

    shutdown_superseded_engine_without_process_state.hf_bridge = True  # type: ignore[attr-defined]
    engine_core.__init__ = __init__
    engine_core.shutdown = shutdown_superseded_engine_without_process_state


def is_superseded(engine) -> bool:
    """Whether an engine core newer than `engine` has been built in this process."""
    newest = _NEWEST[0]() if _NEWEST else None
    return newest is not None and newest is not engine


def release_compiled_modules(engine) -> None:
    """Remove the Dynamo bytecode hooks of `engine`'s model (in this process), so that
    the model is freed with the engine; a no-op where its model runs in other processes."""
    from vllm.v1.engine.llm_engine import LLMEngine

    if getattr(engine, "model_executor", None) is None:  # its start failed before the model
        return
    # vLLM's own lookup and removal, given the engine core: both read `model_executor` alone
    model = LLMEngine._get_driver_model_for_cleanup(engine)
    if model is not None:
        LLMEngine._cleanup_instance_caches(weakref.ref(model))


def _keep_newer_engine_state(*args, **kwargs) -> None:
    """In place of vLLM's `cleanup_dist_env_and_memory`, for a superseded engine."""
    import gc

    gc.collect()
