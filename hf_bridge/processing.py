"""vLLM's multimodal processor classes for hf_bridge: thin subclasses of the in-tree ones.

The in-tree Transformers backend already maintains most of what a generic processor
needs (dummy inputs for profiling, video metadata, size search). hf_bridge changes
three things, each a class of divergence from transformers:

- **Placeholders** come from `return_mm_token_type_ids`: each item is processed alone
  inside a probe made of the placeholder text the model's own chat template emits,
  and its expansion (grid padding and markers included) is read off the output with
  `placeholders.expansion_from_probe`.
- **Per-item data**: because each item is processed alone, its cached data is exactly
  what the HF processor makes of it, never padded to a neighbour (`split.py`).
- **Counting** never depends on `_get_num_multimodal_tokens` existing or supporting a
  modality: when the processor cannot count, the count is read from processed output
  (`token_counts.py`).

A request whose placeholders do not match its items is refused (`placeholder_pairing.py`),
and so is an item whose processing would lose something silently (`item_checks.py`), and
items the model's M-RoPE positions cannot be laid out for (`touching_items_check.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

import numpy as np
import torch
from transformers import BatchFeature
from vllm.logger import init_logger
from vllm.model_executor.models.transformers.multimodal import (
    MultiModalDummyInputsBuilder,
    MultiModalProcessingInfo,
    MultiModalProcessor,
)
from vllm.multimodal.inputs import MultiModalFieldConfig
from vllm.multimodal.parse import MultiModalDataItems

from . import LOGGER_NAME, embeds, errors, frame, media_scale, placeholders, processor_kwargs, split
from .dummy_request import building_dummy_request, is_dummy_request
from .encoding_paths import EncodingPathsMixin
from .hf_classes import config_built_from
from .item_checks import ItemChecksMixin, ProcessorKwargsRefused, clip_seconds, sent_size
from .item_keys import DATA_KEY, ENCODER_KEY, EXPANSION_KEY, IS_EMBED_KEY, NUM_EMBEDS_KEY, STACKS_KEY, TYPE_IDS_KEY, own_keys
from .probes import (
    AUDIO_SECONDS,
    HF_DATA_KEYS,
    ProbeError,
    audio_sampling_rate,
    kwargs_key,
    needs_video_metadata,
    samples_by_time,
)
from .media_parsing import MediaParsingMixin
from .numbered_updates import NumberedUpdatesMixin
from .placeholder_pairing import PlaceholderPairingMixin
from .processor_probe import ProcessorProbe
from .side_features import has_side_features
from .token_counts import TokenCountsMixin
from .token_inputs import media_need_token_ids
from .touching_items_check import TouchingItemsCheckMixin
from .video_metadata import refuse_sampling_a_part, with_video_metadata

logger = init_logger(LOGGER_NAME)

LEARNT_PROCESSORS = 4
_PROBES: dict[tuple[int, str], ProcessorProbe] = {}
"""What each HF processor object (vLLM caches one per model) was learnt to do, by the
object's id and the engine's processor kwargs, most recent last; a few kept, for
processes that build several engines."""


def hf_processor_class(model: str, revision: str | None) -> type:
    """The class to load the checkpoint's processor with: transformers' own where vLLM
    registers a class of its own under the name the checkpoint's processor config gives
    (vLLM's `InklingProcessor` has no `from_pretrained`; its `Cosmos3EdgeProcessor` is
    not transformers'), else `ProcessorMixin` (vLLM picks, as for the in-tree backend:
    also for a processor of the checkpoint's own code, `auto_map`)."""
    import transformers
    from transformers import ProcessorMixin
    from vllm.transformers_utils import processors
    from vllm.transformers_utils.processor import get_processor_config

    config = get_processor_config(model, revision=revision or "main")
    name = config.get("processor_class")
    shadowed = name in getattr(processors, "__all__", ()) and "auto_map" not in config
    own = getattr(transformers, name, None) if shadowed else None
    return own if isinstance(own, type) and issubclass(own, ProcessorMixin) else ProcessorMixin


class HFBridgeProcessingInfo(TokenCountsMixin, EncodingPathsMixin, MediaParsingMixin, MultiModalProcessingInfo):
    """What the processor can do, learnt from the HF processor itself (`probes.py`)."""

    @cached_property
    def _processor_class(self) -> type:
        return hf_processor_class(self.ctx.model_config.model, self.ctx.model_config.revision)

    def get_hf_config(self):
        """The config of the model hf_bridge builds to generate text
        (`hf_classes.config_built_from`): transformers' own class where vLLM loaded the
        checkpoint's as one of its own, a whole model's thinker's where it has one."""
        return self._config_built_from

    @cached_property
    def _config_built_from(self):
        return config_built_from(self.ctx.model_config)  # asked for on every request: found once

    def get_hf_processor(self, **kwargs: object):
        """transformers' processor, where vLLM registers its own under its name (`hf_processor_class`).
        A processor kwarg whose value transformers refuses, where the processor loads
        without the request's kwargs, is named as the problem: vLLM reports any `ValueError`
        of the processor's loading as a class to trust remote code for, and passes others on
        bare (a strict config field's `StrictDataclassFieldValidationError`)."""
        try:
            return self.ctx.get_hf_processor(self._processor_class, **kwargs)
        except Exception as exc:
            if kwargs and self._loads_without_kwargs():
                raise ProcessorKwargsRefused(errors.processor_kwargs_refused(exc)) from exc
            raise

    def _loads_without_kwargs(self) -> bool:
        try:
            self.ctx.get_hf_processor(self._processor_class)
        except Exception:  # noqa: BLE001 - only a diagnosis: vLLM's own error is reported
            return False
        return True

    @cached_property
    def _video_needs_metadata(self) -> bool:
        """vLLM's, following the engine's `mm_processor_kwargs` too (`do_sample_frames`), as
        every call does: vLLM then asks each video's metadata, and hands it on."""
        return needs_video_metadata(self.get_hf_processor(), self.engine_processor_kwargs)

    @property
    def engine_processor_kwargs(self) -> dict[str, object]:
        """The engine's `mm_processor_kwargs`, which vLLM hands every processor call."""
        return dict(getattr(self.ctx.model_config.multimodal_config, "mm_processor_kwargs", None) or {})

    @cached_property
    def probes(self) -> ProcessorProbe:
        """Placeholders, frames and expansions, learnt by calling the HF processor
        through vLLM's context (which merges the engine's processor kwargs).

        Learnt once per HF processor: vLLM builds a new processing info for each chat
        request it parses (to check item counts), and re-learning there cost the front
        end two thirds of its time under load (measured, bench/load.py)."""
        processor = self.get_hf_processor()
        default_kwargs = self.ctx.get_merged_mm_kwargs({})
        # the entry holds the processor, so its id stays its own while kept
        key = (id(processor), kwargs_key(default_kwargs))
        learnt = _PROBES.pop(key, None)
        if learnt is None:
            learnt = ProcessorProbe(
                processor,
                self.get_tokenizer(),
                self.get_hf_config(),
                call=lambda data, kw, info=self: info.ctx.call_hf_processor(info.get_hf_processor(**kw), data, kw),
                default_kwargs=default_kwargs,
                merge=self.ctx.get_merged_mm_kwargs,
            )
        _PROBES[key] = learnt
        while len(_PROBES) > LEARNT_PROCESSORS:
            _PROBES.pop(next(iter(_PROBES)))
        return learnt

    @cached_property
    def _is_video_model(self) -> bool:
        # The in-tree check also demands that the processor can *count* video tokens,
        # and silently serves no video otherwise; hf_bridge counts from the output.
        return hasattr(self.get_hf_processor(), "video_processor")

    def _get_supported_modalities(self) -> list[str]:
        """The processor's modalities, minus those hf_bridge cannot probe or its HF model
        cannot encode: each of those is switched off with one warning, and the others keep
        serving. None for a decoder that reads token ids hf_bridge cannot hand it
        (`token_inputs.py`): text only."""
        if media_need_token_ids(self.get_hf_config()):
            for modality in super()._get_supported_modalities():
                logger.warning_once(errors.media_not_served_per_layer_inputs(modality, self.get_hf_processor()))
            return []
        engine_kwargs = self.engine_processor_kwargs
        if refusal := self.kwargs_refusal(engine_kwargs, "engine's"):
            raise ValueError(refusal)
        self._check_engine_kwargs_pad_nothing(engine_kwargs)
        failures, unencodable = self.probes.failures, self.unencodable_modalities
        for modality, why in failures.items():
            logger.warning_once(errors.modality_switched_off(modality, why, self.get_hf_processor(), engine_kwargs))
        for modality, why in unencodable.items():
            logger.warning_once(why)
        placeable = [m for m in super()._get_supported_modalities() if m not in failures and m not in unencodable]
        if not placeable and not unencodable:
            raise ValueError(errors.nothing_placeable(failures, self.get_hf_processor(), engine_kwargs))
        if placeable:
            self.text_only_frame()  # learnt, and said, at start-up rather than at the first prompt without media
        return placeable

    def kwargs_refusal(self, kwargs: Mapping[str, object], whose: str) -> str | None:
        """Why processor kwargs cannot be served as given (`processor_kwargs.py`): keys
        nothing reads, or arrays other than torch's asked for; None where they can be.
        `whose`: "request's" or "engine's"."""
        processor = self.get_hf_processor()
        if ignored := processor_kwargs.ignored_keys(processor, kwargs):
            return errors.processor_kwargs_ignored(ignored, {key: processor_kwargs.closest(key, processor) for key in ignored},
                                                   processor, whose)
        if (asked := processor_kwargs.tensor_type_asked(kwargs)) is not None:
            return errors.tensor_type_refused(asked, whose)
        return None

    def _check_engine_kwargs_pad_nothing(self, engine_kwargs: Mapping[str, object]) -> None:
        """Refuse, at start-up, engine kwargs that pad the text: every probe would learn
        the pad tokens as the processor's own, and every prompt would run them (a request's
        own padding is refused per request, `_check_no_padding_added`)."""
        padding = {k: v for k, v in engine_kwargs.items() if k in errors.PADDING_KWARGS}
        if padding and (added := self.probes.pad_tokens_added) > 0:
            raise ValueError(errors.engine_kwargs_pad_the_text(padding, added, self.get_tokenizer().pad_token_id))

    def text_only_frame(self) -> frame.PromptFrame:
        """What the processor adds to a prompt without items, which vLLM tokenizes without
        running this processor: `text_only_prompts.py` adds it there. Where the processor
        rewrites such a text itself, nothing is added, with a warning."""
        learnt = self.probes.text_only_frame
        if learnt is None:
            logger.warning_once(errors.text_only_prompts_differ(self.get_hf_processor()))
            return frame.PromptFrame()
        if not learnt.is_empty:
            logger.info_once("hf_bridge: prompts without media get the processor's own tokens: %s", learnt)
        return learnt

    def validate_num_items(self, modality: str, num_items: int) -> None:
        if num_items and modality not in self.supported_mm_limits:
            why = self.probes.failures.get(modality)
            processor = self.get_hf_processor()
            if why is not None:
                raise ValueError(errors.modality_switched_off(modality, why, processor))
            if modality in self.unencodable_modalities:
                raise ValueError(self.unencodable_modalities[modality])
            raise ValueError(errors.unsupported_modality(modality, self.supported_mm_limits, processor))
        super().validate_num_items(modality, num_items)

    def frame(self, modality: str) -> frame.PromptFrame:
        """What the processor adds to prompts with `modality` items (`ProcessorProbe.frame`)."""
        learnt = self.probes.frame(modality)
        if not learnt.is_empty:
            logger.info_once("hf_bridge: %s prompts get the processor's own tokens: %s", modality, learnt)
        return learnt


class HFBridgeDummyInputsBuilder(MultiModalDummyInputsBuilder):
    """Profiling prompts made of the same placeholder text real prompts hold: none for a
    processor that inserts each item itself, which refuses a placeholder as a real prompt's
    (vLLM profiles a GPU's start-up in every mode, a CPU's in compiled mode)."""

    def get_dummy_text(self, mm_counts: Mapping[str, int]) -> str:
        info: HFBridgeProcessingInfo = self.info  # type: ignore[assignment]
        return "".join(info.probes.item_text(m) * n for m, n in mm_counts.items() if n and m in info.probes.placeholder_texts)


class HFBridgeMultiModalProcessor(NumberedUpdatesMixin, TouchingItemsCheckMixin, PlaceholderPairingMixin, ItemChecksMixin,
                                  MultiModalProcessor):
    """Processes each item alone and states its placeholder as a `PromptReplacement`."""

    info: HFBridgeProcessingInfo

    def apply(self, inputs, timing_ctx):
        """Pair placeholders with items and lay the prompt out as the HF processor would
        (`placeholder_pairing.py`), then vLLM's processing, with each item alone; a refused
        request's items leave the front-end cache."""
        if not is_dummy_request():
            self._check_request_kwargs_read(inputs.hf_processor_mm_kwargs)
        inputs = self._paired_with_items(inputs)
        try:
            result = super().apply(inputs, timing_ctx)
            self._check_no_embedding_tokens_outside_items(result["prompt_token_ids"], result["mm_placeholders"])
            if not is_dummy_request():
                self._check_text_kept_whole(inputs.hf_processor_mm_kwargs, len(result["prompt_token_ids"]))
        except Exception:
            self._forget_items_sent(inputs)
            raise
        return result

    def _forget_items_sent(self, inputs) -> None:
        """Drop a refused request's items from vLLM's front-end processor cache. Once it has
        merged them, it counts them as sent to the worker, which keeps its own copy; the
        refused request never reaches the worker, so a later request with one of them would
        go without its data, and the worker fail it (vLLM's P0/P1 cache drift). Dropped, an
        item is processed and sent again."""
        if inputs.cache is None:
            return
        try:
            hashes = self._get_mm_hashes(inputs)
        except Exception:  # noqa: BLE001 - unhashable: never cached; the request's own error is raised
            return
        for item_hashes in hashes.values():
            for item_hash in item_hashes:
                inputs.cache.invalidate(item_hash)

    def _check_request_kwargs_read(self, request_kwargs: Mapping[str, object]) -> None:
        """Refuse the request's processor kwargs that nothing would read (`processor_kwargs.py`):
        transformers logs that it ignores them, and the reply is made without them; and
        those that ask for arrays other than torch's, which the model's encoder cannot take."""
        if refusal := self.info.kwargs_refusal(request_kwargs, "request's"):
            raise ProcessorKwargsRefused(refusal)

    def _check_text_kept_whole(self, request_kwargs: Mapping[str, object], prompt_tokens: int) -> None:
        """Refuse processor kwargs (the engine's and the request's) that truncate the text
        below the length of the prompt vLLM runs (placeholders expanded, as transformers
        tokenizes it): the processor truncates only each item's short text, and the prompt
        would run whole where transformers cuts it."""
        merged = self.info.ctx.get_merged_mm_kwargs(request_kwargs)
        model_max_length = getattr(self.info.get_tokenizer(), "model_max_length", None)
        if (cut_to := processor_kwargs.text_cut_to(merged, prompt_tokens, model_max_length)) is not None:
            raise ProcessorKwargsRefused(errors.kwargs_truncate_the_text(cut_to, prompt_tokens))

    def get_dummy_mm_inputs(self, *args, **kwargs):
        """vLLM's dummy request, of every modality at once for its processor warm-up: served
        whatever its modalities, as it only sizes and warms the processor."""
        with building_dummy_request():
            return super().get_dummy_mm_inputs(*args, **kwargs)

    def _get_hf_mm_inputs(self, mm_items: MultiModalDataItems, hf_kwargs: Mapping[str, object]):
        """vLLM's, with each video's metadata also where the processor was saved not to
        sample frames, and no sampling of frames vLLM's loader sampled already
        (`video_metadata.py`)."""
        hf_inputs = super()._get_hf_mm_inputs(mm_items, hf_kwargs)
        if "videos" not in hf_inputs.hf_data:
            return hf_inputs
        if not self.info._video_needs_metadata:  # else vLLM's backend passed the metadata on
            hf_inputs = with_video_metadata(hf_inputs)
        if needs_video_metadata(self.info.probes.processor, self.info.ctx.get_merged_mm_kwargs(hf_inputs.hf_kwargs)):
            refuse_sampling_a_part(hf_inputs.hf_data)
        return hf_inputs

    def _apply_hf_processor_main(self, mm_items: MultiModalDataItems, hf_kwargs: Mapping[str, object]) -> BatchFeature:
        request_keys = frozenset(hf_kwargs)  # the request's own processor kwargs; vLLM adds its tokenizer's next
        hf_data, hf_kwargs, _ = self._get_hf_mm_inputs(mm_items, hf_kwargs)  # embedding items: read below
        hf_data.pop("text", None)
        per_modality: dict[str, list[tuple[BatchFeature, placeholders.Expansion]]] = {}
        for modality in HF_DATA_KEYS:
            if modality in mm_items and embeds.is_embedding_items(mm_items[modality]):
                outputs = [self._embedded_item(modality, i, item, hf_kwargs, request_keys)
                           for i, item in enumerate(embeds.per_item(modality, mm_items[modality]))]
            else:
                outputs = [
                    self._probe_item(modality, i, item, hf_kwargs, request_keys)
                    for i, item in enumerate(self.info.probes.iter_items(modality, hf_data))
                ]
            if outputs:
                per_modality[modality] = outputs
        merged = _merge_items(per_modality, {m: self.info.probes.stacks_items_along_rows(m) for m in per_modality})
        # embedding items travel in `merged`, under hf_bridge's per-modality keys, not as vLLM's passthrough
        return self._finalize_hf_mm_data(hf_data, hf_kwargs, {}, merged)

    def _embedded_item(self, modality: str, index: int, item: dict, hf_kwargs: Mapping[str, object],
                       request_keys: frozenset[str] = frozenset()):
        """An item given as embeddings: its placeholder is the one the processor makes of a
        blank item of the same size (`embeds.py`)."""
        if has_side_features(self.info.get_hf_config()):
            raise ValueError(errors.embeds_without_side_features(modality, self.info.get_hf_processor()))
        probes = self.info.probes
        sides = embeds.blank_sides(item, *embeds.patch_sizes(probes.processor, modality))
        out, expansion = self._probe_item(modality, index, probes.blank(modality, 1, *sides, hf_kwargs=hf_kwargs), hf_kwargs, request_keys)
        embeds.check_item(modality, index, item, expansion.num_embeds, out, sides)
        return BatchFeature(item), expansion

    def _probe_item(self, modality: str, index: int, item: dict, hf_kwargs: Mapping[str, object],
                    request_keys: frozenset[str] = frozenset()):
        """The item's processor output and expansion; `request_keys` name the kwargs of
        `hf_kwargs` that the request gave, which the diagnoses below try the item without."""
        plain_kwargs = {k: v for k, v in hf_kwargs.items() if k not in request_keys}
        try:
            out, expansion = self.info.probes.probe(modality, item, hf_kwargs)
            if request_keys:
                plain = self._probe_or_none(modality, item, plain_kwargs)  # None: the item needs the kwargs
                self._check_pixel_sides_kept(modality, index, out, plain, plain_kwargs)
                self._check_positions_follow_inputs(modality, out, expansion, plain)
                self._check_no_padding_added(modality, index, expansion, plain)
        except placeholders.PlaceholderError as exc:
            if modality == "audio" and (seconds := clip_seconds(item, audio_sampling_rate(self.info.probes.processor))) < AUDIO_SECONDS:
                # a blank clip of AUDIO_SECONDS was placed: this one is too short to get a position
                raise ValueError(errors.audio_clip_too_short(index, seconds, AUDIO_SECONDS, self.info.get_hf_processor())) from exc
            if request_keys and self._probe_or_none(modality, item, plain_kwargs) is not None:
                raise ProcessorKwargsRefused(errors.kwargs_unplaceable(modality, index, exc, sorted(request_keys))) from exc
            if isinstance(exc, placeholders.NoTokensError):
                raise ValueError(errors.item_gets_no_tokens(modality, index, sent_size(media_scale.sent_media(modality, item)),
                                                            self.info.get_hf_processor(), self._placed_blank(modality))) from exc
            raise ValueError(f"hf_bridge cannot place {modality} {index}: {exc}.") from exc
        except (ProbeError, ProcessorKwargsRefused):
            raise
        except ValueError as exc:
            if modality == "video" and "video_metadata" not in item and samples_by_time(
                    self.info.probes.processor, self.info.ctx.get_merged_mm_kwargs(hf_kwargs)):
                raise ValueError(errors.video_sampled_without_metadata(index, exc)) from exc
            if request_keys and self._probe_or_none(modality, item, plain_kwargs) is not None:
                raise ProcessorKwargsRefused(errors.processor_kwargs_refused(exc)) from exc
            sent = media_scale.sent_media(modality, item)
            shape = tuple(np.shape(sent)) if modality == "audio" or isinstance(sent, (np.ndarray, torch.Tensor)) else ()
            if modality == "audio":  # a clip of several channels: the fix names its shape
                described = "" if len(shape) > 1 else self._item_sent(modality, item)
            else:  # an array's shape is in the fix the message names; a PIL image's size is not
                described = "" if shape else sent_size(sent)
            raise ValueError(errors.unprocessable_item(modality, index, exc, shape, described)) from exc
        self._check_features_given(modality, index, item, out, expansion)
        if modality == "audio":
            self._check_clip_kept_whole(index, item, out, hf_kwargs)
        self._check_media_scale(modality, index, item, out, hf_kwargs)
        return out, expansion

    def _get_mm_fields_config(self, hf_inputs: BatchFeature, hf_processor_mm_kwargs: Mapping[str, object]) -> Mapping[str, MultiModalFieldConfig]:
        fields = {}
        for modality in HF_DATA_KEYS:
            for key in hf_inputs.pop(f"hf_bridge_{modality}_keys", ()):
                # Integer fields are metadata (grids, sizes, counts): kept on the CPU they
                # outlive the encoder inputs vLLM frees once an item's embeddings are
                # cached, so later requests (prefix cache hits) can still read them.
                fields[key] = MultiModalFieldConfig.batched(modality, keep_on_cpu=_is_metadata(hf_inputs[key]))
            if NUM_EMBEDS_KEY.format(modality) in hf_inputs:
                for key in own_keys(modality):
                    fields[key] = MultiModalFieldConfig.batched(modality, keep_on_cpu=True)
        return fields


def _merge_items(per_modality: Mapping[str, list[tuple[BatchFeature, placeholders.Expansion]]],
                 stacks: Mapping[str, bool]) -> BatchFeature:
    """One `BatchFeature` whose fields hold one entry per item (vLLM's `batched` layout);
    `stacks` says, per modality, whether items of one shape may share an encoder call."""
    merged: dict[str, Any] = {}
    for modality, outputs in per_modality.items():
        keys = [DATA_KEY.format(modality, k) for k in split.item_data_keys(list(outputs[0][0].keys()))]
        for key in keys:
            name = key.split(".", 1)[1]
            merged[key] = [out[name] if name in out else None for out, _ in outputs]
        merged[f"hf_bridge_{modality}_keys"] = keys
        merged[ENCODER_KEY.format(modality)] = [
            torch.tensor(placeholders.TOKEN_TYPE_IDS[e.encoder_modality]) for _, e in outputs
        ]
        merged[EXPANSION_KEY.format(modality)] = [torch.tensor(e.token_ids) for _, e in outputs]
        merged[IS_EMBED_KEY.format(modality)] = [torch.tensor(e.is_embed) for _, e in outputs]
        merged[TYPE_IDS_KEY.format(modality)] = [torch.tensor(e.type_ids) for _, e in outputs]
        merged[NUM_EMBEDS_KEY.format(modality)] = torch.tensor([e.num_embeds for _, e in outputs])
        merged[STACKS_KEY.format(modality)] = torch.tensor([stacks[modality]] * len(outputs))
    return BatchFeature(merged)


def _is_metadata(values: list[Any]) -> bool:
    return all(isinstance(v, torch.Tensor) and not v.is_floating_point() for v in values if v is not None)
