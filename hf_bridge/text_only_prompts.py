"""Prompts without media laid out as the HF processor lays them out.

An HF processor may add tokens to every prompt it processes, with or without items:
Chameleon's appends its separator, Emu3's puts BOS first. vLLM runs a model's
multimodal processor only on prompts that carry media; a prompt without any is handed
to the model as tokenized (`BaseRenderer._process_tokens`), so such a prompt ran one
token short of transformers'.

`install` wraps that method and its async twin (vLLM has no hook for it, hence a named
private-API patch): for a model hf_bridge serves, a prompt without media gets the
tokens its processor adds to the sentinel text alone (`ProcessorProbe.text_only_frame`).
Prompts with media, and every other model's prompts, pass through untouched. An engine
serving text alone (`language_model_only`, or every limit 0) gets the same tokens: vLLM
builds it no multimodal processor, so hf_bridge's is built here, for that frame only.
"""

from __future__ import annotations

from typing import Any

from .frame import PromptFrame, apply_frame


def install() -> None:
    from vllm.renderers.base import BaseRenderer

    tokens, tokens_async = BaseRenderer._process_tokens, BaseRenderer._process_tokens_async
    if getattr(tokens, "hf_bridge", False):  # plugins load once per process, but be safe
        return

    def _process_tokens(self, prompt, *, skip_mm_cache: bool = False):
        return tokens(self, with_processor_tokens(self, prompt), skip_mm_cache=skip_mm_cache)

    async def _process_tokens_async(self, prompt, *, skip_mm_cache: bool = False):
        return await tokens_async(self, with_processor_tokens(self, prompt), skip_mm_cache=skip_mm_cache)

    _process_tokens.hf_bridge = True  # type: ignore[attr-defined]
    BaseRenderer._process_tokens = _process_tokens
    BaseRenderer._process_tokens_async = _process_tokens_async


def added_tokens(mm_processor: Any) -> PromptFrame:
    """What a prompt without media gets from vLLM's multimodal processor `mm_processor`:
    its HF processor's own tokens where hf_bridge serves the model, else nothing."""
    from .processing import HFBridgeMultiModalProcessor

    if not isinstance(mm_processor, HFBridgeMultiModalProcessor):
        return PromptFrame()
    return mm_processor.info.text_only_frame()


def with_added_tokens(prompt_ids: list[int], added: PromptFrame) -> list[int]:
    """The ids of a prompt without media, with `added` (from `added_tokens`) around them."""
    return apply_frame(prompt_ids, [(added, (), 1)])


def with_processor_tokens(renderer: Any, prompt: dict) -> dict:
    """`prompt` with its processor's own tokens, where it carries no media and hf_bridge
    serves the model; else `prompt` itself."""
    processor = _multimodal_processor(renderer)
    if media := prompt.get("multi_modal_data"):
        if processor is not renderer.mm_processor:  # built for a text-only engine; vLLM's refusal names no setting
            from .errors import media_sent_to_text_only_engine

            raise ValueError(media_sent_to_text_only_engine(sorted(media), renderer.model_config.multimodal_config.language_model_only))
        return prompt
    added = added_tokens(processor)
    if added.is_empty:
        return prompt
    laid_out = {**prompt, "prompt_token_ids": with_added_tokens(prompt["prompt_token_ids"], added)}
    if (offsets := prompt.get("prompt_token_offsets")) is not None:
        # the added tokens stand for no text of the prompt's: empty spans at its ends
        end = offsets[-1][1] if offsets else 0
        laid_out["prompt_token_offsets"] = [(0, 0)] * len(added.leading) + list(offsets) + [(end, end)] * len(added.trailing)
    return laid_out


TEXT_ONLY_PROCESSOR = "_hf_bridge_text_only_processor"
"""Where a renderer keeps the processor built for its text-only engine's frame."""


def _multimodal_processor(renderer: Any) -> Any:
    """The renderer's multimodal processor; for an engine of a multimodal model hf_bridge
    serves that serves text alone, for which vLLM builds none, hf_bridge's, built once."""
    model_config = renderer.model_config
    if renderer.mm_processor is not None or model_config.multimodal_config is None:
        return renderer.mm_processor
    from .plugin import OWN_CLASSES

    if model_config.architecture not in OWN_CLASSES:
        return None
    if not hasattr(renderer, TEXT_ONLY_PROCESSOR):
        from vllm.multimodal import MULTIMODAL_REGISTRY

        setattr(renderer, TEXT_ONLY_PROCESSOR, MULTIMODAL_REGISTRY.create_processor(model_config, tokenizer=renderer.tokenizer))
    return getattr(renderer, TEXT_ONLY_PROCESSOR)
