"""How many positions an item of the largest size takes, for vLLM's profiling and budgets:
the processor's own count where it has one, raised to what a blank item of that size
is given, and read off processed output where it cannot count.
"""

from __future__ import annotations

from collections.abc import Mapping

from vllm.logger import init_logger
from vllm.model_executor.models.transformers.multimodal import _MAX_FRAMES_PER_VIDEO
from vllm.multimodal.parse import ImageSize

from . import LOGGER_NAME, errors
from .probes import frames_asked_for, longest_audio_seconds

logger = init_logger(LOGGER_NAME)

MAX_COUNTED_SIDE = 1024
"""Largest side of the blank item processed to count tokens when a processor cannot."""


class TokenCountsMixin:
    """The processing info's counts of an item's positions (`MultiModalProcessingInfo`'s, made
    to hold for processors that cannot count, or count without their markers)."""

    def _get_num_image_tokens(self, size: ImageSize) -> int:
        try:
            return super()._get_num_image_tokens(size)
        except (AttributeError, KeyError, TypeError, NotImplementedError):
            return self._count_from_output("image", size)

    def _get_num_video_tokens(self, num_frames: int, size: ImageSize) -> int:
        try:
            count = super()._get_num_video_tokens(num_frames, size)
        except (AttributeError, KeyError, TypeError, NotImplementedError):
            count = None
        return count if count is not None else self._count_from_output("video", size, num_frames)

    def get_max_image_tokens(self) -> int:
        size = self.get_image_size_with_most_features()
        return self._at_least_counted("image", super().get_max_image_tokens(), size)

    def get_num_frames_with_most_features(self, seq_len: int, mm_counts: Mapping[str, int]) -> int:
        """vLLM's count, raised to the frames a sampling video processor asks for: it
        refuses a video with fewer (Gemma 4's samples 32, where vLLM's count gave 16)."""
        counted = self._most_frames_that_fit(seq_len, mm_counts)
        processor = self.probes.processor
        asked = frames_asked_for(processor) if self._video_needs_metadata else None
        return max(counted, asked or 0)

    def _most_frames_that_fit(self, seq_len: int, mm_counts: Mapping[str, int]) -> int:
        """vLLM's count, tried from the top first. vLLM adds frames one step at a time
        while the videos still fit in `seq_len`, counting each step's tokens; where the
        processor cannot count them, each count processes blank videos of every candidate
        size. A video's tokens do not fall as frames are added, so where the most frames
        vLLM would try fit, its search ends there. One count replaces up to 16, which were
        Nemotron-H-Omni's 100 processor calls and 30 s of its engine start."""
        step = self._get_min_video_frames()
        most = max(_MAX_FRAMES_PER_VIDEO // step, 1) * step
        if self._get_max_video_tokens_for_frames(most) * max(mm_counts.get("video", 0), 1) <= seq_len:
            return most
        return super().get_num_frames_with_most_features(seq_len, mm_counts)

    def get_max_video_tokens(self, seq_len: int, mm_counts: Mapping[str, int]) -> int:
        num_frames = self.get_num_frames_with_most_features(seq_len, mm_counts)
        size = self.get_video_size_with_most_features(num_frames)
        return self._at_least_counted("video", self._get_num_video_tokens(num_frames, size), size, num_frames)

    def get_max_audio_tokens(self) -> int:
        """The config's audio length where it names one, and the placeholder of the longest
        clip the feature extractor takes, counted; the larger (Qwen3-ASR's config names none)."""
        try:
            named = super().get_max_audio_tokens()
        except ValueError:
            named = 0
        seconds = longest_audio_seconds(self.probes.processor)
        return max(named, self.probes.blank_placeholder_length("audio", seconds=seconds))

    def _at_least_counted(self, modality: str, counted: int, size: ImageSize, num_frames: int = 1) -> int:
        """The processor's own count, raised to the placeholder of a blank item of `size`
        (counts may leave out markers; the profile must cover the whole range). Where the
        processor cannot process that item (MiniMax-M3-VL's video processor refuses frames
        whose sides are not multiples of its patch grid), its own count, with a warning."""
        size = _capped(size)
        try:
            return max(counted, self._count_from_output(modality, size, num_frames))
        except ValueError as error:  # the processor's own error, as vLLM's context reraises it
            shape = f"{size.width}x{size.height}" + (f", {num_frames} frames" if modality == "video" else "")
            logger.warning_once(errors.largest_item_not_processed(modality, shape, self.get_hf_processor(), error, counted))
            return counted

    def _count_from_output(self, modality: str, size: ImageSize, num_frames: int = 1) -> int:
        """Placeholder length of one blank item of `size` (`_capped`), read off processed output."""
        size = _capped(size)
        return self.probes.blank_placeholder_length(modality, size.width, size.height, num_frames)


def _capped(size: ImageSize) -> ImageSize:
    """Sides capped at `MAX_COUNTED_SIDE`: the size search probes a 10,000 px fallback,
    which only a processor that counts arithmetically can afford."""
    return ImageSize(width=min(size.width, MAX_COUNTED_SIDE), height=min(size.height, MAX_COUNTED_SIDE))
