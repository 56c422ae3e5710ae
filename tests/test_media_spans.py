"""Which query rows attend past themselves within a media item: pure functions, checked
against the key set transformers' mask gives each query (`(causal OR same item)`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hf_bridge.media_spans import media_spans, prompt_ranges


def test_a_prefill_with_one_image_recomputes_the_image_rows():
    # one request, 10 prompt tokens all in this step, the image at positions 3..6
    spans = media_spans([0, 10], [10], {0: [(3, 6)]})
    assert spans.rows == [3, 4, 5, 6]
    assert (spans.query_start_loc, spans.seq_lens, spans.requests) == ([0, 4], [7], [0])


def test_decoding_after_the_images_is_causal():
    assert media_spans([0, 1, 2], [12, 30], {0: [(3, 6)], 1: [(0, 9), (12, 20)]}) is None


def test_a_step_starting_inside_an_item_recomputes_only_its_own_rows():
    # request 1's step covers positions 5..9 of an item at 2..8 (a prefix-cache hit ending inside it)
    spans = media_spans([0, 4, 9], [4, 10], {1: [(2, 8)]})
    assert spans.rows == [4, 5, 6, 7]  # positions 5..8
    assert spans.seq_lens == [9]


@st.composite
def batches(draw):
    """Requests with a step's query at the end of each sequence, and disjoint item ranges
    that may reach past what the step has computed."""
    query_start_loc, seq_lens, item_ranges = [0], [], {}
    for request in range(draw(st.integers(1, 4))):
        seq_len = draw(st.integers(1, 40))
        query_len = draw(st.integers(1, seq_len))
        seq_lens.append(seq_len)
        query_start_loc.append(query_start_loc[-1] + query_len)
        cuts = sorted(draw(st.sets(st.integers(0, seq_len + 8), max_size=6)))
        ranges = [(a, b) for a, b in zip(cuts[::2], cuts[1::2])]
        ranges += [(c, c) for c in draw(st.sets(st.integers(0, seq_len + 8), max_size=2)) if all(not a <= c <= b for a, b in ranges)]
        if ranges:
            item_ranges[request] = ranges
    return query_start_loc, seq_lens, item_ranges


@given(batches())
def test_every_row_sees_exactly_the_keys_transformers_mask_gives_it(batch):
    query_start_loc, seq_lens, item_ranges = batch
    spans = media_spans(query_start_loc, seq_lens, item_ranges)
    recomputed = {}
    if spans is not None:
        assert len(set(spans.rows)) == len(spans.rows), "a row is recomputed once"
        for i, request in enumerate(spans.requests):
            rows = spans.rows[spans.query_start_loc[i]:spans.query_start_loc[i + 1]]
            assert rows and rows == list(range(rows[0], rows[-1] + 1))
            assert query_start_loc[request] <= rows[0] and rows[-1] < query_start_loc[request + 1]
            assert spans.seq_lens[i] <= seq_lens[request]
            recomputed.update({row: spans.seq_lens[i] for row in rows})
            last_position = seq_lens[request] - (query_start_loc[request + 1] - rows[-1])
            assert last_position == spans.seq_lens[i] - 1, "the kernel places a pass's queries at its sequence's end"
    for request, seq_len in enumerate(seq_lens):
        first, end = query_start_loc[request], query_start_loc[request + 1]
        for row in range(first, end):
            position = seq_len - (end - first) + (row - first)
            item_ends = [b for a, b in item_ranges.get(request, []) if a <= position <= b]
            expected_keys = min(item_ends[0], seq_len - 1) + 1 if item_ends else position + 1
            got_keys = recomputed.get(row, position + 1)
            assert got_keys == expected_keys, (request, position)
            if row in recomputed and expected_keys == position + 1:
                assert recomputed.get(row - 1) == expected_keys, "only a span's last row may be causal already"


def test_a_whole_prompt_range_recomputes_the_prompt_and_leaves_generated_tokens_causal():
    # request 0: a 10-token prompt prefilled whole; request 1: resumed after a preemption,
    # its 6-token prompt and 3 generated tokens recomputed in one step; request 2 decoding
    ranges = prompt_ranges([10, 6, 5])
    assert ranges == {0: [(0, 9)], 1: [(0, 5)], 2: [(0, 4)]}
    spans = media_spans([0, 10, 19, 20], [10, 9, 8], ranges)
    assert spans.rows == [*range(10), *range(10, 16)]
    assert (spans.query_start_loc, spans.seq_lens, spans.requests) == ([0, 10, 16], [10, 6], [0, 1])


def test_rows_without_a_prompt_have_no_range():
    assert prompt_ranges([0, 3]) == {1: [(0, 2)]}
