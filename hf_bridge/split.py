"""Per-item processor outputs: which keys are item data, how items batch, how outputs split.

Pure functions over plain data (shapes, lists, ints): no torch, no vLLM.

hf_bridge processes every multimodal item *alone* (see `processing.py`), so an item's
`BatchFeature` holds exactly what the HF processor produces for that item: nothing in
it is padded to a neighbour's size, and vLLM's processor cache can store and reuse it
under the item's own hash. These helpers then decide

- which keys of that `BatchFeature` are the item's data (`item_data_keys`), and whether
  they leave the encoder nothing to encode (`empty_features`),
- which items can share one encoder call (`batch_groups`): those whose tensors agree on
  every dimension but the first, so concatenating them along dim 0 gives exactly the
  layout the HF processor emits for several items of that size,
- how one encoder call's output rows go back to their items (`split_rows`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

TEXT_KEYS = frozenset(
    {"input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids", "text_replacement_offsets", "labels"}
)
"""Keys a processor emits for the probe text, not for the item (PaliGemma's processor
also returns training `labels` over the text)."""


def unbatched(value) -> list:
    """vLLM stacks same-shape `batched` fields into one tensor; undo that into a list
    (tensors are split along their first dimension, sequences listed as they are)."""
    if hasattr(value, "unbind"):
        return list(value.unbind(0))
    return list(value)


def item_data_keys(keys: Sequence[str]) -> list[str]:
    """The keys of a one-item `BatchFeature` that belong to the item."""
    return [k for k in keys if k not in TEXT_KEYS]


Shape = tuple[int, ...]


def empty_features(float_shapes: Mapping[str, Shape]) -> list[str]:
    """The keys of an item's floating-point fields (its pixels, its audio features), by
    shape, where every one of them is empty: the model's encoder would get nothing of the
    item. No keys where any holds data, or where the item has no such field."""
    if float_shapes and all(0 in shape for shape in float_shapes.values()):
        return sorted(float_shapes)
    return []


def item_signature(fields: Mapping[str, Shape | Hashable]) -> tuple:
    """What two items must share to be encoded in one call.

    A tensor field contributes its shape without the leading (row) dimension; any
    other value contributes itself. Keys are part of it: items missing a key do not
    batch with items that have it.
    """
    sig = []
    for key in sorted(fields):
        value = fields[key]
        if isinstance(value, tuple) and all(isinstance(d, int) for d in value):
            sig.append((key, "tensor", len(value), value[1:]))
        else:
            sig.append((key, "value", value))
    return tuple(sig)


def batch_groups(signatures: Sequence[Hashable]) -> list[list[int]]:
    """Group item indices by signature, keeping first-appearance order in and across groups."""
    groups: dict[Hashable, list[int]] = {}
    for i, sig in enumerate(signatures):
        groups.setdefault(sig, []).append(i)
    return list(groups.values())


class SplitError(ValueError):
    """An encoder's output does not have one row per embedding position."""


def split_rows(total_rows: int, counts: Sequence[int]) -> list[int]:
    """Rows of a flattened encoder output that belong to each item, in order.

    `counts` is each item's number of embedding positions (`Expansion.num_embeds`).
    The encoder must return exactly that many rows: anything else means the
    placeholders and the features disagree, which is never padded or cut to fit.
    """
    expected = sum(counts)
    if total_rows != expected:
        raise SplitError(
            f"the encoder returned {total_rows} embedding rows for {len(counts)} item(s) "
            f"whose placeholders hold {expected} ({list(counts)})"
        )
    return list(counts)
