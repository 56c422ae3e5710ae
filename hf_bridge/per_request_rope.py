"""vLLM's side of `length_rope.py`: each engine step's request boundaries for the rotary
modules whose frequencies follow a sequence's length, and the engine settings such a
model needs to match transformers per request."""

from __future__ import annotations

import torch
from vllm.config import CUDAGraphMode
from vllm.logger import init_logger
from vllm.platforms import current_platform

from .length_rope import PerRequestFrequencies, length_rope_types, length_rotaries
from .step_kwargs import keep_eager
from .whole_prompts import prefill_prompts_whole

logger = init_logger(__name__)


def step_request_starts(num_rows: int) -> list[int] | None:
    """The engine step's request boundaries (its attention metadata's `query_start_loc`:
    each request's first row, then the end of the last); None outside a step (vLLM's
    start-up runs build no metadata)."""
    from vllm.forward_context import get_forward_context, is_forward_context_available

    if not is_forward_context_available():
        return None
    metadata = get_forward_context().attn_metadata
    if isinstance(metadata, list):  # micro-batches: the first one's
        metadata = metadata[0] if metadata else None
    if isinstance(metadata, dict):  # one entry per attention layer, alike in their requests
        metadata = next((m for m in metadata.values() if getattr(m, "query_start_loc", None) is not None), None)
    starts = getattr(metadata, "query_start_loc", None)
    return None if starts is None else starts.tolist()


def install_per_request_frequencies(text_model: torch.nn.Module) -> bool:
    """Each request's frequencies its own (`length_rope.PerRequestFrequencies`), on every
    rotary module of `text_model` whose frequencies follow the length; its decoder then
    stays eager (a compiled graph would read one step's boundaries once, at tracing).
    Whether there was one."""
    rotaries = length_rotaries(text_model)
    for rotary in rotaries:
        PerRequestFrequencies(rotary, step_request_starts).install()
    if rotaries:
        keep_eager(text_model)
        logger.info("hf_bridge computes %s's RoPE frequencies per request, eagerly: they follow each sequence's length "
                    "(%s), and transformers takes the length from a whole batch", type(text_model).__name__,
                    ", ".join(sorted({str(r.rope_type) for r in rotaries})))
    return bool(rotaries)


def keep_frequencies_per_request(vllm_config) -> None:
    """vLLM's config hook, for a model whose RoPE follows the length: prompts prefilled
    whole (transformers gives a prompt's every row the frequencies of its whole length; a
    chunk would get those of the prompt so far) without prefix caching (a cached block's
    keys would carry the frequencies of the prompt that wrote them) and, on a GPU, no CUDA
    graphs (a graph would replay one step's grouping of requests)."""
    hf_config = vllm_config.model_config.hf_config
    text_config = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    kinds = length_rope_types(text_config)
    if not kinds:
        return
    model_type = getattr(hf_config, "model_type", "this model")
    prefill_prompts_whole(vllm_config, f"its RoPE frequencies ({', '.join(kinds)}) follow each prompt's whole length")
    compilation_config = vllm_config.compilation_config
    if not current_platform.is_cpu() and compilation_config.cudagraph_mode != CUDAGraphMode.NONE:
        logger.info("hf_bridge: no CUDA graphs for %s: each step's requests get their RoPE frequencies by length, "
                    "grouped on the host", model_type)
        compilation_config.cudagraph_mode = CUDAGraphMode.NONE
