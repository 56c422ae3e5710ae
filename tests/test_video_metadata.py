"""A video's metadata reaches the HF processor wherever it is given: where the call samples
frames, also when a request asks for sampling of a processor saved not to, and where the
processor only times the frames by it (`video_metadata.py`)."""

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


def test_metadata_a_processor_does_not_read_changes_nothing(qwen2_vl):
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
    processor's own error and vLLM's form that carries the metadata, also where another
    video of the request has its metadata (the processor takes all or none)."""
    prompt = parity.prompt_text(qwen2_vl.info.get_hf_processor(), CASE)
    two_frames = inspect_prompt(qwen2_vl, prompt, {"video": VIDEO}, {"do_sample_frames": True, "num_frames": 2})
    assert two_frames.items[0].data["video.video_grid_thw"].tolist() == [[1, 8, 8]]
    refused = (r"Video 0 of this request could not be processed .*Asked to sample `fps` frames per second but no "
               r"video metadata was provided.*sample frames by time .*without its metadata.*`\(frames, metadata\)` pair"
               r".*num_frames")
    with pytest.raises(ValueError, match=refused):
        inspect_prompt(qwen2_vl, prompt, {"video": VIDEO}, SAMPLED)
    two_prompt = parity.prompt_text(qwen2_vl.info.get_hf_processor(), parity.Case("videos", num_videos=2))
    with pytest.raises(ValueError, match=refused):
        inspect_prompt(qwen2_vl, two_prompt, {"video": [(VIDEO, video_metadata(len(VIDEO))), VIDEO]}, SAMPLED)


def _served(frames, num_frames: int):
    """`frames` as vLLM's front end holds a served video: written to MP4 and read back by
    its OpenCV loader, which keeps at most `num_frames` of them."""
    from vllm.multimodal.media import ImageMediaIO, VideoMediaIO

    from hf_bridge.server import video_data_url

    encoded = video_data_url(frames).split(",", 1)[1]
    return VideoMediaIO(ImageMediaIO(), num_frames=num_frames).load_base64("video/mp4", encoded)


def test_a_served_video_is_sampled_by_its_loaded_metadata(qwen2_vl):
    hf_processor = qwen2_vl.info.get_hf_processor()
    prompt = parity.prompt_text(hf_processor, CASE)
    served = _served(parity.test_video(num_frames=8), num_frames=32)
    frames, metadata = served.media
    assert len(frames) == metadata["total_num_frames"] == 8 and metadata["fps"] == 2.0
    view = inspect_prompt(qwen2_vl, prompt, {"video": [served]}, SAMPLED)
    as_given = {k: v for k, v in metadata.items() if k != "do_sample_frames"}  # the loader's flag, not metadata
    reference = hf_processor(text=[prompt], videos=[frames], video_metadata=[as_given], **SAMPLED, return_tensors="pt")
    assert view.prompt_ids == reference["input_ids"][0].tolist()
    assert view.items[0].data["video.video_grid_thw"].tolist() == reference["video_grid_thw"].tolist() == [[2, 8, 8]]


def _served_as_transformers_times_it(processor, prompt: str, served) -> tuple:
    """What hf_bridge makes of a served video, and what transformers makes of its frames with
    their metadata, and without (timed by the processor's own fallback frame rate)."""
    hf_processor = processor.info.get_hf_processor()
    frames, metadata = served.media
    as_given = {k: v for k, v in metadata.items() if k != "do_sample_frames"}  # the loader's flag, not metadata
    timed = hf_processor(text=[prompt], videos=[frames], video_metadata=[as_given], return_tensors="pt")
    untimed = hf_processor(text=[prompt], videos=[frames], return_tensors="pt")
    return inspect_prompt(processor, prompt, {"video": [served]}), timed, untimed


def test_a_served_video_is_timed_by_its_metadata_where_the_processor_reads_it_without_sampling(zoo):
    """Qwen2.5-VL is saved not to sample frames, so vLLM drops a video's metadata, yet its
    processor times each grid step by it (`second_per_grid_ts`, its M-RoPE's temporal
    positions). vLLM's loader kept 4 of the video's 8 frames at 2 fps, 1 frame a second:
    2 frames per grid step are 2 s apart, where the processor's fallback, 24 fps, had
    timed them 1/12 s apart."""
    processor = build_processor(zoo("qwen2_5_vl"))
    assert not processor.info._video_needs_metadata  # vLLM's backend hands it no metadata
    prompt = parity.prompt_text(processor.info.get_hf_processor(), CASE)
    served = _served(parity.test_video(num_frames=8), num_frames=4)
    assert len(served.media[0]) == 4 and served.media[1]["total_num_frames"] == 8 and served.media[1]["fps"] == 2.0
    view, timed, untimed = _served_as_transformers_times_it(processor, prompt, served)
    assert view.prompt_ids == timed["input_ids"][0].tolist()
    assert view.items[0].data["video.second_per_grid_ts"].tolist() == timed["second_per_grid_ts"].tolist() == [2.0]
    assert untimed["second_per_grid_ts"].tolist() == pytest.approx([2 / 24])


def test_a_served_videos_timestamps_in_the_prompt_are_its_frames_own(generic):
    """VideoLLaMA3's processor writes each frame's time into the prompt from the metadata,
    falling back to 1 fps without it. vLLM's loader kept frames 0, 2, 4 and 7 of a 2 fps
    video: they are at 0, 1, 2 and 3.5 s, as transformers times them with the same
    metadata, where the fallback had them at 0, 1, 2 and 3 s."""
    model_dir = generic("video_llama_3")
    processor = build_processor(model_dir)
    assert not processor.info._video_needs_metadata
    prompt = parity.prompt_text(processor.info.get_hf_processor(), CASE)
    view, timed, untimed = _served_as_transformers_times_it(processor, prompt, _served(parity.test_video(num_frames=8), num_frames=4))
    assert view.prompt_ids == timed["input_ids"][0].tolist() != untimed["input_ids"][0].tolist()
    tokenizer = processor.info.get_tokenizer()
    assert "Time 3.5s:" in tokenizer.decode(view.prompt_ids) and "Time 3.0s:" in tokenizer.decode(untimed["input_ids"][0])


def test_sampling_frames_the_loader_sampled_already_is_refused_with_the_fix(qwen2_vl):
    """The processor would pick indices over the whole video's 8 frames from the 4 kept."""
    prompt = parity.prompt_text(qwen2_vl.info.get_hf_processor(), CASE)
    served = _served(parity.test_video(num_frames=8), num_frames=4)
    assert len(served.media[0]) == 4 and served.media[1]["total_num_frames"] == 8
    with pytest.raises(ValueError, match=r"Video 0 of this request holds 4 of its 8 frames: vLLM's video loader sampled it "
                                         r"already .*load every frame .*num_frames.*: -1"):
        inspect_prompt(qwen2_vl, prompt, {"video": [served]}, SAMPLED)
    kept = inspect_prompt(qwen2_vl, prompt, {"video": [served]})  # the frames vLLM loaded, as they are
    assert kept.items[0].data["video.video_grid_thw"].tolist() == [[2, 8, 8]]


def test_sampling_asked_by_the_engine_asks_each_videos_metadata_as_a_saved_sampler_does(zoo):
    """The engine's `mm_processor_kwargs` reach every call: its blank videos come with
    metadata (video input stayed switched off: every blank was refused), and vLLM asks each
    video's, with the flag its loader sets saying whether the frames are still to sample."""
    processor = build_processor(zoo("qwen2_vl"), mm_processor_kwargs=SAMPLED)
    hf_processor = processor.info.get_hf_processor()
    assert not hf_processor.video_processor.do_sample_frames and processor.info._video_needs_metadata
    assert "video" in processor.info.supported_mm_limits
    prompt = parity.prompt_text(hf_processor, CASE)
    raw = inspect_prompt(processor, prompt, {"video": (VIDEO, {**video_metadata(len(VIDEO)), "do_sample_frames": True})})
    reference = parity.hf_inputs(hf_processor, CASE)
    assert raw.prompt_ids == reference["input_ids"][0].tolist()
    assert raw.items[0].data["video.video_grid_thw"].tolist() == [[1, 8, 8]]
    with pytest.raises(ValueError, match="Video metadata is required but not found in mm input"):
        inspect_prompt(processor, prompt, {"video": VIDEO})


def test_the_engines_nested_kwargs_reach_a_call_merged_as_vllm_merges_them(zoo):
    """The engine's `videos_kwargs` and a request's are merged key by key (vLLM's context
    does), so an embedded video's blank stand-in still carries the metadata the engine's
    sampling needs; merged shallowly, the request's `videos_kwargs` replaced the engine's,
    and the blank was refused."""
    engine = {"videos_kwargs": SAMPLED}
    processor = build_processor(zoo("qwen2_vl"), mm_processor_kwargs=engine, enable_mm_embeds=True)
    prompt = parity.prompt_text(processor.info.get_hf_processor(), CASE)
    hidden = processor.info.get_hf_config().text_config.hidden_size
    embedded = {"video_embeds": torch.zeros(16, hidden), "video_grid_thw": torch.tensor([[1, 8, 8]])}  # 2 frames, merged 2x2
    alone = inspect_prompt(processor, prompt, {"video": embedded})
    with_request = inspect_prompt(processor, prompt, {"video": embedded}, {"videos_kwargs": {"min_frames": 2}})
    assert with_request.prompt_ids == alone.prompt_ids
    assert alone.prompt_ids.count(processor.info.get_hf_processor().video_token_id) == 16
