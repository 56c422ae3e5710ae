"""The pixel sides a processor fixes for every item: pure functions over shapes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hf_bridge.pixel_sides import IMAGE_CHANNELS, changed_sides, fixed_sides, pixel_sides

sides = st.tuples(st.integers(1, 2048), st.integers(1, 2048))
leading = st.lists(st.integers(1, 16), min_size=1, max_size=3)


@given(leading, st.sampled_from(IMAGE_CHANNELS), sides)
def test_a_tensor_laid_out_as_images_has_its_last_two_dimensions_as_sides(lead, channels, hw):
    assert pixel_sides((*lead, channels, *hw)) == hw


@given(st.lists(st.integers(1, 4096), max_size=3))
def test_flat_patches_and_short_tensors_have_no_sides(shape):
    # Qwen2-VL's (patches, 1176), Gemma 4's (1, 2520, 768), grids (1, 3)
    assert pixel_sides(shape) is None


def test_the_layouts_of_real_processors():
    assert pixel_sides((1, 3, 224, 224)) == (224, 224)  # LLaVA
    assert pixel_sides((1, 13, 3, 364, 364)) == (364, 364)  # Idefics3's tiles
    assert pixel_sides((660, 3, 14, 14)) == (14, 14)  # Kimi-K2.5's patches
    assert pixel_sides((1, 13, 364, 364)) is None  # Idefics3's pixel mask: 13 is no channel count
    assert pixel_sides((1, 2520, 768)) is None  # Gemma 4's patches padded to a budget the request may change


@given(leading, st.lists(sides, min_size=1, max_size=4))
def test_sides_are_fixed_only_where_every_item_got_them(lead, got):
    outputs = [{"pixel_values": (*lead, 3, *hw), "image_sizes": (1, 2)} for hw in got]
    assert fixed_sides(outputs) == ({"pixel_values": got[0]} if len(set(got)) == 1 else {})


@given(leading, leading, sides)
def test_an_output_like_those_learnt_from_changes_nothing(lead, other_lead, hw):
    # Gemma 3's pan and scan adds crops of the same size: more leading rows, the same sides
    fixed = fixed_sides([{"pixel_values": (*lead, 3, *hw)}, {"pixel_values": (*lead, 3, *hw)}])
    assert changed_sides(fixed, {"pixel_values": (*other_lead, 3, *hw)}) == {}


@given(leading, sides, sides)
def test_other_sides_or_another_layout_are_changes(lead, hw, other):
    fixed = {"pixel_values": hw}
    got = changed_sides(fixed, {"pixel_values": (*lead, 3, *other)})
    assert got == ({} if other == hw else {"pixel_values": (other, hw)})
    assert changed_sides(fixed, {"pixel_values": (4, 1176)}) == {"pixel_values": (None, hw)}
    assert changed_sides(fixed, {"image_grid_thw": (1, 3)}) == {}  # a key the output lacks: nothing to compare
