"""vLLM engines configured for parity checks on the CPU."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

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
    return LLM(model=str(model_dir), **kwargs)
