"""Bidirectional attention within images (Gemma3, Gemma 4) or over the whole prompt
(PaliGemma's prefix): detected, flagged, reported.

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

A model may go further and let its whole prompt attend both ways: PaliGemma's processor
types every prompt token 0 and its mask joins them in one block (a prefix LM; generated
tokens are causal). transformers' own `create_masks_for_generate` says so
(`attends_across_prompt`); vLLM's ranges cover items only, so on a CPU hf_bridge's backend
takes each request's prompt as its range, and the engine prefills prompts whole, without
prefix caching (a prompt block's keys depend on the prompt after it), as vLLM's CPU
platform does for MLA models.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import logging

import torch
from vllm.model_executor.models.config import VerifyAndUpdateConfig
from vllm.platforms import current_platform

from . import LOGGER_NAME
from .head import generation_class
from .hf_classes import base_model_class, forward_reads
from .whole_prompts import prefill_prompts_whole

logger = logging.getLogger(LOGGER_NAME)


BIDIRECTIONAL_WITHIN_MEDIA = "vision"
"""transformers' `use_bidirectional_attention` value for attention both ways within an item."""


def uses_bidirectional_mm_attention(config) -> bool:
    """Whether the text config says so, or the HF base model reads `token_type_ids` in its forward."""
    if getattr(config.get_text_config(), "use_bidirectional_attention", None) == BIDIRECTIONAL_WITHIN_MEDIA:
        return True
    return forward_reads(base_model_class(config), "token_type_ids")


TEXT_TOKEN_TYPE = 0
"""The `token_type_ids` value transformers' processors give prompt text (BERT's convention)."""
MASK_PROBE_ATTENTION = "eager"
"""The attention implementation the mask probe asks transformers for: a plain float mask."""


def attends_across_prompt(config) -> bool:
    """Whether a prompt's text attends to the tokens after it (a prefix LM: PaliGemma), as
    transformers' `create_masks_for_generate` builds the model's first-step mask for two
    text-typed tokens. False for a class without such a mask hook taking `token_type_ids`."""
    masks = _first_step_masks(config)
    return any(mask[0, 1] for mask in masks.values())


def prompt_escapes_window(config) -> bool:
    """Whether, on a sliding-window layer, a prompt that attends both ways sees all of
    itself, window or not, as transformers composes PaliGemma 2's mask: (causal AND
    window) OR prompt. Probed with a one-token window."""
    if getattr(config.get_text_config(), "sliding_window", None) is None:
        return False
    masks = _first_step_masks(config, sliding_window=1)
    return SLIDING_MASK in masks and bool(masks[SLIDING_MASK][1, 0])


SLIDING_MASK = "sliding_attention"
"""transformers' name for the mask of its sliding-window layers."""


def _first_step_masks(config, sliding_window: int | None = None) -> dict[str, torch.Tensor]:
    """The model's first-step masks for a prompt of two text-typed tokens, as booleans
    (query, key) per layer kind: transformers' own `create_masks_for_generate` on a copy of
    `config` (with `sliding_window` set, if given). Empty where the class has no such hook
    taking `token_type_ids`, or where it raises (logged)."""
    generation = generation_class(config)
    create_masks = getattr(generation, "create_masks_for_generate", None)
    if create_masks is None or "token_type_ids" not in inspect.signature(create_masks).parameters:
        return {}
    probe = copy.deepcopy(config)
    for part in (probe, probe.get_text_config()):
        part._attn_implementation = MASK_PROBE_ATTENTION
    if sliding_window is not None:
        probe.get_text_config().sliding_window = sliding_window
    try:
        masks = create_masks(
            config=probe, inputs_embeds=torch.empty((1, 2, 0)), attention_mask=torch.ones((1, 2), dtype=torch.long),
            past_key_values=None, position_ids=torch.arange(2)[None],
            token_type_ids=torch.full((1, 2), TEXT_TOKEN_TYPE), is_first_iteration=True,
        )
    except Exception as exc:  # noqa: BLE001 - a checkpoint's own mask code; serve it as transformers' masks usually are
        logger.warning("hf_bridge: could not ask %s.create_masks_for_generate whether a prompt attends both ways "
                       "(%s: %s); its prompt text is taken to attend causally.", generation.__name__,
                       type(exc).__name__, exc)
        return {}
    masks = masks if isinstance(masks, dict) else {"full_attention": masks}
    # allowed: True in a boolean mask, 0 in an additive one
    return {kind: (m[0, 0] if m.dtype == torch.bool else m[0, 0] == 0) for kind, m in masks.items() if m is not None}


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
    if attends_across_prompt(model_config.hf_config):
        if getattr(backend, "takes_prompts_whole", False):
            logger.info("hf_bridge: %s attends bidirectionally over its whole prompt; %s does so too.", model_type, name)
            return
        logger.warning(  # a GPU: vLLM's ranges cover images only
            "hf_bridge: %s attends bidirectionally over its whole prompt (a prefix LM), but the selected "
            "attention backend (%s) does so within images at most. Hidden states after the images, the "
            "log-probs that follow them, and possibly generated tokens, will differ from transformers. "
            "hf_bridge's CPU attention gives parity.", model_type, name,
        )
        return
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
    config, before the scheduler exists.

    A model that attends both ways over its whole prompt has its prompts prefilled whole
    (no chunked prefill; a step's budget at least the longest sequence) and no prefix
    caching, exactly as vLLM's CPU platform configures MLA models."""

    @staticmethod
    def verify_and_update_config(vllm_config) -> None:
        model_config, scheduler_config = vllm_config.model_config, vllm_config.scheduler_config
        KeepMediaItemsWhole._keep_prefix_without_media(model_config)
        if not (model_config.is_multimodal_model and attends_within_media_on_cpu(model_config)):
            return
        if not scheduler_config.disable_chunked_mm_input:
            logger.info("hf_bridge: each media item is prefilled in one step (disable_chunked_mm_input), "
                        "so that its tokens attend to each other both ways.")
            scheduler_config.disable_chunked_mm_input = True
        if attends_across_prompt(model_config.hf_config):
            prefill_prompts_whole(vllm_config, "it attends both ways over its whole prompt: a prompt block's keys "
                                  "depend on the prompt after it")

    @staticmethod
    def _keep_prefix_without_media(model_config) -> None:
        """vLLM turns `is_mm_prefix_lm` off for an engine serving text alone
        (`language_model_only`, every limit 0), as it reads the flag as attention within
        items. A model whose whole prompt attends both ways (PaliGemma) attends so
        without media too, in transformers and in hf_bridge's CPU attention: its text
        had run causally there."""
        hf_config = model_config.hf_config
        if (getattr(hf_config, "is_mm_prefix_lm", False) and not model_config.is_mm_prefix_lm
                and current_platform.is_cpu() and attends_across_prompt(hf_config)):
            model_config.model_arch_config = dataclasses.replace(model_config.model_arch_config, is_mm_prefix_lm=True)
            vars(model_config).pop("is_mm_prefix_lm", None)  # vLLM's cached_property of the flag, read already

