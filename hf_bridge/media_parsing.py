"""How a request's media are read before processing: vLLM's parser, with branches for
embedding items given as dicts (`embeds.py`), each video's own metadata
(`video_metadata.py`), clips with several channels (`audio_channels.py`) and an
installed resampling method (`audio_resampling.py`); media sent in a form vLLM misreads
refused with how to send them.
"""

from __future__ import annotations

from vllm.exceptions import VLLMValidationError
from vllm.multimodal.parse import MultiModalDataParser

from . import errors
from .audio_channels import MonoClipParser, array_rows_shape
from .audio_resampling import installed_resampler
from .probes import MODALITIES
from .video_metadata import MetadataKeepingParser


class HFBridgeDataParser(MonoClipParser, MetadataKeepingParser):
    """vLLM's parser with every branch hf_bridge adds to it."""


class MediaParsingMixin:
    """The processing info's parser, and its refusals of media it would misread."""

    def get_data_parser(self) -> MultiModalDataParser:
        """vLLM's parser for this processor, taking embedding items as dicts too (`embeds.py`),
        keeping each given video's metadata (`video_metadata.py`), averaging each clip's
        channels (`audio_channels.py`), resampling audio with a method that is installed
        (`audio_resampling.py`)."""
        parser = super().get_data_parser()
        parser.__class__ = HFBridgeDataParser  # adds branches; every setting kept
        parser.audio_resampler.method = installed_resampler(parser.audio_resampler.method)
        return parser

    def parse_mm_data(self, mm_data, *, validate: bool = True):
        if validate:
            errors.check_media_types(mm_data)
            self._check_embeddings_taken(mm_data)
        try:
            return super().parse_mm_data(mm_data, validate=validate)
        except VLLMValidationError as exc:  # vLLM's count of the items it read
            shape = array_rows_shape(mm_data.get("audio"))
            if exc.parameter != "audio" or shape is None:
                raise
            raise VLLMValidationError(f"{exc.args[0]} {errors.audio_rows_read_as_clips(shape)}", parameter="audio") from exc

    def _check_embeddings_taken(self, mm_data) -> None:
        """vLLM reads a bare 3-D torch tensor as embeddings, and refuses them without
        `enable_mm_embeds` by naming that flag alone; an image tensor as torchvision reads
        it (channels x height x width) is pixels, which the refusal should say how to send."""
        if self.ctx.get_mm_config().enable_mm_embeds:
            return
        for modality, value in mm_data.items():
            if modality in MODALITIES and MultiModalDataParser.is_embeddings(value):
                raise ValueError(errors.embeddings_not_taken(modality, value))
