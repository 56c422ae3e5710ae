"""Refusals of an item whose processing would lose something silently: processor kwargs
that change what the encoder takes or pad the text, features empty or not numbers, a
clip cut short, media sent at another scale than the processor's. Each item is processed
alone, so each check compares its output with the same item processed otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from transformers import BatchFeature

from . import errors, media_scale, pixel_sides, split
from .probes import audio_sampling_rate, stated_audio_seconds


class ProcessorKwargsRefused(ValueError):
    """The HF processor refused a value of the processor kwargs: the request's fault, not the item's."""


class ItemChecksMixin:
    """The multimodal processor's refusals of one item, made after it processed it."""

    def _check_features_given(self, modality: str, index: int, item: dict, out: BatchFeature, expansion) -> None:
        """Refuse an item the processor places but gives nothing the encoder can read:
        features all empty (Gemma 3n's feature extractor gives a clip under one 32 ms frame
        no frames, yet 188 tokens, and its audio tower's first convolution raised on it in
        the engine's worker, which stopped the engine), or holding NaN (Parakeet's, which
        normalizes a clip by its own spread, gives a clip of one or two frames NaN; the
        reply, transformers' too, was token 0 throughout, silently)."""
        floats = {k: v for k in split.item_data_keys(list(out)) if isinstance(v := out[k], torch.Tensor) and v.is_floating_point()}
        shapes = {k: tuple(v.shape) for k, v in floats.items()}
        if empty := split.empty_features(shapes):
            raise ValueError(errors.item_gets_no_features(modality, index, self._item_sent(modality, item), self.info.get_hf_processor(),
                                                          expansion.num_embeds, {k: shapes[k] for k in empty}, self._placed_blank(modality)))
        if not_numbers := [k for k, v in floats.items() if bool(v.isnan().any())]:
            raise ValueError(errors.item_features_not_numbers(modality, index, self._item_sent(modality, item), self.info.get_hf_processor(),
                                                              {k: shapes[k] for k in not_numbers}))

    def _item_sent(self, modality: str, item: dict) -> str:
        """An item as the request sent it, for a refusal: a clip by its length, other media by size."""
        if modality == "audio":
            return f"{clip_seconds(item, audio_sampling_rate(self.info.probes.processor)):.4f} s"
        return sent_size(media_scale.sent_media(modality, item))

    def _placed_blank(self, modality: str) -> str | None:
        """A blank item the processor gives tokens, and how many (its usual probe, under the
        default kwargs): the size a refused item can be compared with. None for audio, whose
        too short clips are refused by their length, or where it cannot be read."""
        if modality not in ("image", "video"):
            return None
        try:
            shape = self.info.probes.blank_shape(modality)
            tokens = self.info.probes.blank_placeholder_length(modality, shape.width, shape.height, shape.frames)
        except Exception:  # noqa: BLE001 - the refusal stands without the example
            return None
        frames = f"{shape.frames} frames of " if modality == "video" else ""
        return f"one of {frames}{shape.width}x{shape.height} pixels gets {tokens} tokens"

    def _check_pixel_sides_kept(self, modality: str, index: int, out: BatchFeature, plain,
                                plain_kwargs: Mapping[str, object]) -> None:
        """Refuse processor kwargs that change the pixel sides the processor gives every
        item without them (`pixel_sides.py`: LLaVA's `do_resize=False`): the vision encoder
        takes that size alone, and raises on another in the engine's worker, which stops
        the engine. Which sides are fixed is learnt only where the kwargs changed the
        item's own (`plain`: its output and expansion without them)."""
        shapes = pixel_sides.tensor_shapes(out)
        if plain is not None and not pixel_sides.changed_sides(pixel_sides.fixed_sides([pixel_sides.tensor_shapes(plain[0])]), shapes):
            return
        fixed = self.info.probes.fixed_pixel_sides(modality, plain_kwargs)
        if changed := pixel_sides.changed_sides(fixed, shapes):
            raise ProcessorKwargsRefused(errors.kwargs_change_pixel_sides(modality, index, changed, self.info.get_hf_processor()))

    def _check_positions_follow_inputs(self, modality: str, out: BatchFeature, expansion, plain) -> None:
        """Refuse processor kwargs that change how many positions the processor gives the
        item but nothing the model encodes it from (LLaVA's `vision_feature_select_strategy`
        against its config's): the model would give the item's other count of rows, and
        that mismatch raises in the engine's worker, where it stops the engine. `plain` is
        the item's output and expansion without them; None where it needs them: nothing to
        compare with."""
        if plain is None:
            return
        plain_out, plain_expansion = plain
        if plain_expansion.num_embeds != expansion.num_embeds and same_model_inputs(plain_out, out):
            raise ProcessorKwargsRefused(errors.kwargs_change_positions_only(
                modality, expansion.num_embeds, plain_expansion.num_embeds, self.info.get_hf_processor()))

    def _check_no_padding_added(self, modality: str, index: int, expansion, plain) -> None:
        """Refuse processor kwargs that pad the text (`padding="max_length"`): an item is
        processed in a short text of its own, so the tokenizer's pad tokens landed inside
        its placeholder, where transformers pads the whole prompt's end (and masks them)."""
        pad = getattr(self.info.get_tokenizer(), "pad_token_id", None)
        if plain is None or pad is None:
            return

        def pads(e) -> int:
            return sum(1 for token, embeds in zip(e.token_ids, e.is_embed) if token == pad and not embeds)

        if (added := pads(expansion) - pads(plain[1])) > 0:
            raise ProcessorKwargsRefused(errors.kwargs_pad_the_text(modality, index, added, pad))

    def _check_clip_kept_whole(self, index: int, item: dict, out: BatchFeature, hf_kwargs: Mapping[str, object]) -> None:
        """Refuse a clip longer than the feature extractor takes whole (`stated_audio_seconds`)
        where transformers' processor cuts it. vLLM calls the processor with
        `truncation=False`, for the prompt's text; that reaches the feature extractor too,
        which then hands the model more frames than its encoder takes (Qwen2-Audio's raises,
        Gemma 3n's gives more rows than its placeholder holds, in the engine's worker, which
        stops the engine), whether vLLM or the request asked for `truncation=False`. Cutting
        it as transformers does would drop the rest of the clip silently; the request may
        ask for that (`truncation=True`)."""
        processor = self.info.probes.processor
        longest = stated_audio_seconds(processor)  # none stated (Parakeet takes any length): nothing to check
        seconds = clip_seconds(item, audio_sampling_rate(processor))
        if longest is None or seconds <= longest or hf_kwargs.get("truncation") is not False:
            return
        default_kwargs = {k: v for k, v in hf_kwargs.items() if k != "truncation"}
        default = self._probe_or_none("audio", item, default_kwargs)
        if default is not None and not same_model_inputs(default[0], out):
            raise ValueError(errors.audio_clip_cut(index, seconds, longest, self.info.get_hf_processor()))

    def _check_media_scale(self, modality: str, index: int, item: dict, out: BatchFeature,
                           hf_kwargs: Mapping[str, object]) -> None:
        """Refuse pixels sent scaled to [0, 1] where the processor scales them by 1/255 again,
        and PCM audio samples where the feature extractor takes floats within [-1, 1]
        (`media_scale.py`): the model would see the item nearly black, or hear it 32768 times
        louder, silently. Only such items pay for the second processing that tells."""
        processor = self.info.probes.processor
        meant = media_scale.at_meant_scale(modality, item)
        if meant is None or not media_scale.rescales(processor, modality, self.info.ctx.get_merged_mm_kwargs(hf_kwargs)):
            return
        meant_out = self._probe_or_none(modality, meant, hf_kwargs)  # None: nothing to compare with
        if meant_out is not None and media_scale.parts_from(out, meant_out[0]):
            sent = media_scale.sent_media(modality, item)
            raise ValueError(errors.audio_samples_as_pcm(index, sent.dtype, float(abs(sent).max()), processor)
                             if modality == "audio" else errors.pixels_scaled_twice(modality, index, self.info.get_hf_processor()))

    def _probe_or_none(self, modality: str, item: dict, kwargs: Mapping[str, object]):
        """The item's output and expansion under `kwargs` (most callers leave the request's own
        out, to compare), or None where the processor refuses it so: a diagnosis only."""
        try:
            return self.info.probes.probe(modality, item, kwargs)
        except Exception:  # noqa: BLE001 - only a diagnosis: the item's own error is reported
            return None


def sent_size(sent: Any) -> str:
    """An item as sent, by its size: an image's pixels (width x height), a video's frames, an
    array's shape; empty for anything else."""
    if isinstance(getattr(sent, "size", None), tuple):  # a PIL image
        return f"{sent.size[0]}x{sent.size[1]} pixels"
    if isinstance(sent, (np.ndarray, torch.Tensor)):
        return f"an array of shape {tuple(sent.shape)}"
    if isinstance(sent, (list, tuple)) and sent and (frame := sent_size(sent[0])):
        return f"{len(sent)} frames of {frame}"
    return ""


def clip_seconds(item: dict, sampling_rate: int) -> float:
    """Length of a one-clip audio item (`ProcessorProbe.iter_items`), in seconds."""
    (clip,) = item["audio"]
    return max(np.shape(clip), default=0) / sampling_rate  # a stereo clip's samples: its longer dimension


def same_model_inputs(first: BatchFeature, second: BatchFeature) -> bool:
    """Whether two outputs of one item agree in what fixes the size of the model's output for
    it: floating tensors by shape, other fields (grids, sizes, counts) by value."""
    keys = split.item_data_keys(list(first))
    return sorted(keys) == sorted(split.item_data_keys(list(second))) and all(_same_input(first[k], second[k]) for k in keys)


def _same_input(first: object, second: object) -> bool:
    if isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor):
        if first.shape != second.shape or first.is_floating_point() != second.is_floating_point():
            return False
        return first.is_floating_point() or bool((first == second).all())
    if isinstance(first, (list, tuple)) and isinstance(second, (list, tuple)):
        return len(first) == len(second) and all(map(_same_input, first, second))
    return repr(first) == repr(second)
