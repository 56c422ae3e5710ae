"""Which query tokens of a step attend past themselves, within their own media item.

A model that attends bidirectionally within each image (Gemma3, Gemma 4) lets a token of
an item see every key of that item, later ones included; every other token is causal.
vLLM hands the attention builder each request's items as inclusive position ranges
(`mm_req_doc_ranges`, from `is_embed`). For a step's flat query (`query_start_loc`) over
sequences now `seq_lens` long, a query at position p in an item [start, end] attends to
keys 0..end: exactly what a non-causal pass over a sequence cut at end + 1 computes. This
module turns the ranges into that pass's queries; `cpu_media_attention.py` runs it. A
model whose whole prompt attends both ways (PaliGemma's prefix) has one range per
request instead, its prompt (`prompt_ranges`).

Pure: no vLLM import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class MediaSpans:
    """One span per (request, item) the step's query reaches: a non-causal pass where span
    i's queries are rows `rows[query_start_loc[i]:query_start_loc[i + 1]]` of the step's
    query, the last of them at position seq_lens[i] - 1, and see keys 0..seq_lens[i]-1 of
    request `requests[i]`."""

    rows: list[int]
    query_start_loc: list[int]
    seq_lens: list[int]
    requests: list[int]

    @property
    def max_query_len(self) -> int:
        return max(b - a for a, b in zip(self.query_start_loc, self.query_start_loc[1:]))


def media_spans(
    query_start_loc: Sequence[int], seq_lens: Sequence[int], item_ranges: Mapping[int, Sequence[tuple[int, int]]]
) -> MediaSpans | None:
    """The spans of this step's query inside media items, or None when causal attention is
    already exact (no item's queries are in the step but its last token, e.g. decoding).

    A range reaching past what the step has computed (an item split across steps) is cut
    at the sequence's end, where its keys stop. hf_bridge's engines keep items whole
    (`disable_chunked_mm_input`), so that is only the rule, not a case they meet."""
    rows: list[int] = []
    starts = [0]
    lens: list[int] = []
    requests: list[int] = []
    for request, ranges in sorted(item_ranges.items()):
        first_row, end_row = query_start_loc[request], query_start_loc[request + 1]
        first_position = seq_lens[request] - (end_row - first_row)
        last_position = seq_lens[request] - 1
        for start, end in ranges:
            key_end = min(end, last_position)
            low = max(start, first_position)
            if low >= key_end:  # nothing in the step, or only the item's last key: causal sees all
                continue
            # Through key_end itself, though causal already gives it every key: the kernel
            # places a pass's queries at the end of its sequence (sliding windows count from there).
            rows.extend(range(first_row + low - first_position, first_row + key_end - first_position + 1))
            starts.append(len(rows))
            lens.append(key_end + 1)
            requests.append(request)
    if not requests:
        return None
    return MediaSpans(rows=rows, query_start_loc=starts, seq_lens=lens, requests=requests)


def prompt_ranges(prompt_lengths: Sequence[int]) -> dict[int, list[tuple[int, int]]]:
    """Each request's prompt as its one range, for a model whose prompt attends both ways:
    positions past it (generated tokens, recomputed with the prompt after a preemption)
    stay causal."""
    return {request: [(0, length - 1)] for request, length in enumerate(prompt_lengths) if length > 0}
