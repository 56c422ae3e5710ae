"""Each video's metadata (its fps, its frames' indices), kept wherever it is given.

vLLM's parser keeps a video's metadata, and vLLM's Transformers backend hands it to the HF
processor, only where the processor was saved to sample frames (`_video_needs_metadata`).
Elsewhere vLLM drops it, yet processors read it without sampling too: the timestamps
SmolVLM, VideoLLaMA3, MiniMax-M3-VL and Nemotron-H-Omni write into the prompt, Qwen2.5-VL's
`second_per_grid_ts` (its temporal positions). Without it each falls back to a frame rate
of its own (24 fps, or 1), so a served video of which vLLM's loader kept 32 frames was
timed as if its frames were consecutive at that rate. Here the parser keeps the metadata
whenever given, so that it also keys the processor cache, and it reaches the processor
whenever every video of the request has it, as transformers' own video loading hands it.
A request may ask for sampling itself (`mm_processor_kwargs={"do_sample_frames": True,
"fps": 1}`), which needs it (the engine's kwargs asking for sampling count as a saved
setting: `HFBridgeProcessingInfo._video_needs_metadata`).

A served video holds at most the frames vLLM's loader kept, while its metadata counts the
whole video's: a call that samples them again is refused (`refuse_sampling_a_part`).
"""

from __future__ import annotations

from vllm.multimodal.parse import VideoProcessorItems
from vllm.multimodal.processing.processor import HFMultiModalInputs

from . import errors
from .embeds import DictEmbeddingParser

SAMPLING_FLAG = "do_sample_frames"
"""What vLLM's video loader adds to a video's metadata: a flag for the processor call, not
metadata, so never handed on as such (as vLLM's backend drops it)."""


class MetadataKeepingParser(DictEmbeddingParser):
    """vLLM's parser (with embedding dicts), keeping each given video's metadata beside its
    frames where vLLM would drop it, in the `(frames, metadata)` pair vLLM keeps otherwise."""

    def _parse_video_data(self, data):
        items = super()._parse_video_data(data)
        if self.video_needs_metadata or not isinstance(items, VideoProcessorItems) or not isinstance(items.metadata, list):
            return items
        kept = [video if metadata is None else (video, metadata) for video, metadata in zip(items.data, items.metadata)]
        return VideoProcessorItems(kept, metadata=items.metadata)


def with_video_metadata(hf_inputs: HFMultiModalInputs) -> HFMultiModalInputs:
    """`hf_inputs` with the kept pairs split into frames and, where every video came with
    its metadata, the `video_metadata` the processor takes. Without it the processor
    decides, as transformers does: sampling to a number of frames needs none, and sampling
    by time is refused, with the processor's own error and the fix
    (`errors.video_sampled_without_metadata`)."""
    pairs = [video if isinstance(video, tuple) else (video, None) for video in hf_inputs.hf_data["videos"]]
    hf_inputs.hf_data["videos"] = [frames for frames, _ in pairs]
    if all(metadata is not None for _, metadata in pairs):
        hf_inputs.hf_data["video_metadata"] = [
            {k: v for k, v in metadata.items() if k != SAMPLING_FLAG} for _, metadata in pairs
        ]
    return hf_inputs


def refuse_sampling_a_part(hf_data: dict) -> None:
    """Refuse to have the processor sample a video of which vLLM's loader kept only some
    frames (its `num_frames`, 32 by default): the processor picks indices over the whole
    video's frame count from its metadata, which would index past the frames kept, or pick
    other frames than transformers would from the whole video."""
    for index, (frames, metadata) in enumerate(zip(hf_data["videos"], hf_data.get("video_metadata") or ())):
        total = metadata.get("total_num_frames") if isinstance(metadata, dict) else None
        if isinstance(total, int) and len(frames) < total:
            raise ValueError(errors.video_sampled_twice(index, len(frames), total))
