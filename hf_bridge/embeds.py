"""Items sent as precomputed embeddings (`enable_mm_embeds`) instead of pixels.

A request may carry, per item, the rows the HF model's `get_<modality>_features` makes
of it, as vLLM's native models accept them:

- a tensor `(items, rows, hidden)` or a list of `(rows, hidden)` tensors, for processors
  whose placeholder does not depend on the image's size (LLaVA);
- a dict holding `<modality>_embeds` (the same, or one `(rows, hidden)` tensor for one
  item) and the processor's size metadata for each item, under the processor's own
  names (`image_grid_thw`, `image_sizes`), for processors whose placeholder does, and
  the timing a video's positions need (Qwen2.5-VL's `second_per_grid_ts`).

The placeholder is the one the HF processor makes for a blank item of that size; the
rows must fill it exactly, and given metadata must be what the processor makes of it.
Anything else is refused with the fix, never padded or cut.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from vllm.multimodal.inputs import MultiModalFieldConfig
from vllm.multimodal.parse import DictEmbeddingItems, EmbeddingItems, ModalityDataItems, MultiModalDataParser

EMBEDS_KEY = "{}_embeds"
"""The field an embedding item's rows travel under (vLLM's and transformers' name)."""

GRID_FIELDS = ("image_grid_thw", "video_grid_thw")
"""(frames, height, width) in patches: the item's sides are these times the patch size."""
SIZES_FIELD = "image_sizes"
"""(height, width) in pixels, as LLaVA-NeXT's and Pixtral's processors report them."""
POSITION_FIELDS = (*GRID_FIELDS, "second_per_grid_ts")
"""What an item's M-RoPE positions are computed from (`model.get_mrope_input_positions`):
Qwen2.5-VL's `second_per_grid_ts` is a video's time per temporal patch, from its fps."""


class DictEmbeddingParser(MultiModalDataParser):
    """vLLM's parser, plus embedding items given as a dict with their metadata (`parse_dict`)."""

    def _parse_image_data(self, data):
        if isinstance(data, Mapping):
            return parse_dict("image", data, self.expected_hidden_size)
        return super()._parse_image_data(data)

    def _parse_video_data(self, data):
        if isinstance(data, Mapping):
            return parse_dict("video", data, self.expected_hidden_size)
        return super()._parse_video_data(data)


def patch_sizes(processor: Any, modality: str) -> tuple[int | None, int]:
    """(pixels per patch side, frames per temporal patch) of the processor that takes `modality`."""
    sub = getattr(processor, f"{modality}_processor", None) or getattr(processor, "image_processor", None)
    value = getattr(sub, "patch_size", None)
    if isinstance(value, Mapping):
        value = value.get("height")
    temporal = getattr(sub, "temporal_patch_size", None)
    return (value if isinstance(value, int) else None), (temporal if isinstance(temporal, int) else 1)


def size_metadata_keys(fields: Mapping[str, Any]) -> list[str]:
    """The fields of a processed item that fix its placeholder's size."""
    return [k for k in (*GRID_FIELDS, SIZES_FIELD) if k in fields]


def timing_keys(fields: Mapping[str, Any]) -> list[str]:
    """The fields of a processed item that place its tokens in time but not its size: a
    blank item cannot stand in for them, so an embedding item must bring its own."""
    return [k for k in POSITION_FIELDS if k in fields and k not in GRID_FIELDS]


def blank_sides(metadata: Mapping[str, Any], patch_size: int | None, temporal_patch_size: int = 1) -> tuple[int | None, int | None, int | None]:
    """(width, height, frames) of a blank item the processor turns into the same placeholder."""
    for key in GRID_FIELDS:
        if key in metadata:
            if not patch_size:
                raise ValueError(f"{key} is given, but the processor names no patch_size to turn it into pixels")
            grid_t, height, width = (int(v) for v in torch.as_tensor(metadata[key]).reshape(-1)[:3])
            frames = grid_t * temporal_patch_size if key.startswith("video") else None
            return width * patch_size, height * patch_size, frames
    if SIZES_FIELD in metadata:
        height, width = (int(v) for v in torch.as_tensor(metadata[SIZES_FIELD]).reshape(-1)[:2])
        return width, height, None
    return None, None, None


def per_item(modality: str, items: ModalityDataItems) -> list[dict[str, Any]]:
    """Each embedding item as `{"<modality>_embeds": (rows, hidden), metadata...}`."""
    if isinstance(items, DictEmbeddingItems):
        return [dict(items.get(i)) for i in range(items.get_count())]
    return [{EMBEDS_KEY.format(modality): items.get(i)} for i in range(items.get_count())]


def is_embedding_items(items: ModalityDataItems) -> bool:
    return isinstance(items, (EmbeddingItems, DictEmbeddingItems))


def parse_dict(modality: str, data: Mapping[str, Any], hidden_size: int | None) -> DictEmbeddingItems:
    """A dict of `<modality>_embeds` plus per-item metadata, one entry per item."""
    key = EMBEDS_KEY.format(modality)
    if key not in data:
        raise ValueError(f"a {modality} given as a dict must hold {key!r} (the item's embedding rows); got {sorted(data)}")
    data = dict(data)
    rows = data[key]
    if isinstance(rows, torch.Tensor) and rows.ndim == 2:
        rows = [rows]  # one item
    if isinstance(rows, torch.Tensor) and rows.ndim == 3:
        rows = list(rows.unbind(0))
    if not (isinstance(rows, list) and all(isinstance(r, torch.Tensor) and r.ndim == 2 for r in rows)):
        raise ValueError(f"{key} must be (rows, hidden) for one item, (items, rows, hidden), or a list of (rows, hidden) tensors")
    if hidden_size is not None and any(r.shape[-1] != hidden_size for r in rows):
        widths = sorted({r.shape[-1] for r in rows})
        raise ValueError(f"{key} rows are {widths} wide; the model's text hidden size is {hidden_size}")
    data[key] = rows
    for name, value in data.items():
        if name != key:
            value = data[name] = _per_item_tensor(name, value)
        count = len(value) if isinstance(value, list) else int(value.shape[0])
        if count != len(rows):
            raise ValueError(f"{name} has {count} entries for {len(rows)} {modality} item(s): give one per item")
    return DictEmbeddingItems(data, modality, required_fields={key},
                              fields_factory=lambda d: {k: MultiModalFieldConfig.batched(modality) for k in d})


def _per_item_tensor(name: str, value: Any) -> torch.Tensor:
    """Metadata as the processor's tensors, one entry per item (a processor returns some,
    like `second_per_grid_ts`, as lists; a lone item's may come as a bare number)."""
    try:
        tensor = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"{name} must be numbers, one entry per item, as the processor returns it: {exc}") from exc
    return tensor.reshape(1) if tensor.ndim == 0 else tensor


def _require(modality: str, index: int, item: Mapping[str, Any], fields: list[str], needs: str) -> None:
    """Refuse an embedding item that lacks any of `fields`, saying what the processor needs them for."""
    missing = [k for k in fields if k not in item]
    if missing:
        raise ValueError(
            f"{modality} {index} is given as embeddings, but this {needs} {', '.join(missing)}: pass a dict "
            f"{{{EMBEDS_KEY.format(modality)!r}: rows, {missing[0]!r}: ...}} with the values the processor returned "
            f"for the {modality}")


def check_item(modality: str, index: int, item: Mapping[str, Any], num_embeds: int,
               probed: Mapping[str, Any], sides: tuple[int | None, int | None, int | None]) -> None:
    """Refuse an embedding item its placeholder cannot hold exactly."""
    key = EMBEDS_KEY.format(modality)
    rows = int(item[key].shape[0])
    _require(modality, index, item, size_metadata_keys(probed), f"processor sizes each {modality}'s placeholder by")
    _require(modality, index, item, timing_keys(probed), f"model positions each {modality}'s tokens in time by")
    for name in size_metadata_keys(item):
        given, made = torch.as_tensor(item[name]).reshape(-1), torch.as_tensor(probed[name]).reshape(-1)
        if given.tolist() != made.tolist():
            raise ValueError(
                f"{modality} {index}: {name}={given.tolist()} is not what the processor makes of a {sides[0]}x{sides[1]} "
                f"{modality} ({made.tolist()}): pass the {name} the processor returned for the {modality}")
    if rows != num_embeds:
        where = f"a {sides[0]}x{sides[1]} {modality}" if sides[0] else f"each {modality}"
        raise ValueError(
            f"{modality} {index} is given as {rows} embedding rows, but the processor's placeholder for {where} "
            f"holds {num_embeds}: pass the rows the model's get_{modality}_features returns for the item"
            + ("" if sides[0] else f", or the item's size metadata ({', '.join((*GRID_FIELDS, SIZES_FIELD))}) in a dict"))
