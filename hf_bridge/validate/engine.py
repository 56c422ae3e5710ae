"""vLLM engines configured for parity checks on the CPU."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .checkpoint import trusts_remote_code

ENGINE_DEFAULTS: dict[str, Any] = dict(
    dtype="float32",
    max_model_len=4096,
    max_num_seqs=8,
    enforce_eager=True,
    seed=0,
)


def cpu_environment() -> None:
    """Settings vLLM needs on a CPU-only machine (only those the user has not set)."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def make_llm(model_dir: str | Path, *, limit_mm_per_prompt: dict[str, int] | None = None, **overrides):
    """An `LLM` over `model_dir` through `model_impl="transformers"` (so, hf_bridge)."""
    cpu_environment()
    from vllm import LLM

    kwargs = dict(ENGINE_DEFAULTS, **overrides)
    if limit_mm_per_prompt is not None:
        kwargs["limit_mm_per_prompt"] = limit_mm_per_prompt
    kwargs.setdefault("model_impl", "transformers")
    kwargs.setdefault("trust_remote_code", trusts_remote_code())
    return LLM(model=str(model_dir), **kwargs)


def shutdown(llm) -> None:
    """Stop an in-process engine's core, before another starts in this process. The caller
    then drops its references and collects (`gc.collect()`): vLLM's parallel state is the
    process's own, and an engine freed after its successor started (a reference cycle, or
    an exception's traceback, keeps it alive until the collector runs) tears the
    successor's state down; its next request fails with "pipeline model parallel group is
    not initialized"."""
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:  # noqa: BLE001 - an engine that raised may be half stopped already
        pass
