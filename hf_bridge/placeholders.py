"""Where each multimodal item sits in a prompt, from the HF processor's token types.

Pure functions over plain lists: no torch, no vLLM. They read the convention of
transformers' `ProcessorMixin.create_mm_token_type_ids` (`return_mm_token_type_ids`):
0 text, 1 image, 2 video, 3 audio.

Two facts about real processors shape the logic (see the project notes):

- an item's range holds *grid padding* tokens that receive no embedding: row breaks,
  `[IMG_BREAK]`/`[IMG_END]`, begin/end markers. Some processors type them as the
  modality, some as text (SmolVLM's row/column markers), so types alone cannot bound
  an item;
- adjacent items of one modality merge into one typed run, so runs alone cannot
  separate them.

hf_bridge therefore learns each item's *expansion* by processing the item alone
inside a probe text whose only non-text token is one placeholder
(`expansion_from_probe`), and then locates expansions inside whole prompts by exact
matching (`locate_items`), which splits merged runs and covers untyped markers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

TOKEN_TYPE_IDS: Mapping[str, int] = {"text": 0, "image": 1, "video": 2, "audio": 3}
"""transformers' `mm_token_type_ids` values."""
MODALITY_OF_TYPE: Mapping[int, str] = {v: k for k, v in TOKEN_TYPE_IDS.items()}


class PlaceholderError(ValueError):
    """The processor's output cannot be read as one expansion per item."""


class NoTokensError(PlaceholderError):
    """The processor expanded an item's placeholder to no tokens at all (LightOnOCR's, for an
    image smaller than one merged patch): the model would not see the item."""


@dataclass(frozen=True)
class Run:
    """A maximal stretch of equal token types: `[start, end)`."""

    type_id: int
    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start


def runs(type_ids: Sequence[int]) -> list[Run]:
    """Split `type_ids` into maximal runs of one value (text runs included)."""
    out: list[Run] = []
    start = 0
    for i in range(1, len(type_ids) + 1):
        if i == len(type_ids) or type_ids[i] != type_ids[start]:
            if len(type_ids):
                out.append(Run(type_ids[start], start, i))
            start = i
    return out


@dataclass(frozen=True)
class Expansion:
    """What one item's placeholder becomes in the prompt.

    `token_ids` is the whole replacement, grid padding included; `is_embed` marks the
    positions that receive one row of the item's encoder output each.
    """

    modality: str
    token_ids: tuple[int, ...]
    is_embed: tuple[bool, ...]
    type_ids: tuple[int, ...]
    """The processor's own token types over the expansion (what M-RoPE reads)."""
    encoder_modality: str = ""
    """Whose encoder makes the embeddings: the modality the processor *typed* the item
    as. Usually the item's own; InternVL types a video's frames as image tokens, and
    its model encodes them as images."""

    def __post_init__(self):
        if not (len(self.token_ids) == len(self.is_embed) == len(self.type_ids)):
            raise ValueError("token_ids, is_embed and type_ids must have equal lengths")
        if not self.encoder_modality:
            object.__setattr__(self, "encoder_modality", self.modality)

    @property
    def num_embeds(self) -> int:
        return sum(self.is_embed)

    def __len__(self) -> int:
        return len(self.token_ids)


def feature_token_id(token_ids: Sequence[int], type_ids: Sequence[int], type_id: int) -> int:
    """The token that carries the embeddings: the most frequent one of type `type_id`.

    Used only when the checkpoint names no feature token that occurs in the expansion.
    Every processor in transformers repeats its feature token once per embedding row,
    and markers occur at most once per row, so the mode is the feature token.
    """
    typed = [t for t, ty in zip(token_ids, type_ids) if ty == type_id]
    if not typed:
        raise PlaceholderError(f"no token is typed as {MODALITY_OF_TYPE.get(type_id, type_id)}")
    return Counter(typed).most_common(1)[0][0]


def expansion_from_probe(
    modality: str,
    probe_ids: Sequence[int],
    placeholder_span: tuple[int, int],
    processed_ids: Sequence[int],
    processed_type_ids: Sequence[int],
    embed_token_candidates: Sequence[int] = (),
) -> Expansion:
    """Read one item's expansion off the processor's output for a one-item probe.

    `probe_ids` is the probe text tokenized as the processor's tokenizer does, with the
    item's placeholder (one token or several, such as Qwen's
    `<|vision_start|><|image_pad|><|vision_end|>`) at `placeholder_span`, a
    `[start, end)` pair. The processor keeps what stands before and after the
    placeholder, so the expansion is what lies between that frame in
    `processed_ids`, whatever the token types say: untyped markers are inside.

    The embedding positions hold the first of `embed_token_candidates` (the feature
    tokens the checkpoint names) that occurs in the expansion, else the most frequent
    typed token.
    """
    start, stop = placeholder_span
    prefix = list(probe_ids[:start])
    suffix = list(probe_ids[stop:])
    end = len(processed_ids) - len(suffix)
    if list(processed_ids[: len(prefix)]) != prefix or end < len(prefix) or (
        suffix and list(processed_ids[end:]) != suffix
    ):
        raise PlaceholderError(
            f"the processor changed the text around the {modality} placeholder, so its "
            "expansion cannot be located"
        )
    outside = [
        i
        for i, ty in enumerate(processed_type_ids)
        if ty != 0 and not (len(prefix) <= i < end)
    ]
    if outside:
        raise PlaceholderError(
            f"the processor typed tokens outside the {modality} placeholder's expansion "
            f"as multimodal (positions {outside[:5]})"
        )
    token_ids = tuple(processed_ids[len(prefix) : end])
    type_ids = tuple(processed_type_ids[len(prefix) : end])
    if not token_ids:
        raise NoTokensError(f"the processor expanded the {modality} placeholder to no tokens")
    typed = Counter(t for t in type_ids if t != 0)
    if not typed:
        raise PlaceholderError(
            f"the processor typed no token of the {modality} expansion as multimodal; it "
            "does not report `mm_token_type_ids` for this modality"
        )
    own = TOKEN_TYPE_IDS[modality]
    encoder_type = own if own in typed else typed.most_common(1)[0][0]
    embed = next((c for c in embed_token_candidates if c in token_ids), None)
    if embed is None:
        embed = feature_token_id(token_ids, type_ids, encoder_type)
    is_embed = tuple(t == embed for t in token_ids)
    return Expansion(modality, token_ids, is_embed, type_ids, MODALITY_OF_TYPE[encoder_type])


@dataclass(frozen=True)
class ItemRange:
    """Where one item's expansion sits in a whole prompt (vLLM's `PlaceholderRange`)."""

    modality: str
    index: int
    """The item's index within its modality."""
    offset: int
    length: int
    is_embed: tuple[bool, ...]


def locate_items(
    token_ids: Sequence[int],
    type_ids: Sequence[int],
    expansions: Sequence[Expansion],
) -> list[ItemRange]:
    """Find each expansion, in prompt order, inside a whole prompt's token ids.

    `expansions` lists the prompt's items in the order they appear. Matching exact
    sequences splits items that sit back to back (one merged typed run) and covers
    markers typed as text. Every token typed as multimodal must be claimed by an
    item, so nothing is silently left over.
    """
    ranges: list[ItemRange] = []
    per_modality: Counter[str] = Counter()
    cursor = 0
    for exp in expansions:
        offset = find_sublist(token_ids, exp.token_ids, cursor)
        if offset is None:
            raise PlaceholderError(
                f"{exp.modality} item {per_modality[exp.modality]} ({len(exp)} tokens) "
                "does not appear in the prompt after the previous item"
            )
        unclaimed = [i for i in range(cursor, offset) if type_ids[i] != 0]
        if unclaimed:
            raise PlaceholderError(f"multimodal tokens at {unclaimed[:5]} belong to no item")
        ranges.append(
            ItemRange(exp.modality, per_modality[exp.modality], offset, len(exp), exp.is_embed)
        )
        per_modality[exp.modality] += 1
        cursor = offset + len(exp)
    unclaimed = [i for i in range(cursor, len(token_ids)) if type_ids[i] != 0]
    if unclaimed:
        raise PlaceholderError(f"multimodal tokens at {unclaimed[:5]} belong to no item")
    return ranges


def find_sublist(haystack: Sequence[int], needle: Sequence[int], start: int = 0) -> int | None:
    """Index of the first occurrence of `needle` at or after `start`, else None."""
    n = len(needle)
    if n == 0:
        return None
    first = needle[0]
    for i in range(start, len(haystack) - n + 1):
        if haystack[i] == first and tuple(haystack[i : i + n]) == tuple(needle):
            return i
    return None


def type_ids_for_prompt(
    length: int, ranges: Sequence[ItemRange], expansions: Sequence[Expansion]
) -> list[int]:
    """Rebuild a prompt's `mm_token_type_ids` from where its items sit.

    The inverse of `locate_items`: what the HF processor would have returned for the
    prompt, which position-id schemes such as M-RoPE read.
    """
    out = [0] * length
    for r, exp in zip(ranges, expansions, strict=True):
        out[r.offset : r.offset + r.length] = exp.type_ids
    return out


def find_all_sublists(haystack: Sequence[int], needle: Sequence[int]) -> list[int]:
    """Starts of the non-overlapping occurrences of `needle` in `haystack`, in order."""
    starts: list[int] = []
    while (i := find_sublist(haystack, needle, starts[-1] + len(needle) if starts else 0)) is not None:
        starts.append(i)
    return starts


def count_sublist(haystack: Sequence[int], needle: Sequence[int]) -> int:
    """Non-overlapping occurrences of `needle` in `haystack`."""
    return len(find_all_sublists(haystack, needle))


def longest_run(ids: Sequence[int], token: int) -> int:
    """The most times `token` follows itself in `ids`."""
    return max((run.length for run in runs(ids) if run.type_id == token), default=0)


def count_outside(ids: list[int], token: int, spans: Sequence[tuple[int, int]]) -> int:
    """How many of `ids` are `token` outside every `(offset, length)` span; the spans do
    not overlap, as items' placeholders do not (counted by list methods: a prompt is long)."""
    return ids.count(token) - sum(ids[offset : offset + length].count(token) for offset, length in spans)
