"""Items whose expansion carries their position among the prompt's items: no torch, no vLLM.

Some processors write an item's index into its expansion: MiniCPM-V puts
`<image_id>1</image_id>` before the second image of a prompt. hf_bridge processes each
item alone, so every item's expansion carries the first item's number. A prompt with
two images then differed from transformers' in one token.

The number is learnt from blank items processed together. Where the expansion of the
blank at `index` differs from the first blank's, that window is the number, as a
`NumberWindow`. The window sits at the same distance from the start of every item's
expansion, or from its end, so `renumber` finds it there in a real item's expansion
and replaces it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .placeholders import PlaceholderError


@dataclass(frozen=True)
class NumberWindow:
    """Where the expansion of the blank item at some index differs from the first one's."""

    before: tuple[int, ...]
    """The tokens both blank expansions start with."""
    after: tuple[int, ...]
    """The tokens both end with."""
    first: tuple[int, ...]
    """The window's tokens in the first item's expansion."""
    at_index: tuple[int, ...]
    """The window's tokens in the expansion of the item at the index."""


def number_window(first: Sequence[int], at_index: Sequence[int]) -> NumberWindow | None:
    """The window where two blank items' expansions differ; None where they are equal
    (the processor does not number its items)."""
    first, at_index = tuple(first), tuple(at_index)
    if first == at_index:
        return None
    shortest = min(len(first), len(at_index))
    before = 0
    while before < shortest and first[before] == at_index[before]:
        before += 1
    after = 0
    while after < shortest - before and first[-1 - after] == at_index[-1 - after]:
        after += 1
    return NumberWindow(
        before=first[:before],
        after=first[len(first) - after:],
        first=first[before:len(first) - after],
        at_index=at_index[before:len(at_index) - after],
    )


def renumber(token_ids: Sequence[int], is_embed: Sequence[bool], window: NumberWindow | None) -> list[int]:
    """`token_ids` (an item's own expansion, numbered as the first item) numbered as the
    item at the window's index. The window holds no embedding, and the number takes as
    many tokens as the first item's, so `is_embed` and the token types stay aligned."""
    ids = list(token_ids)
    if window is None:
        return ids
    if len(window.at_index) != len(window.first):
        raise PlaceholderError(
            f"the processor numbers this item with {len(window.at_index)} tokens where the first item has "
            f"{len(window.first)}, which hf_bridge cannot renumber in place"
        )
    width = len(window.first)
    starts = (len(window.before), len(ids) - len(window.after) - width)
    for start, anchored in zip(starts, (_starts_with(ids, window.before), _ends_with(ids, window.after))):
        end = start + width
        if anchored and 0 <= start and ids[start:end] == list(window.first) and not any(is_embed[start:end]):
            return ids[:start] + list(window.at_index) + ids[end:]
    raise PlaceholderError(
        "the processor numbers its items, and this item's expansion does not hold the first item's "
        "number where a blank item's does"
    )


def _starts_with(ids: list[int], head: tuple[int, ...]) -> bool:
    return tuple(ids[: len(head)]) == head


def _ends_with(ids: list[int], tail: tuple[int, ...]) -> bool:
    return not tail or tuple(ids[len(ids) - len(tail):]) == tail
