"""Media sent at another scale than the HF processor takes are refused where it would run
silently (`hf_bridge/media_scale.py`): pixels already scaled to [0, 1] where the processor
scales them again, PCM audio samples where the feature extractor takes floats within
[-1, 1]. Pixels in 0-255, of any dtype, pixels the request says are scaled
(`do_rescale=False`) and float clips are served."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from hf_bridge import media_scale

SHAPES = st.tuples(st.integers(1, 4), st.integers(1, 4), st.just(3))


@given(arrays(np.float32, SHAPES, elements=st.floats(0, 1, width=32)), st.booleans())
def test_floats_within_the_unit_range_are_scaled_up_exactly_unless_all_zero(pixels, as_tensor):
    sent = torch.from_numpy(pixels) if as_tensor else pixels
    scaled = media_scale.at_meant_scale("image", {"images": [sent]})
    if not pixels.any():
        assert scaled is None  # black either way
    else:
        assert np.array_equal(np.asarray(scaled["images"][0]), pixels * 255)


@given(arrays(np.float32, SHAPES, elements=st.floats(-300, 300, width=32)).filter(lambda a: a.min() < 0 or a.max() > 1))
def test_floats_outside_the_unit_range_are_left_alone(pixels):
    assert media_scale.at_meant_scale("image", {"images": [pixels]}) is None


def test_integer_pixels_images_and_other_modalities_are_left_alone():
    from PIL import Image

    ones = np.ones((4, 4, 3), np.uint8)
    assert media_scale.at_meant_scale("image", {"images": [ones]}) is None
    assert media_scale.at_meant_scale("image", {"images": [Image.fromarray(ones)]}) is None
    assert media_scale.at_meant_scale("audio", {"audio": [np.full(16, 0.5, np.float32)]}) is None
    assert media_scale.at_meant_scale("audio", {"audio": [np.full(16, 1.5, np.float32)]}) is None  # clipped, not PCM
    video = {"videos": [np.full((2, 4, 4, 3), 0.5, np.float32)], "video_metadata": [{"fps": 2}]}
    scaled = media_scale.at_meant_scale("video", video)
    assert np.array_equal(scaled["videos"][0], video["videos"][0] * 255) and scaled["video_metadata"] == [{"fps": 2}]


class _Parts:
    def __init__(self, do_rescale):
        self.image_processor = type("ImageProcessor", (), {"do_rescale": do_rescale})()


@pytest.mark.parametrize(("saved", "asked", "rescales"), [
    (True, None, True), (False, None, False), (True, False, False), (False, True, True), (None, None, True),
])
def test_the_calls_do_rescale_overrides_the_saved_one(saved, asked, rescales):
    kwargs = {} if asked is None else {"do_rescale": asked}
    assert media_scale.rescales(_Parts(saved), "image", kwargs) is rescales


@pytest.mark.parametrize("backend", ["CLIPImageProcessor", "CLIPImageProcessorPil"])
def test_both_of_transformers_backends_scale_unit_floats_twice(backend):
    """transformers' torchvision and PIL image processors alike divide floats within
    [0, 1] by 255 again; the same pixels in 0-255 give the meant output."""
    import transformers

    processor = getattr(transformers, backend)(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})
    pixels = np.random.default_rng(0).integers(0, 256, (40, 30, 3)).astype(np.float32) / 255
    meant = media_scale.at_meant_scale("image", {"images": [pixels]})["images"][0]
    sent_out, meant_out = (processor(images=[p], return_tensors="pt") for p in (pixels, meant))
    assert media_scale.parts_from(sent_out, meant_out)
    integers_out = processor(images=[np.round(meant).astype(np.uint8)], return_tensors="pt")
    assert not media_scale.parts_from(integers_out, meant_out)


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


@given(arrays(np.int16, st.integers(1, 64)), st.booleans())
def test_pcm_samples_are_scaled_into_the_unit_range(samples, resampled):
    """As integers, or as the floats vLLM's resampling makes of them where they reach past
    `PCM_FLOOR`: divided by int16's full scale either way."""
    sent = samples.astype(np.float64) if resampled else samples
    meant = media_scale.at_meant_scale("audio", {"audio": [sent]})
    if resampled and np.abs(samples.astype(np.int32)).max() <= media_scale.PCM_FLOOR:
        assert meant is None
    else:
        assert np.allclose(meant["audio"][0], samples / 32768) and np.abs(meant["audio"][0]).max() <= 1


def test_pcm_audio_is_refused_by_the_engines_processor_and_floats_served(generic):
    """Through vLLM's processor for Qwen2-Audio (Whisper's feature extractor, no engine): a
    clip of int16 samples, at the extractor's rate or at 44.1 kHz (resampled by vLLM to
    floats of the same scale), is refused; the same clip as floats gives the features
    transformers' extractor makes of them."""
    from transformers import AutoProcessor

    from hf_bridge.inspect import build_processor, inspect_prompt
    from hf_bridge.validate import parity

    model_dir = generic("qwen2_audio")
    processor, hf_processor = build_processor(model_dir), AutoProcessor.from_pretrained(model_dir)
    case = parity.standard_cases(64)["audio"]
    prompt, clip = parity.prompt_text(hf_processor, case), case.audios(16000)[0]
    pcm = np.round(clip / np.abs(clip).max() * 16384).astype(np.int16)
    floats = pcm.astype(np.float32) / 32768
    served = inspect_prompt(processor, prompt, {"audio": [(floats, 16000)]}).items[0].data["audio.input_features"]
    expected = hf_processor.feature_extractor(floats, sampling_rate=16000, return_tensors="pt")["input_features"]
    assert torch.allclose(served.reshape(expected.shape), expected)
    for sent, rate, shown in ((pcm, 16000, "int16 samples reaching 16384"), (np.repeat(pcm, 2), 32000, "float")):
        with pytest.raises(ValueError, match=rf"^Audio 0 of this request holds {shown}.*feature extractor takes floats within \[-1, 1\]"):
            inspect_prompt(processor, prompt, {"audio": [(sent, rate)]})


def test_an_extractor_that_normalizes_each_clip_reads_pcm_as_floats():
    """Wav2Vec2's extractor scales each clip to zero mean and unit variance: PCM and its
    floats give the same features, so such a clip is served."""
    from transformers import Wav2Vec2FeatureExtractor

    extractor = Wav2Vec2FeatureExtractor(do_normalize=True, return_attention_mask=False)
    pcm = (np.random.default_rng(0).standard_normal(16000) * 8000).astype(np.int16)
    meant = media_scale.at_meant_scale("audio", {"audio": [pcm]})["audio"][0]
    sent_out, meant_out = (extractor(clip, sampling_rate=16000, return_tensors="pt") for clip in (pcm, meant))
    assert not media_scale.parts_from(sent_out, meant_out)
