"""Bidirectional attention within images (Gemma3, PaliGemma, Gemma 4): detected, flagged, reported.

Some HF models let the tokens of one image attend to each other in both directions;
their base model's forward reads `token_type_ids` to build that mask, or their text
config says `use_bidirectional_attention="vision"` (Gemma 4, whose forward reads
`mm_token_type_ids`, as M-RoPE models' do for positions). vLLM reproduces
it for models it marks `is_mm_prefix_lm` (from the HF config, or a list of model types),
with the ranges from `is_embed`, on attention backends whose `supports_mm_prefix()` is
true (Triton, FlexAttention, FlashAttention 4; on a CPU, hf_bridge's own:
`cpu_media_attention.py`). hf_bridge marks every model it detects, not only those on
vLLM's list, keeps each item whole in one prefill step on a CPU (`KeepMediaItemsWhole`,
as vLLM's GPU platforms do), and says at start-up whether the selected backend gives
transformers' attention or a causal approximation.
"""

from __future__ import annotations

import logging

from vllm.model_executor.models.config import VerifyAndUpdateConfig
from vllm.platforms import current_platform

from . import LOGGER_NAME
from .hf_classes import base_model_class, forward_takes

logger = logging.getLogger(LOGGER_NAME)


BIDIRECTIONAL_WITHIN_MEDIA = "vision"
"""transformers' `use_bidirectional_attention` value for attention both ways within an item."""


def uses_bidirectional_mm_attention(config) -> bool:
    """Whether the text config says so, or the HF base model reads `token_type_ids` in its forward."""
    if getattr(config.get_text_config(), "use_bidirectional_attention", None) == BIDIRECTIONAL_WITHIN_MEDIA:
        return True
    return forward_takes(base_model_class(config), "token_type_ids")


def mark_bidirectional(hf_config) -> bool:
    """Set `is_mm_prefix_lm` on a detected model's config unless the checkpoint says;
    vLLM reads it when it rebuilds the model's architecture config, after resolution."""
    if not hasattr(hf_config, "is_mm_prefix_lm") and uses_bidirectional_mm_attention(hf_config):
        hf_config.is_mm_prefix_lm = True
    return bool(getattr(hf_config, "is_mm_prefix_lm", False))


def attends_within_media_on_cpu(model_config) -> bool:
    """Whether hf_bridge's CPU path for such attention applies: a model vLLM marks
    `is_mm_prefix_lm`, on a CPU (`cpu_media_attention.py`, `KeepMediaItemsWhole`)."""
    return bool(model_config.is_mm_prefix_lm) and current_platform.is_cpu()


def report_bidirectional_attention(model_config, backend) -> None:
    """One line at start-up: transformers' attention, or a causal approximation."""
    if not model_config.is_mm_prefix_lm:
        return
    model_type = getattr(model_config.hf_config, "model_type", "this model")
    name = getattr(backend, "__name__", str(backend))
    if backend is not None and backend.supports_mm_prefix():
        logger.info("hf_bridge: %s attends bidirectionally within each image; %s does so too.", model_type, name)
        return
    logger.warning(
        "hf_bridge: %s attends bidirectionally within each image (its forward reads token_type_ids), "
        "but the selected attention backend (%s) is causal only. Hidden states at image positions, the "
        "log-probs that follow them, and possibly generated tokens, will differ from transformers. "
        "Backends that give parity: Triton, FlexAttention, FlashAttention 4 (on a GPU).",
        model_type, name,
    )


class KeepMediaItemsWhole(VerifyAndUpdateConfig):
    """On a CPU, prefill each media item of a bidirectional model in one step, as vLLM's GPU
    platforms force (`disable_chunked_mm_input`): a token attends only to keys already
    computed, so an item split across steps would see part of itself. vLLM calls it for
    hf_bridge's architectures (`plugin.py` registers it) while it builds the engine's
    config, before the scheduler exists."""

    @staticmethod
    def verify_and_update_config(vllm_config) -> None:
        model_config, scheduler_config = vllm_config.model_config, vllm_config.scheduler_config
        if not (model_config.is_multimodal_model and attends_within_media_on_cpu(model_config)):
            return
        if not scheduler_config.disable_chunked_mm_input:
            logger.info("hf_bridge: each media item is prefilled in one step (disable_chunked_mm_input), "
                        "so that its tokens attend to each other both ways.")
            scheduler_config.disable_chunked_mm_input = True
