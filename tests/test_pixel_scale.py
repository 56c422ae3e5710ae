"""Pixels sent already scaled to [0, 1] are refused where the HF processor would scale
them again (`hf_bridge/pixel_scale.py`); pixels in 0-255, of any dtype, and pixels the
request says are scaled (`do_rescale=False`) are served."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from hf_bridge import pixel_scale

SHAPES = st.tuples(st.integers(1, 4), st.integers(1, 4), st.just(3))


@given(arrays(np.float32, SHAPES, elements=st.floats(0, 1, width=32)), st.booleans())
def test_floats_within_the_unit_range_are_scaled_up_exactly_unless_all_zero(pixels, as_tensor):
    sent = torch.from_numpy(pixels) if as_tensor else pixels
    scaled = pixel_scale.scaled_up("image", {"images": [sent]})
    if not pixels.any():
        assert scaled is None  # black either way
    else:
        assert np.array_equal(np.asarray(scaled["images"][0]), pixels * 255)


@given(arrays(np.float32, SHAPES, elements=st.floats(-300, 300, width=32)).filter(lambda a: a.min() < 0 or a.max() > 1))
def test_floats_outside_the_unit_range_are_left_alone(pixels):
    assert pixel_scale.scaled_up("image", {"images": [pixels]}) is None


def test_integer_pixels_images_and_other_modalities_are_left_alone():
    from PIL import Image

    ones = np.ones((4, 4, 3), np.uint8)
    assert pixel_scale.scaled_up("image", {"images": [ones]}) is None
    assert pixel_scale.scaled_up("image", {"images": [Image.fromarray(ones)]}) is None
    assert pixel_scale.scaled_up("audio", {"audio": [np.full(16, 0.5, np.float32)]}) is None
    video = {"videos": [np.full((2, 4, 4, 3), 0.5, np.float32)], "video_metadata": [{"fps": 2}]}
    scaled = pixel_scale.scaled_up("video", video)
    assert np.array_equal(scaled["videos"][0], video["videos"][0] * 255) and scaled["video_metadata"] == [{"fps": 2}]


class _Parts:
    def __init__(self, do_rescale):
        self.image_processor = type("ImageProcessor", (), {"do_rescale": do_rescale})()


@pytest.mark.parametrize(("saved", "asked", "rescales"), [
    (True, None, True), (False, None, False), (True, False, False), (False, True, True), (None, None, True),
])
def test_the_calls_do_rescale_overrides_the_saved_one(saved, asked, rescales):
    kwargs = {} if asked is None else {"do_rescale": asked}
    assert pixel_scale.rescales(_Parts(saved), "image", kwargs) is rescales


@pytest.mark.parametrize("backend", ["CLIPImageProcessor", "CLIPImageProcessorPil"])
def test_both_of_transformers_backends_scale_unit_floats_twice(backend):
    """transformers' torchvision and PIL image processors alike divide floats within
    [0, 1] by 255 again; the same pixels in 0-255 give the meant output."""
    import transformers

    processor = getattr(transformers, backend)(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})
    pixels = np.random.default_rng(0).integers(0, 256, (40, 30, 3)).astype(np.float32) / 255
    meant = pixel_scale.scaled_up("image", {"images": [pixels]})["images"][0]
    sent_out, meant_out = (processor(images=[p], return_tensors="pt") for p in (pixels, meant))
    assert pixel_scale.scaled_twice(sent_out, meant_out)
    integers_out = processor(images=[np.round(meant).astype(np.uint8)], return_tensors="pt")
    assert not pixel_scale.scaled_twice(integers_out, meant_out)


def test_unit_floats_are_refused_by_the_engines_processor_and_scaled_ones_served(zoo):
    """Through vLLM's processor for Qwen2-VL (no engine): an image and a video within
    [0, 1] are refused with the fix; the same image as floats in 0-255, or within [0, 1]
    with `do_rescale=False`, gets the uint8 image's prompt and, up to resizing's rounding,
    its pixels."""
    from transformers import AutoProcessor

    from hf_bridge.inspect import build_processor, inspect_prompt
    from hf_bridge.validate import parity

    model_dir = zoo("qwen2_vl")
    processor, hf_processor = build_processor(model_dir), AutoProcessor.from_pretrained(model_dir)
    cases = parity.standard_cases(64)
    image_prompt, video_prompt = (parity.prompt_text(hf_processor, cases[name]) for name in ("one_image", "video"))
    pixels = np.asarray(cases["one_image"].images[0])

    def pixel_values(image, kwargs=None):
        view = inspect_prompt(processor, image_prompt, {"image": image}, kwargs)
        return view.prompt_ids, view.items[0].data["image.pixel_values"]

    ids, meant = pixel_values(pixels)
    for image, kwargs in ((pixels.astype(np.float32), None), (pixels.astype(np.float32) / 255, {"do_rescale": False})):
        served_ids, served = pixel_values(image, kwargs)
        assert served_ids == ids and (served - meant).abs().max() < 0.25
    with pytest.raises(ValueError, match=r"^Image 0 of this request holds float pixels within \[0, 1\] .*Qwen2VLProcessor"):
        pixel_values([torch.from_numpy(pixels).permute(2, 0, 1) / 255])  # as torchvision's `ToTensor` gives it
    frames = np.asarray(cases["video"].videos[0])
    inspect_prompt(processor, video_prompt, {"video": frames.astype(np.float32)})
    with pytest.raises(ValueError, match=r"^Video 0 of this request holds float pixels within \[0, 1\]"):
        inspect_prompt(processor, video_prompt, {"video": frames.astype(np.float32) / 255})
