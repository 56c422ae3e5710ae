"""Prompts prefilled in one engine step, for models whose prompt rows depend on the whole
prompt: PaliGemma's prefix, which attends both ways (`bidirectional.py`), and a RoPE whose
frequencies follow the prompt's length (`per_request_rope.py`). transformers reads such a
prompt at once; a chunk of it would see only the prompt so far."""

from __future__ import annotations

import logging

from . import LOGGER_NAME

logger = logging.getLogger(LOGGER_NAME)


def prefill_prompts_whole(vllm_config, why: str) -> None:
    """No chunked prefill, a step's budget at least the longest sequence, and no prefix
    caching (a cached block's keys would carry another prompt's), as vLLM's CPU platform
    configures MLA models. `why` completes the start-up line: "... because {why}"."""
    scheduler_config, cache_config = vllm_config.scheduler_config, vllm_config.cache_config
    if scheduler_config.enable_chunked_prefill or cache_config.enable_prefix_caching:
        logger.info("hf_bridge: each prompt of %s is prefilled in one step (chunked prefill off) and prefix caching is "
                    "off, because %s.", getattr(vllm_config.model_config.hf_config, "model_type", "this model"), why)
    scheduler_config.enable_chunked_prefill = False
    cache_config.enable_prefix_caching = False
    scheduler_config.max_num_batched_tokens = max(
        scheduler_config.max_num_batched_tokens, vllm_config.model_config.max_model_len
    )
