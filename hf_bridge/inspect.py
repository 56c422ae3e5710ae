"""See what hf_bridge makes of a prompt without starting an engine.

For researchers in a notebook and engineers porting a model: the prompt token ids vLLM
will run, where each item sits (`PlaceholderRange`s with their `is_embed` masks), and
the per-item data the processor cache stores. It builds vLLM's real multimodal
processor for the checkpoint, through hf_bridge's registration, so what it shows is
what the engine does.

    import hf_bridge
    hf_bridge.inspect(model_dir, prompt, images=[image])   # shows itself in a notebook
    hf_bridge.inspect(model_dir, prompt, images=["photo.jpg"], videos=["clip.mp4"])  # files
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .display import ItemPlacement
from .text_only_prompts import added_tokens, with_added_tokens


@dataclass(frozen=True)
class ItemView(ItemPlacement):
    data: dict[str, Any]
    """Field name -> the item's cached data (tensors as the processor made them)."""


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


BOOKKEEPING_PREFIX = "hf_bridge_"
"""hf_bridge's own per-item fields (`processing.py`'s `hf_bridge_<modality>_...` keys):
they restate the range and mask an inspection shows, so its data column leaves them out."""


@dataclass
class Inspection:
    """What hf_bridge makes of one prompt, for a person: which processors ran, the prompt's
    tokens and, per item, its range, `is_embed` mask, grid padding and data shapes. Shows
    itself in a notebook (`_repr_html_`); its `repr` is the same as text."""

    source: str
    hf_processor: str
    """Class of the HF processor that ran (inside vLLM's processor)."""
    vllm_processor: str
    """Module and class of vLLM's multimodal processor that called it: hf_bridge's, the
    in-tree backend's or a native model's."""
    tokens: list[str]
    view: PromptView

    @classmethod
    def of(cls, processor, view: PromptView) -> Inspection:
        """The inspection of `view`, which `processor` (from `build_processor`) made."""
        return cls(
            source=str(processor.info.ctx.model_config.model),
            hf_processor=type(processor.info.get_hf_processor()).__name__,
            vllm_processor=f"{type(processor).__module__}.{type(processor).__name__}",
            tokens=view.tokens(processor.info.get_tokenizer()),
            view=view,
        )

    @property
    def items(self) -> list[ItemView]:
        return self.view.items

    def _summaries(self):
        from .display import ItemSummary, describe_data

        return [
            ItemSummary(
                i.modality,
                i.index,
                i.offset,
                i.length,
                i.is_embed,
                # sorted: the order of an item's fields varies from process to process
                {k: describe_data(i.data[k]) for k in sorted(i.data) if not k.startswith(BOOKKEEPING_PREFIX)},
            )
            for i in self.items
        ]

    def _facts(self) -> list[str]:
        counts: dict[str, int] = {}
        for item in self.items:
            counts[item.modality] = counts.get(item.modality, 0) + 1
        media = ", ".join(f"{n} {m}{'s' if n > 1 else ''}" for m, n in counts.items()) or "no media"
        return [
            f"processors: {self.hf_processor} (transformers), called by {self.vllm_processor}",
            f"prompt: {len(self.tokens)} tokens, {media}",
        ]

    def __repr__(self) -> str:
        from .display import as_text

        return as_text(f"hf_bridge inspection of {self.source}", self._facts(), self.tokens, self._summaries())

    def _repr_html_(self) -> str:
        from .display import as_html

        return as_html(f"hf_bridge inspection of {self.source}", self._facts(), self.tokens, self._summaries())


def inspect(
    model_or_processor,
    prompt: str | list[int],
    *,
    images: list | None = None,
    videos: list | None = None,
    audios: list | None = None,
    mm_processor_kwargs: dict[str, Any] | None = None,
    trust_remote_code: bool = False,
) -> Inspection:
    """What hf_bridge makes of `prompt` and its items, for a checkpoint directory (only its
    config and processor files are read: no weights, no engine; `trust_remote_code` runs
    a checkpoint's own code, as vLLM's flag does) or a processor from `build_processor`.
    An item may be a file's path, read as vLLM's server decodes the file (`media_files`)."""
    processor = (
        build_processor(model_or_processor, trust_remote_code=trust_remote_code)
        if isinstance(model_or_processor, (str, Path))
        else model_or_processor
    )
    given = {"image": images, "video": videos, "audio": audios}
    mm_data = {modality: [_read_if_path(modality, item) for item in items] for modality, items in given.items() if items}
    return Inspection.of(processor, inspect_prompt(processor, prompt, mm_data, mm_processor_kwargs))


def _read_if_path(modality: str, item: Any) -> Any:
    """`item`, or the file it names read as vLLM's server reads it: an image, a video's
    frames and metadata, an audio clip and its rate (vLLM's parser resamples it)."""
    if not isinstance(item, (str, Path)):
        return item
    from . import media_files

    readers = {"image": media_files.read_image, "video": media_files.read_video, "audio": media_files.audio_samples}
    return readers[modality](str(Path(item).expanduser()))


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
    prompt_ids = list(out["prompt_token_ids"])
    if not mm_data:  # the engine runs no multimodal processor here, and adds what the HF one would
        prompt_ids = with_added_tokens(prompt_ids, added_tokens(processor))
    return PromptView(prompt_ids, items, dict(out["mm_hashes"]))


class _CallableModule(types.ModuleType):
    """`hf_bridge.inspect(...)` is `inspect(...)`; the module's other names stay reachable
    (`hf_bridge.inspect.build_processor`)."""

    def __call__(self, *args, **kwargs) -> Inspection:
        return inspect(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
