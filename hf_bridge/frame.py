"""Tokens an HF processor adds to a prompt *outside* the items' expansions.

Pure functions over plain lists: no torch, no vLLM.

Some processors rewrite more of the prompt than the placeholders: PaliGemma puts BOS
after the last image and a newline at the end, Chameleon ends every prompt with its
separator, Emu3 starts it with BOS, and Fuyu inserts the image itself, at the start,
followed by BOS. vLLM only replaces placeholders, so without these tokens the prompt
it runs differs from the one transformers runs.

hf_bridge learns a processor's `PromptFrame` once, from probes with blank items:

    P1 = ph S            -> leading + E + after_last + S + trailing
    P2 = ph S ph S       -> leading + E + S + E + after_last + S + trailing

where `ph` is one placeholder (nothing for a processor that inserts the item itself),
`S` a sentinel word, and `E` a blank item's expansion. The first segment of P2 is
`leading + E`, its second `E + after_last`, and P1's segment before S is all three, so
the lengths of `leading`, `E` and `after_last` follow. A processor that takes only one
item per prompt (Fuyu) gives no P2; then the untyped tokens after the last typed one in
P1's segment are taken as `after_last`.

A prompt without items is framed too: the processor's ids for the sentinel alone against
the tokenizer's (`text_only_frame`). vLLM runs no multimodal processor on such a prompt,
so hf_bridge adds them where vLLM tokenizes it (`text_only_prompts.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .placeholders import PlaceholderError, find_sublist


@dataclass(frozen=True)
class PromptFrame:
    """Where a processor adds tokens of its own, relative to a prompt's items."""

    leading: tuple[int, ...] = ()
    """At the very start of a prompt that has items."""
    after_last_item: tuple[int, ...] = ()
    """Right after the last item of this modality (PaliGemma's BOS, Fuyu's BOS)."""
    trailing: tuple[int, ...] = ()
    """At the very end (PaliGemma's newline, Chameleon's separator)."""
    inserts_item: bool = False
    """The processor puts each item at the start itself; prompts hold no placeholder."""

    @property
    def is_empty(self) -> bool:
        return not (self.leading or self.after_last_item or self.trailing or self.inserts_item)


def frame_from_probes(
    one_item: Sequence[int],
    one_item_types: Sequence[int],
    two_items: Sequence[int] | None,
    sentinel: Sequence[int],
    text_before: Sequence[int] = (),
    inserts_item: bool = False,
) -> PromptFrame:
    """Read a `PromptFrame` off the processed ids of the probes P1 and P2 (see module doc).

    `text_before` are the ids the tokenizer itself puts before the placeholder (its own
    BOS, say): they are the prompt's, not the processor's, and are not part of `leading`.
    """
    first = find_sublist(one_item, sentinel)
    if first is None:
        raise PlaceholderError("the processor dropped or changed the text after the placeholder")
    segment, trailing = list(one_item[:first]), tuple(one_item[first + len(sentinel) :])
    if two_items is not None:
        a = find_sublist(two_items, sentinel)
        b = find_sublist(two_items, sentinel, (a or 0) + len(sentinel)) if a is not None else None
        if a is None or b is None:
            raise PlaceholderError("the processor dropped or changed the text between two placeholders")
        lead_and_item = a
        item_and_after = b - a - len(sentinel)
        lead_len = len(segment) - item_and_after
        after_len = len(segment) - lead_and_item
    else:
        typed = [i for i, t in enumerate(one_item_types[:first]) if t != 0]
        if not typed:
            raise PlaceholderError("the processor typed no token of the item as multimodal")
        lead_len = 0 if inserts_item else len(text_before)
        after_len = len(segment) - (typed[-1] + 1)
    if lead_len < 0 or after_len < 0 or lead_len + after_len > len(segment):
        raise PlaceholderError("the processor's additions around items are not the same for every item")
    leading = segment[:lead_len]
    if not inserts_item:
        # the tokenizer's own prefix (BOS) stays the prompt's; what precedes it is the frame's
        if leading[len(leading) - len(text_before) :] != list(text_before):
            raise PlaceholderError("the processor changed the text before the placeholder")
        leading = leading[: len(leading) - len(text_before)]
    after = segment[len(segment) - after_len :] if after_len else []
    return PromptFrame(tuple(leading), tuple(after), trailing, inserts_item)


def text_only_frame(processed: Sequence[int], tokenized: Sequence[int]) -> PromptFrame | None:
    """What a processor adds to a prompt without items: `processed` are its ids for a
    text alone, `tokenized` the tokenizer's for the same text (its own BOS included).
    None where the processor changed the text itself (its ids hold no copy of the
    tokenizer's), so that no frame can say what it did."""
    at = find_sublist(processed, tokenized)
    if at is None:
        return None
    return PromptFrame(leading=tuple(processed[:at]), trailing=tuple(processed[at + len(tokenized) :]))


def strip_frame(
    frame: PromptFrame, processed: Sequence[int], types: Sequence[int]
) -> tuple[list[int], list[int]]:
    """Remove a one-item probe's frame tokens, leaving tokenizer text + expansion."""
    start = len(frame.leading)
    stop = len(processed) - len(frame.trailing)
    body, body_types = list(processed[start:stop]), list(types[start:stop])
    if list(processed[:start]) != list(frame.leading) or list(processed[stop:]) != list(frame.trailing):
        raise PlaceholderError("the processor's additions to this item's prompt differ from a blank item's")
    cut = len(body) - len(frame.after_last_item)
    if body[cut:] != list(frame.after_last_item):
        raise PlaceholderError("the processor's additions after this item differ from a blank item's")
    return body[:cut], body_types[:cut]


def apply_frame(
    prompt: Sequence[int], frames: Sequence[tuple[PromptFrame, Sequence[int], int]]
) -> list[int]:
    """The prompt as the processor would lay it out: `frames` holds, per modality present,
    its frame, its placeholder ids and its number of items.

    Items a processor inserts itself get a placeholder at the start (vLLM then expands
    it like any other); its additions go after the last placeholder of its modality, and
    the leading and trailing tokens once, from the first modality that has any.
    """
    out = list(prompt)
    for frame, placeholder, count in frames:
        if frame.inserts_item and count:
            out = list(placeholder) * count + out
    for frame, placeholder, count in frames:
        if frame.after_last_item and count:
            last = _last_index(out, placeholder)
            if last is not None:
                at = last + len(placeholder)
                out[at:at] = frame.after_last_item
    leading = next((f.leading for f, _, n in frames if n and f.leading), ())
    trailing = next((f.trailing for f, _, n in frames if n and f.trailing), ())
    return [*leading, *out, *trailing]


def _last_index(haystack: Sequence[int], needle: Sequence[int]) -> int | None:
    last, start = None, 0
    while (i := find_sublist(haystack, needle, start)) is not None:
        last, start = i, i + len(needle)
    return last
