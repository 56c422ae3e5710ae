"""Placeholder derivation from token types: pure functions, tested exhaustively."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_bridge.placeholders import (
    TOKEN_TYPE_IDS,
    Expansion,
    NoTokensError,
    PlaceholderError,
    count_outside,
    expansion_from_probe,
    locate_items,
    longest_run,
    runs,
    type_ids_for_prompt,
)

BOS, IMG, BREAK, END, ROW, FAKE, VID = 1, 50, 51, 52, 53, 54, 60
TEXT = list(range(2, 40))


def test_runs_cover_the_sequence_in_order():
    assert [(r.type_id, r.start, r.end) for r in runs([0, 0, 1, 1, 1, 0, 2])] == [
        (0, 0, 2),
        (1, 2, 5),
        (0, 5, 6),
        (2, 6, 7),
    ]
    assert runs([]) == []


@given(st.lists(st.integers(0, 3), max_size=60))
def test_runs_partition_any_type_sequence(types):
    rs = runs(types)
    assert sum(r.length for r in rs) == len(types)
    assert all(a.end == b.start and a.type_id != b.type_id for a, b in zip(rs, rs[1:]))
    assert [t for r in rs for t in [r.type_id] * r.length] == types


def test_pixtral_grid_breaks_typed_as_image():
    # [IMG] [IMG] [IMG_BREAK] [IMG] [IMG] [IMG_END]: all typed 1, only [IMG] embeds
    grid = [IMG, IMG, BREAK, IMG, IMG, END]
    exp = expansion_from_probe("image", [BOS, IMG], (1, 2), [BOS, *grid], [0] + [1] * 6, [IMG])
    assert exp.token_ids == tuple(grid)
    assert exp.is_embed == (True, True, False, True, True, False)
    assert exp.num_embeds == 4


def test_smolvlm_markers_typed_as_text_stay_inside_the_item():
    # SmolVLM types row markers and the fake tokens around the image as text (0)
    grid = [FAKE, ROW, IMG, IMG, FAKE, ROW, IMG, IMG, FAKE]
    types = [0, 0, 1, 1, 0, 0, 1, 1, 0]
    exp = expansion_from_probe("image", [BOS, IMG], (1, 2), [BOS, *grid], [0, *types], [IMG])
    assert exp.token_ids == tuple(grid)
    assert exp.type_ids == tuple(types)
    assert exp.num_embeds == 4


def test_multi_token_placeholder_keeps_begin_and_end_markers():
    # Qwen: <|vision_start|><|image_pad|><|vision_end|> expands only the middle token
    vs, pad, ve = 70, 71, 72
    exp = expansion_from_probe("image", [vs, pad, ve], (0, 3), [vs, pad, pad, pad, ve], [0, 1, 1, 1, 0], [pad])
    assert exp.token_ids == (vs, pad, pad, pad, ve)
    assert exp.is_embed == (False, True, True, True, False)


def test_feature_token_falls_back_to_the_most_frequent_typed_token():
    exp = expansion_from_probe("image", [IMG], (0, 1), [END, IMG, IMG, IMG, END], [1] * 5)
    assert exp.is_embed == (False, True, True, True, False)


def test_candidates_absent_from_the_expansion_are_skipped():
    # Gemma3's processor names its begin-of-image marker; the config names the soft token
    boi, soft, eoi = 80, 81, 82
    exp = expansion_from_probe("image", [boi], (0, 1), [boi, soft, soft, eoi], [1, 1, 1, 1], [999, soft])
    assert exp.is_embed == (False, True, True, False)


def test_video_typed_as_image_is_encoded_as_image():
    # InternVL expands a video into per-frame image tokens typed 1
    exp = expansion_from_probe("video", [VID], (0, 1), [IMG, IMG, 3, IMG, IMG], [1, 1, 0, 1, 1], [IMG])
    assert exp.modality == "video" and exp.encoder_modality == "image"


def test_probe_errors_name_the_problem():
    with pytest.raises(PlaceholderError, match="changed the text around"):
        expansion_from_probe("image", [BOS, IMG, 9], (1, 2), [BOS, IMG, IMG, 8], [0, 1, 1, 0])
    with pytest.raises(PlaceholderError, match="outside"):
        expansion_from_probe("image", [BOS, IMG], (1, 2), [BOS, IMG], [1, 1])
    with pytest.raises(PlaceholderError, match="typed no token"):
        expansion_from_probe("image", [BOS, IMG], (1, 2), [BOS, IMG, IMG], [0, 0, 0])
    # LightOnOCR's image smaller than one merged patch: the placeholder is gone
    with pytest.raises(NoTokensError, match="expanded the image placeholder to no tokens"):
        expansion_from_probe("image", [BOS, IMG, 9], (1, 2), [BOS, 9], [0, 0])


def _exp(modality, tokens, types, embed):
    return Expansion(modality, tuple(tokens), tuple(t == embed for t in tokens), tuple(types))


def test_back_to_back_items_split_by_their_own_lengths():
    # Two LLaVA images with no text between merge into one typed run of 6
    a = _exp("image", [IMG] * 2, [1] * 2, IMG)
    b = _exp("image", [IMG] * 4, [1] * 4, IMG)
    prompt = [BOS, 5, *a.token_ids, *b.token_ids, 6]
    types = [0, 0, *a.type_ids, *b.type_ids, 0]
    assert len(runs(types)) == 3  # the two items are one run
    ranges = locate_items(prompt, types, [a, b])
    assert [(r.index, r.offset, r.length) for r in ranges] == [(0, 2, 2), (1, 4, 4)]


def test_mixed_modalities_keep_per_modality_indices():
    img = _exp("image", [IMG, IMG], [1, 1], IMG)
    vid = _exp("video", [VID, VID, VID], [2, 2, 2], VID)
    prompt = [BOS, *img.token_ids, 7, *vid.token_ids, *img.token_ids]
    types = [0, 1, 1, 0, 2, 2, 2, 1, 1]
    ranges = locate_items(prompt, types, [img, vid, img])
    assert [(r.modality, r.index, r.offset) for r in ranges] == [("image", 0, 1), ("video", 0, 4), ("image", 1, 7)]


def test_unclaimed_multimodal_tokens_are_an_error():
    img = _exp("image", [IMG, IMG], [1, 1], IMG)
    with pytest.raises(PlaceholderError, match="belong to no item"):
        locate_items([BOS, IMG, IMG, IMG], [0, 1, 1, 1], [img])
    with pytest.raises(PlaceholderError, match="does not appear"):
        locate_items([BOS, 3], [0, 0], [img])


# -- property: any prompt assembled from expansions is located exactly -----------------

_item = st.one_of(
    # Pixtral-like grid: rows of IMG separated by BREAK, closed by END, all typed image
    st.tuples(st.integers(1, 3), st.integers(1, 3)).map(
        lambda rc: _exp(
            "image",
            [t for r in range(rc[0]) for t in [IMG] * rc[1] + [BREAK if r < rc[0] - 1 else END]],
            [1] * (rc[0] * (rc[1] + 1)),
            IMG,
        )
    ),
    # SmolVLM-like: markers typed as text around typed image tokens
    st.integers(1, 3).map(
        lambda n: _exp("image", [FAKE, ROW, *[IMG] * n, FAKE], [0, 0, *[1] * n, 0], IMG)
    ),
    # plain video run
    st.integers(1, 5).map(lambda n: _exp("video", [VID] * n, [2] * n, VID)),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.lists(st.sampled_from(TEXT), max_size=3), _item), min_size=1, max_size=5),
    st.lists(st.sampled_from(TEXT), max_size=3),
)
def test_locate_items_recovers_every_item_exactly(pieces, tail):
    prompt, types, expected = [BOS], [0], []
    for text, exp in pieces:
        prompt += text
        types += [0] * len(text)
        expected.append((exp.modality, len(prompt), len(exp)))
        prompt += exp.token_ids
        types += exp.type_ids
    prompt += tail
    types += [0] * len(tail)
    expansions = [exp for _, exp in pieces]
    ranges = locate_items(prompt, types, expansions)
    assert [(r.modality, r.offset, r.length) for r in ranges] == expected
    for modality in TOKEN_TYPE_IDS:
        indices = [r.index for r in ranges if r.modality == modality]
        assert indices == list(range(len(indices)))
    assert type_ids_for_prompt(len(prompt), ranges, expansions) == types
    embeds = sum(r.is_embed.count(True) for r in ranges)
    assert embeds == sum(e.num_embeds for e in expansions)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(TEXT), max_size=4),
    _item,
    st.lists(st.sampled_from(TEXT), max_size=4),
)
def test_probe_recovers_the_expansion_whatever_frames_it(before, exp, after):
    placeholder = {"image": IMG, "video": VID}[exp.modality]
    probe = [BOS, *before, placeholder, *after]
    processed = [BOS, *before, *exp.token_ids, *after]
    types = [0] * (1 + len(before)) + list(exp.type_ids) + [0] * len(after)
    got = expansion_from_probe(exp.modality, probe, (1 + len(before), 2 + len(before)), processed, types, [placeholder])
    assert got == exp


@given(st.lists(st.integers(0, 3), max_size=30), st.lists(st.integers(0, 3), min_size=1, max_size=3))
def test_count_sublist_counts_non_overlapping_matches(haystack, needle):
    from hf_bridge.placeholders import count_sublist

    expected, i = 0, 0
    while i <= len(haystack) - len(needle):
        if haystack[i : i + len(needle)] == needle:
            expected, i = expected + 1, i + len(needle)
        else:
            i += 1
    assert count_sublist(haystack, needle) == expected


@given(st.lists(st.integers(0, 2), max_size=30), st.integers(0, 2))
def test_longest_run_is_the_most_times_a_token_follows_itself(ids, token):
    longest = longest_run(ids, token)
    assert _find(ids, [token] * longest) is not None and _find(ids, [token] * (longest + 1)) is None


def _find(ids, needle):
    return next((i for i in range(len(ids) - len(needle) + 1) if ids[i : i + len(needle)] == needle), None)


@given(st.lists(st.integers(0, 2), max_size=30), st.lists(st.tuples(st.integers(0, 4), st.integers(0, 8)), max_size=4))
def test_count_outside_counts_the_token_where_no_span_covers_it(ids, gaps_and_lengths):
    spans, offset = [], 0
    for gap, length in gaps_and_lengths:  # spans that do not overlap, as items' placeholders do not
        spans.append((offset + gap, length))
        offset += gap + length
    covered = [any(offset <= i < offset + length for offset, length in spans) for i in range(len(ids))]
    assert count_outside(ids, 1, spans) == sum(1 for t, c in zip(ids, covered) if t == 1 and not c)
