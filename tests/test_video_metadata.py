"""A video's metadata reaches the HF processor wherever the call samples frames, also when a
request asks for sampling of a processor saved not to (`video_metadata.py`)."""

from __future__ import annotations

import json

import pytest
import torch

from hf_bridge.inspect import build_processor, inspect_prompt, processor_cache
from hf_bridge.probes import video_metadata
from hf_bridge.validate import parity

SAMPLED = {"do_sample_frames": True, "fps": 1, "min_frames": 2}
"""Qwen2-VL's video processor, asked per request to sample at 1 fps: 2 of a test video's 4 frames."""
CASE = parity.Case("video", num_videos=1, processor_kwargs=json.dumps(SAMPLED))
VIDEO = CASE.videos[0]


@pytest.fixture(scope="module")
def qwen2_vl(zoo):
    processor = build_processor(zoo("qwen2_vl"))
    assert not processor.info.get_hf_processor().video_processor.do_sample_frames  # vLLM keeps no metadata for it
    return processor


def test_sampling_asked_per_request_processes_each_video_as_transformers_does(qwen2_vl):
    hf_processor = qwen2_vl.info.get_hf_processor()
    prompt = parity.prompt_text(hf_processor, CASE)
    reference = parity.hf_inputs(hf_processor, CASE)  # validate's reference: given the metadata
    served = inspect_prompt(qwen2_vl, prompt, {"video": (VIDEO, video_metadata(len(VIDEO)))}, SAMPLED)
    assert served.prompt_ids == reference["input_ids"][0].tolist()
    (item,) = served.items
    assert torch.equal(item.data["video.pixel_values_videos"], reference["pixel_values_videos"])
    assert item.data["video.video_grid_thw"].tolist() == reference["video_grid_thw"].tolist() == [[1, 8, 8]]
    every_frame = inspect_prompt(qwen2_vl, prompt, {"video": VIDEO})
    assert every_frame.items[0].data["video.video_grid_thw"].tolist() == [[2, 8, 8]]  # 4 frames, not sampled


def test_metadata_given_without_sampling_asked_stays_out_of_the_processor(qwen2_vl):
    prompt = parity.prompt_text(qwen2_vl.info.get_hf_processor(), CASE)
    frames_alone = inspect_prompt(qwen2_vl, prompt, {"video": VIDEO})
    with_metadata = inspect_prompt(qwen2_vl, prompt, {"video": (VIDEO, {**video_metadata(len(VIDEO)), "fps": 0.5})})
    assert with_metadata.prompt_ids == frames_alone.prompt_ids
    assert torch.equal(with_metadata.items[0].data["video.pixel_values_videos"],
                       frames_alone.items[0].data["video.pixel_values_videos"])


def test_metadata_keys_the_processor_cache(qwen2_vl):
    """The same frames claimed at another frame rate sample otherwise: never served from
    the other's cache entry."""
    prompt = parity.prompt_text(qwen2_vl.info.get_hf_processor(), CASE)
    cache = processor_cache(qwen2_vl)
    hashes = [inspect_prompt(qwen2_vl, prompt, {"video": (VIDEO, {**video_metadata(len(VIDEO)), "fps": fps})},
                             SAMPLED, cache=cache).hashes["video"][0] for fps in (2.0, 4.0, 2.0)]
    assert hashes[0] != hashes[1] and hashes[0] == hashes[2]


def test_frames_alone_are_sampled_as_the_processor_can_without_metadata(qwen2_vl):
    """To a number of frames, as before (no metadata needed); by time, refused with the
    processor's own error, as the request's processor kwargs are."""
    from hf_bridge.processing import ProcessorKwargsRefused

    prompt = parity.prompt_text(qwen2_vl.info.get_hf_processor(), CASE)
    two_frames = inspect_prompt(qwen2_vl, prompt, {"video": VIDEO}, {"do_sample_frames": True, "num_frames": 2})
    assert two_frames.items[0].data["video.video_grid_thw"].tolist() == [[1, 8, 8]]
    with pytest.raises(ProcessorKwargsRefused, match=r"Asked to sample `fps` frames per second but no video metadata was provided"):
        inspect_prompt(qwen2_vl, prompt, {"video": VIDEO}, SAMPLED)
