"""Processors that write a prompt's layout from its text alone: pure, no torch, no vLLM.

Idefics2's processor expands each `<image>` into markers around the image tokens, then
rewrites the text around them: adjacent images share one marker, and a space follows
each closing marker that a word touches. No per-item replacement can say that, so
hf_bridge's probe of it fails (`frame.frame_from_probes`). But its text step needs no
image: the text alone gives exactly the ids the text and images give together
(`ProcessorProbe.writes_prompt` checks so at engine start).

For such a processor, hf_bridge runs that text step on the prompt, then folds each
item's *core* (its expansion from its first to its last typed token) back into one
placeholder (`fold_cores`), leaving the markers and spaces the processor wrote as plain
prompt tokens; vLLM's prompt update then puts each item's core back (`typed_core`), so
the prompt vLLM runs is the one transformers runs, and each item still caches alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from .placeholders import Expansion, PlaceholderError, find_sublist


def typed_core(expansion: Expansion) -> Expansion:
    """`expansion` from its first to its last typed token: what is left of it once the
    processor's own text step has written the markers around it."""
    typed = [i for i, t in enumerate(expansion.type_ids) if t != 0]
    if not typed:
        raise PlaceholderError("the processor typed no token of the item as multimodal")
    start, stop = typed[0], typed[-1] + 1
    return Expansion(
        expansion.modality,
        expansion.token_ids[start:stop],
        expansion.is_embed[start:stop],
        expansion.type_ids[start:stop],
        expansion.encoder_modality,
    )


def fold_cores(written: Sequence[int], core: Sequence[int], placeholder: Sequence[int], count: int) -> list[int]:
    """`written` (the processor's ids for a prompt) with each of its `count` item cores,
    left to right, folded back into `placeholder`. Raises where it holds another number."""
    out: list[int] = []
    start = found = 0
    while (at := find_sublist(written, core, start)) is not None:
        out += [*written[start:at], *placeholder]
        start, found = at + len(core), found + 1
    out += written[start:]
    if found != count:
        raise PlaceholderError(f"the processor wrote {found} item(s) into the prompt for its {count} placeholder(s)")
    return out
