"""Media items with no text between them, where the model lays M-RoPE positions out by runs
of one token type (no vLLM import).

transformers' `get_rope_index` (Qwen2-VL's, and the models built on it) groups a prompt's
`mm_token_type_ids` into runs of one value and takes one item's grid per run: two items of
one modality with no text-typed token between them read as one item, and the positions
cannot be laid out. transformers raises; vLLM's worker computes them when it schedules the
request, where the error stops the engine. A chat template's markers keep items apart; a
prompt of bare placeholders (a checkpoint without a chat template) need not. The front end
finds it first, by the model's own method (`mrope.mrope_positions`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from .mrope import PlacedItem

TEXT_TYPE = 0
"""The token type of text in `mm_token_type_ids`."""


def touching(items: Sequence[PlacedItem]) -> list[tuple[int, int]]:
    """Pairs of `items` (indexes, in prompt order) whose typed tokens run into each other:
    one ends where the next begins, on a token of the type the next begins with, not text."""
    order = sorted(range(len(items)), key=lambda i: items[i].offset)
    pairs = []
    for first, second in zip(order, order[1:]):
        before, after = items[first], items[second]
        if before.offset + len(before.type_ids) != after.offset or not len(before.type_ids) or not len(after.type_ids):
            continue
        if int(before.type_ids[-1]) == int(after.type_ids[0]) != TEXT_TYPE:
            pairs.append((first, second))
    return pairs


def set_apart(input_ids: Sequence[int], items: Sequence[PlacedItem], pairs: Sequence[tuple[int, int]],
              text_token: int) -> tuple[list[int], list[PlacedItem]]:
    """The prompt with `text_token` before the second item of each of `pairs`, and the items
    moved on with it."""
    at = sorted({items[second].offset for _, second in pairs})
    ids = list(input_ids)
    for offset in reversed(at):
        ids.insert(offset, text_token)
    moved = [dataclasses.replace(item, offset=item.offset + sum(1 for a in at if a <= item.offset)) for item in items]
    return ids, moved


def touching_error(positions: Callable[[list[int], list[PlacedItem]], object], input_ids: Sequence[int],
                   items: Sequence[PlacedItem], text_token: int) -> tuple[tuple[int, int], Exception] | None:
    """(the first pair of touching items, the error) where computing the prompt's positions
    (`positions`, the model's own method) raises because items touch: computed again with a
    text token between each touching pair, they are laid out. None where no items touch,
    where the positions are computed as the prompt stands (MiniCPM-V 4.7's method does not
    group runs), or where they cannot be computed with the items apart either: the error has
    another cause then, not judged here."""
    pairs = touching(items)
    if not pairs:
        return None
    try:
        positions(list(input_ids), list(items))
        return None
    except Exception as error:  # noqa: BLE001 - the model's own method: any error it raises is its refusal
        caught = error
    try:
        positions(*set_apart(input_ids, items, pairs, text_token))
    except Exception:  # noqa: BLE001 - another cause
        return None
    return pairs[0], caught
