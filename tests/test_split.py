"""Per-item batching and output splitting: pure functions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hf_bridge.split import SplitError, batch_groups, empty_features, item_data_keys, item_signature, split_rows


def test_text_keys_are_not_item_data():
    keys = ["input_ids", "attention_mask", "mm_token_type_ids", "pixel_values", "image_grid_thw"]
    assert item_data_keys(keys) == ["pixel_values", "image_grid_thw"]


def test_an_item_is_named_empty_only_when_all_its_floating_fields_are():
    # Gemma 3n's clip under one frame: no frames, so nothing for the audio tower
    assert empty_features({"input_features": (1, 0, 128)}) == ["input_features"]
    assert empty_features({"pixel_values": (0, 3, 8, 8), "pixel_values_videos": (0, 6)}) == ["pixel_values", "pixel_values_videos"]
    # a field that holds data is something to encode; no floating field at all says nothing
    assert empty_features({"pixel_values": (1, 3, 8, 8), "pixel_values_videos": (0, 6)}) == []
    assert empty_features({}) == []


@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), st.lists(st.integers(0, 3), min_size=1, max_size=4).map(tuple),
                       min_size=1))
def test_empty_features_names_every_field_exactly_when_none_holds_data(shapes):
    holds_data = any(0 not in shape for shape in shapes.values())
    assert empty_features(shapes) == ([] if holds_data else sorted(shapes))


def test_items_batch_only_when_all_but_rows_agree():
    # Qwen-style: rows differ (patches), trailing dims agree -> one call
    a = item_signature({"pixel_values": (36, 1176), "image_grid_thw": (1, 3)})
    b = item_signature({"pixel_values": (64, 1176), "image_grid_thw": (1, 3)})
    assert a == b
    # LLaVA-NeXT-style: per-item tile stacks of different counts -> separate calls
    c = item_signature({"pixel_values": (1, 5, 3, 56, 56)})
    d = item_signature({"pixel_values": (1, 3, 3, 56, 56)})
    assert c != d
    # a different non-tensor value never batches
    assert item_signature({"x": (1, 2), "mode": "a"}) != item_signature({"x": (1, 2), "mode": "b"})


def test_batch_groups_keep_order():
    assert batch_groups(["a", "b", "a", "c", "b"]) == [[0, 2], [1, 4], [3]]


@given(st.lists(st.integers(0, 4), max_size=30))
def test_batch_groups_partition_indices(signatures):
    groups = batch_groups(signatures)
    flat = sorted(i for g in groups for i in g)
    assert flat == list(range(len(signatures)))
    for g in groups:
        assert len({signatures[i] for i in g}) == 1
        assert g == sorted(g)


def test_split_rows_refuses_to_pad_or_cut():
    assert split_rows(10, [4, 6]) == [4, 6]
    with pytest.raises(SplitError, match="returned 9 embedding rows for 2 item"):
        split_rows(9, [4, 6])

