"""See what hf_bridge makes of a prompt without starting an engine.

For researchers in a notebook and engineers porting a model: the prompt token ids vLLM
will run, where each item sits (`PlaceholderRange`s with their `is_embed` masks), and
the per-item data the processor cache stores. It builds vLLM's real multimodal
processor for the checkpoint, through hf_bridge's registration, so what it shows is
what the engine does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class ItemView:
    modality: str
    index: int
    offset: int
    length: int
    is_embed: list[bool]
    data: dict[str, Any]
    """Field name -> the item's cached data (tensors as the processor made them)."""

    @property
    def num_embeds(self) -> int:
        return sum(self.is_embed)


@dataclass
class PromptView:
    prompt_ids: list[int]
    items: list[ItemView]
    hashes: dict[str, list[str]]

    def tokens(self, tokenizer) -> list[str]:
        return tokenizer.convert_ids_to_tokens(self.prompt_ids)


def build_processor(model_dir: str | Path, **model_kwargs):
    """vLLM's multimodal processor for `model_dir` as the engine would build it."""
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    kwargs = dict(model=str(model_dir), model_impl="transformers", dtype="float32", max_model_len=4096)
    kwargs.update(model_kwargs)
    config = ModelConfig(**kwargs)
    return MULTIMODAL_REGISTRY.create_processor(config)


def processor_cache(processor):
    """vLLM's processor-side item cache, as the engine's front end keeps it."""
    from vllm.multimodal.cache.base import MultiModalProcessorOnlyCache

    return MultiModalProcessorOnlyCache(processor.info.ctx.model_config)


def inspect_prompt(
    processor,
    prompt: str | list[int],
    mm_data: dict[str, Any] | None = None,
    mm_processor_kwargs: dict[str, Any] | None = None,
    cache=None,
) -> PromptView:
    """Process one prompt the way the engine does, and describe the result."""
    mm_items = processor.info.parse_mm_data(mm_data or {})
    out = processor(prompt, mm_items, hf_processor_mm_kwargs=mm_processor_kwargs or {}, cache=cache)
    items = []
    for modality, ranges in out["mm_placeholders"].items():
        kwargs_items = out["mm_kwargs"].get(modality, [])
        for index, r in enumerate(ranges):
            item = kwargs_items[index] if index < len(kwargs_items) else None
            data = {key: elem.data for key, elem in (item or {}).items()}
            is_embed = [True] * r.length if r.is_embed is None else [bool(x) for x in r.is_embed.tolist()]
            items.append(ItemView(modality, index, r.offset, r.length, is_embed, data))
    items.sort(key=lambda v: v.offset)
    return PromptView(list(out["prompt_token_ids"]), items, dict(out["mm_hashes"]))
