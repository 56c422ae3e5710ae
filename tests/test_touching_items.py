"""Media items with no text between them, on a model whose M-RoPE positions are laid out by
runs of one token type (`touching_items.py`, `touching_items_check.py`): refused in the front
end with the model's own error, where the worker had raised on them and stopped the engine."""

from __future__ import annotations

import copy
import shutil

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_bridge.mrope import PlacedItem, mrope_positions
from hf_bridge.touching_items import TEXT_TYPE, set_apart, touching, touching_error
from helpers.scenarios import run_scenario

TEXT_TOKEN = 7

# an item: (text tokens before it, its typed tokens, their type, text tokens it ends with)
item_layouts = st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4), st.sampled_from([1, 2]), st.integers(0, 1)),
                        min_size=1, max_size=5)


def laid_out(layouts) -> tuple[list[int], list[PlacedItem]]:
    ids, items = [], []
    for gap, typed, type_id, trailing in layouts:
        ids += [TEXT_TOKEN] * gap
        type_ids = torch.tensor([type_id] * typed + [TEXT_TYPE] * trailing)
        items.append(PlacedItem(len(ids), type_ids, {}))
        ids += [100 + type_id] * typed + [TEXT_TOKEN + 1] * trailing
    return ids + [TEXT_TOKEN], items


@settings(max_examples=60, deadline=None)
@given(item_layouts)
def test_items_touch_where_one_runs_into_the_next_of_its_type_and_set_apart_they_do_not(layouts):
    ids, items = laid_out(layouts)
    expected = [(i - 1, i) for i, (gap, _, type_id, _) in enumerate(layouts)
                if i and gap == 0 and layouts[i - 1][3] == 0 and layouts[i - 1][2] == type_id]
    assert touching(items) == expected

    apart_ids, apart_items = set_apart(ids, items, expected, TEXT_TOKEN)
    assert touching(apart_items) == []
    assert len(apart_ids) == len(ids) + len(expected)
    for item, moved in zip(items, apart_items):  # each item's tokens, moved on
        span = len(item.type_ids)
        assert apart_ids[moved.offset:moved.offset + span] == ids[item.offset:item.offset + span]
    assert [t for t in apart_ids if t != TEXT_TOKEN] == [t for t in ids if t != TEXT_TOKEN]


def qwen2_vl_positions(zoo):
    """The positions of the zoo's Qwen2-VL, by its own `get_rope_index`, built on the meta device as the check builds it."""
    from transformers import AutoConfig, Qwen2VLModel

    config = AutoConfig.from_pretrained(zoo("qwen2_vl"))
    with torch.device("meta"):
        model = Qwen2VLModel(copy.deepcopy(config))
    return lambda ids, items: mrope_positions(model.get_rope_index, ids, items)


def two_images(first_type: int, second_type: int) -> tuple[list[int], list[PlacedItem]]:
    """Two items of 2 x 2 merged patches (grid 1 x 4 x 4), the second right after the first."""
    grid = {1: "image_grid_thw", 2: "video_grid_thw"}
    items = [PlacedItem(4 * i, torch.tensor([t] * 4), {grid[t]: torch.tensor([1, 4, 4])}) for i, t in enumerate((first_type, second_type))]
    return [5] * 8 + [TEXT_TOKEN, TEXT_TOKEN], items


def test_the_models_own_error_is_found_where_items_of_one_type_touch(zoo):
    positions = qwen2_vl_positions(zoo)
    ids, items = two_images(1, 1)
    found = touching_error(positions, ids, items, TEXT_TOKEN)
    assert found is not None
    pair, error = found
    assert pair == (0, 1) and isinstance(error, RuntimeError) and "shape mismatch" in str(error)
    positions(*set_apart(ids, items, [pair], TEXT_TOKEN))  # what the check compares with: laid out


def test_an_image_touching_a_video_is_laid_out_and_not_refused(zoo):
    ids, items = two_images(1, 2)
    assert touching(items) == []
    assert touching_error(qwen2_vl_positions(zoo), ids, items, TEXT_TOKEN) is None


def test_an_error_the_items_set_apart_raise_too_is_not_put_down_to_their_touching():
    def never_laid_out(ids, items):
        raise IndexError("the model's method fails on any prompt")

    ids, items = two_images(1, 1)
    assert touching_error(never_laid_out, ids, items, TEXT_TOKEN) is None


@pytest.fixture(scope="module")
def template_less_qwen2_vl(zoo, tmp_path_factory):
    """The zoo's Qwen2-VL without its chat template: hf_bridge's placeholder is then the
    processor's bare `<|image_pad|>`, which the template wraps in `<|vision_start|>...`."""
    from transformers import AutoProcessor

    source = zoo("qwen2_vl")
    into = tmp_path_factory.mktemp("qwen2_vl_template_less")
    for path in source.iterdir():
        if path.name == "model.safetensors":
            (into / path.name).symlink_to(path)
        elif path.is_file() and path.name != "chat_template.jinja" and not path.name.startswith("hf_bridge_"):
            shutil.copy(path, into / path.name)
    assert AutoProcessor.from_pretrained(into).chat_template is None
    return into


@pytest.fixture(scope="module")
def touching_results(template_less_qwen2_vl):
    return run_scenario("touching-items", template_less_qwen2_vl, timeout=300, multiprocess=False)


@pytest.mark.slow
@pytest.mark.parametrize("step", ["touching_seen", "touching_new"])
def test_images_with_no_text_between_them_are_refused_with_the_models_error_and_the_fix(touching_results, step):
    # the worker had raised "shape mismatch" computing the positions, and the engine stopped
    result = touching_results[step]
    assert not result["ok"], f"{step} was accepted"
    assert result["error"].startswith("ValueError: image[0] and image[1] of this request have no text between them, "
                                      "and Qwen2VLModel lays its M-RoPE positions out by runs of one token type")
    assert "(RuntimeError: shape mismatch" in result["error"]
    assert "Put text between the items" in result["error"]


@pytest.mark.slow
def test_the_engine_serves_on_and_a_refused_requests_new_image_is_sent_again(touching_results):
    before = touching_results["good_before"]
    assert before["ok"] and len(before["tokens"]) == 8
    for step in ("good_after_touching_seen", "good_after_all"):
        assert touching_results[step]["ok"] and touching_results[step]["tokens"] == before["tokens"], step
    # the refused request's new image had entered vLLM's front-end cache as sent to the worker,
    # which never got it: the next request with it failed with a cache miss (P0/P1 drift)
    with_new = touching_results["good_with_the_new_image"]
    assert with_new["ok"] and len(with_new["tokens"]) == 8 and with_new["finish_reason"] == "length", with_new


@pytest.mark.slow
def test_an_image_touching_a_video_is_served(touching_results):
    result = touching_results["image_beside_video"]
    assert result["ok"] and len(result["tokens"]) == 8, result
