"""Audio clips as speech models hear them: one channel.

vLLM's native audio models average a clip's channels (their parser's `target_channels=1`),
but only after resampling it along its last axis, which for a (samples, channels) clip,
as soundfile reads one, is its channels. The in-tree backend's parser keeps the channels,
and the feature extractor then refuses the clip. hf_bridge's parser averages a clip's
channels first, then resamples it (`MonoClipParser`).

A clip given with its rate as a torch tensor, as `torchaudio.load` returns it, reached the
feature extractor as a tensor, which Whisper's refused with a broadcasting error; vLLM turns
a clip given alone into numpy, and hf_bridge's parser does so for a clip with its rate too.

A bare 2-D array is not one clip to vLLM's parser but one clip per row. Where that reading
leaves the request's audio count wrong, the error says so (`array_rows_shape`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from vllm.multimodal.audio import MONO_AUDIO_SPEC, normalize_audio
from vllm.multimodal.parse import AudioProcessorItems, MultiModalDataParser


def array_rows_shape(value: Any) -> tuple[int, ...] | None:
    """The shape of `value` where it is one bare 2-D array of several rows, which vLLM reads
    as one clip per row."""
    if isinstance(value, (np.ndarray, torch.Tensor)) and value.ndim == 2 and value.shape[0] > 1:
        return tuple(value.shape)
    return None


class ArrayRowsAudioItems(AudioProcessorItems):
    """Clips that vLLM's parser read from the rows of one 2-D array, with that array's shape."""

    def __init__(self, data, array_shape: tuple[int, ...]) -> None:
        super().__init__(data)
        self.array_shape = array_shape


class MonoClipParser(MultiModalDataParser):
    """vLLM's parser, making each clip a numpy array and averaging its channels before it is resampled."""

    def _get_audio_with_sr(self, audio):
        clip, rate = super()._get_audio_with_sr(audio)
        if isinstance(clip, torch.Tensor):
            clip = clip.numpy(force=True)
        if isinstance(clip, np.ndarray) and clip.ndim == 2:
            clip = normalize_audio(clip, MONO_AUDIO_SPEC)
        return clip, rate

    def _parse_audio_data(self, data):
        items = super()._parse_audio_data(data)
        shape = array_rows_shape(data)
        if shape is not None and type(items) is AudioProcessorItems:
            return ArrayRowsAudioItems(items.data, shape)
        return items
