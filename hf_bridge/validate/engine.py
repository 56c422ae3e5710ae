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


def cpu_environment(tensor_parallel_size: int = 1) -> None:
    """Settings vLLM needs on a CPU-only machine (only those the user has not set). Several
    workers each get their share of this process's cores: vLLM's own binding asks for one
    NUMA node per worker and refuses a one-node machine ("Not enough allowed NUMA nodes")."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    if tensor_parallel_size > 1 and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        import torch

        if not torch.cuda.is_available():
            cores = sorted(os.sched_getaffinity(0))
            share = max(len(cores) // tensor_parallel_size, 1)
            shares = [cores[i * share:(i + 1) * share] or cores[-1:] for i in range(tensor_parallel_size)]
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(",".join(map(str, s)) for s in shares)


def make_llm(model_dir: str | Path, *, limit_mm_per_prompt: dict[str, int] | None = None, **overrides):
    """An `LLM` over `model_dir` through `model_impl="transformers"` (so, hf_bridge)."""
    cpu_environment(overrides.get("tensor_parallel_size", 1))
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
