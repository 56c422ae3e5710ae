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
  modality: when the processor cannot count, the count is read from processed output.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

import torch
from transformers import BatchFeature
from vllm.logger import init_logger
from vllm.model_executor.models.transformers.multimodal import (
    MultiModalDummyInputsBuilder,
    MultiModalProcessingInfo,
    MultiModalProcessor,
)
from vllm.multimodal.inputs import MultiModalFieldConfig, MultiModalKwargsItems
from vllm.multimodal.parse import ImageSize, MultiModalDataItems
from vllm.multimodal.processing import PromptReplacement, PromptUpdate, PromptUpdateDetails

from . import errors, frame, placeholders, split

logger = init_logger(__name__)

HF_DATA_KEYS = {"image": ("images",), "video": ("videos", "video_metadata"), "audio": ("audio",)}
"""The keyword(s) under which `ProcessorMixin.__call__` takes each modality's data."""

DATA_KEY = "{}.{}"
"""An item's processor output `key` is stored as `"<modality>.<key>"`: two modalities
may use one name (InternVL's videos arrive as `pixel_values`, like its images)."""
ENCODER_KEY = "hf_bridge_{}_encoder"
EXPANSION_KEY = "hf_bridge_{}_expansion"
IS_EMBED_KEY = "hf_bridge_{}_is_embed"
TYPE_IDS_KEY = "hf_bridge_{}_type_ids"
NUM_EMBEDS_KEY = "hf_bridge_{}_num_embeds"
"""Per-item fields hf_bridge adds to the processor output (see `own_keys`)."""

PROBE_SENTINEL = "hello"
"""Plain text after a probe's placeholder: where the processor's additions end up shows
which belong after items and which at the end of the prompt (`frame.py`)."""

MAX_COUNTED_SIDE = 1024
"""Largest side of the blank item processed to count tokens when a processor cannot."""


def own_keys(modality: str) -> tuple[str, ...]:
    return tuple(
        k.format(modality) for k in (EXPANSION_KEY, IS_EMBED_KEY, TYPE_IDS_KEY, NUM_EMBEDS_KEY, ENCODER_KEY)
    )


class HFBridgeProcessingInfo(MultiModalProcessingInfo):
    """What the processor can do, learnt from the HF processor itself."""

    @cached_property
    def _is_video_model(self) -> bool:
        # The in-tree check also demands that the processor can *count* video tokens,
        # and silently serves no video otherwise; hf_bridge counts from the output.
        return hasattr(self.get_hf_processor(), "video_processor")

    def validate_num_items(self, modality: str, num_items: int) -> None:
        if num_items and modality not in self.supported_mm_limits:
            raise ValueError(errors.unsupported_modality(modality, self.supported_mm_limits, self.get_hf_processor()))
        super().validate_num_items(modality, num_items)

    def parse_mm_data(self, mm_data, *, validate: bool = True):
        if validate:
            errors.check_media_types(mm_data)
        return super().parse_mm_data(mm_data, validate=validate)

    def placeholder_text(self, modality: str) -> str:
        """What a prompt holds for one item: what the chat template emits for it.

        Falls back to the processor's `<modality>_token` for a model without a chat
        template.
        """
        return self._placeholder_texts[modality]

    def placeholder_ids(self, modality: str) -> list[int]:
        """`placeholder_text` as token ids (encoded once; every request looks for them)."""
        if modality not in self._placeholder_ids:
            text = self.placeholder_text(modality)
            self._placeholder_ids[modality] = self.get_tokenizer().encode(text, add_special_tokens=False)
        return self._placeholder_ids[modality]

    @cached_property
    def _placeholder_ids(self) -> dict[str, list[int]]:
        return {}

    @cached_property
    def _placeholder_texts(self) -> dict[str, str]:
        processor = self.get_hf_processor()
        out = {}
        for modality in ("image", "video", "audio"):
            text = _chat_template_placeholder(processor, modality)
            if text is None:
                text = getattr(processor, f"{modality}_token", None)
            if text is not None:
                out[modality] = text
        return out

    def embed_token_candidates(self, modality: str) -> list[int]:
        """Tokens the checkpoint names as holding embeddings, most authoritative first.

        The model config comes first: it is what the HF forward scatters features by
        (`get_placeholder_mask`). Processors' own `image_token_id` can name a marker
        instead (Gemma3's is its begin-of-image token). The other modalities' tokens
        follow, for processors that expand one modality into another's tokens.
        """
        config, processor = self.get_hf_config(), self.get_hf_processor()
        order = [modality, *(m for m in HF_DATA_KEYS if m != modality)]
        candidates = []
        for m in order:
            for source, name in (
                (config, f"{m}_token_id"),
                (config, f"{m}_token_index"),
                (processor, f"{m}_token_id"),
            ):
                value = getattr(source, name, None)
                if isinstance(value, int) and value not in candidates:
                    candidates.append(value)
        return candidates

    def probe(self, modality: str, item: Any, hf_kwargs: Mapping[str, object]) -> tuple[BatchFeature, placeholders.Expansion]:
        """Process one item alone; return its data and its placeholder expansion."""
        if modality not in self._placeholder_texts:
            raise ValueError(
                f"{type(self.get_hf_processor()).__name__} has no placeholder for {modality} "
                f"(no chat template entry and no `{modality}_token`), so hf_bridge cannot "
                f"tell where a {modality} goes in the prompt."
            )
        prompt_frame = self.frame(modality)
        text = "" if prompt_frame.inserts_item else self.placeholder_text(modality)
        probe_ids = self.get_tokenizer().encode(text)
        span = self._placeholder_span(modality, probe_ids, prompt_frame)
        out = self._call_one_item(text, item, hf_kwargs)
        ids, types = frame.strip_frame(prompt_frame, out["input_ids"][0].tolist(), _type_ids(out, self)[0].tolist())
        expansion = placeholders.expansion_from_probe(
            modality, probe_ids, span, ids, types, self.embed_token_candidates(modality)
        )
        return out, expansion

    def _placeholder_span(self, modality: str, probe_ids: list[int], prompt_frame: frame.PromptFrame) -> tuple[int, int]:
        if prompt_frame.inserts_item:  # the processor puts the item before everything
            return (0, 0)
        target = self.placeholder_ids(modality)
        start = placeholders.find_sublist(probe_ids, target)
        if start is None:
            raise ValueError(f"{self.placeholder_text(modality)!r} does not tokenize to the same ids inside and outside a prompt")
        return (start, start + len(target))

    def frame(self, modality: str) -> frame.PromptFrame:
        """What the processor adds to prompts with `modality` items, outside their expansions."""
        if modality not in self._frames:
            self._frames[modality] = self._learn_frame(modality)
            if not self._frames[modality].is_empty:
                logger.info("hf_bridge: %s prompts get the processor's own tokens: %s", modality, self._frames[modality])
        return self._frames[modality]

    @cached_property
    def _frames(self) -> dict[str, frame.PromptFrame]:
        return {}

    def _learn_frame(self, modality: str) -> frame.PromptFrame:
        """Probe with blank items, placeholder then sentinel text (see `frame.py`)."""
        tokenizer = self.get_tokenizer()
        sentinel_text = PROBE_SENTINEL
        sentinel = tokenizer.encode(sentinel_text, add_special_tokens=False)
        hf_kwargs = self.ctx.get_merged_mm_kwargs({})
        placeholder = self.placeholder_text(modality)
        blank, one_blank = blank_items(modality, 2), blank_items(modality, 1)
        placeholder_probe = tokenizer.encode(placeholder)
        text_before = placeholder_probe[: placeholders.find_sublist(placeholder_probe, self.placeholder_ids(modality)) or 0]
        try:
            one = self._call_one_item(placeholder + sentinel_text, one_blank, hf_kwargs)
            inserts = False
        except Exception as explicit_error:  # noqa: BLE001 - any refusal means: try without a placeholder
            try:
                one = self._call_one_item(sentinel_text, one_blank, hf_kwargs)
            except Exception:
                one = None
            if one is None or not any(_type_ids(one, self)[0].tolist()):  # it did not insert the item either
                raise ValueError(errors.unprocessable_item(modality, 0, explicit_error)) from explicit_error
            inserts = True
        try:
            two_text = (placeholder + sentinel_text) * 2
            two = None if inserts else self._call_one_item(two_text, blank, hf_kwargs)["input_ids"][0].tolist()
        except Exception:  # noqa: BLE001 - a processor may take one item per prompt (Fuyu)
            two = None
        return frame.frame_from_probes(
            one["input_ids"][0].tolist(), _type_ids(one, self)[0].tolist(), two, sentinel, text_before, inserts
        )

    def _call_one_item(self, text: str, item: Mapping[str, list], hf_kwargs: Mapping[str, object]) -> BatchFeature:
        """Call the HF processor on one item, flat (`videos=[v]`) or per sample (`[[v]]`).

        Processors disagree on the layout of media lists (SmolVLM counts a flat
        video's frames as videos); the per-sample layout is what every processor
        accepts for a batch of one, so it is tried when the flat one is refused.
        """
        processor = self.get_hf_processor(**hf_kwargs)
        data = {"text": text, **item, "return_mm_token_type_ids": True}
        try:
            return self.ctx.call_hf_processor(processor, data, hf_kwargs)
        except ValueError as flat_error:
            nested = {"text": [text], **{k: [v] for k, v in item.items()}, "return_mm_token_type_ids": True}
            try:
                return self.ctx.call_hf_processor(processor, nested, hf_kwargs)
            except ValueError:
                raise flat_error from None

    # -- counting ---------------------------------------------------------------------

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
        # Processor counts may leave out markers; the profile must cover the whole range.
        size = self.get_image_size_with_most_features()
        return max(super().get_max_image_tokens(), self._count_from_output("image", size))

    def get_max_video_tokens(self, seq_len: int, mm_counts: Mapping[str, int]) -> int:
        num_frames = self.get_num_frames_with_most_features(seq_len, mm_counts)
        size = self.get_video_size_with_most_features(num_frames)
        counted = self._get_num_video_tokens(num_frames, size)
        return max(counted, self._count_from_output("video", size, num_frames))

    def _count_from_output(self, modality: str, size: ImageSize, num_frames: int = 1) -> int:
        """Placeholder length of one blank item of `size`, read off processed output.

        Sides are capped at `MAX_COUNTED_SIDE`: the size search probes a 10,000 px
        fallback, which only a processor that counts arithmetically can afford.
        """
        size = ImageSize(width=min(size.width, MAX_COUNTED_SIDE), height=min(size.height, MAX_COUNTED_SIDE))
        key = (modality, size.width, size.height, num_frames)
        if key not in self._counted:
            item = blank_items(modality, 1, size.width, size.height, num_frames)
            hf_kwargs = self.ctx.get_merged_mm_kwargs({})
            self._counted[key] = len(self.probe(modality, item, hf_kwargs)[1])
        return self._counted[key]

    @cached_property
    def _counted(self) -> dict:
        return {}


class HFBridgeDummyInputsBuilder(MultiModalDummyInputsBuilder):
    """Profiling prompts made of the same placeholder text real prompts hold."""

    def get_dummy_text(self, mm_counts: Mapping[str, int]) -> str:
        info: HFBridgeProcessingInfo = self.info  # type: ignore[assignment]
        return "".join(
            info.placeholder_text(m) * n for m, n in mm_counts.items() if n and m in info._placeholder_texts
        )


class HFBridgeMultiModalProcessor(MultiModalProcessor):
    """Processes each item alone and states its placeholder as a `PromptReplacement`."""

    info: HFBridgeProcessingInfo

    def apply(self, inputs, timing_ctx):
        """Pair placeholders with items, then lay the prompt out as the HF processor would.

        vLLM would silently leave a surplus placeholder in the prompt as a plain token;
        transformers refuses such a prompt, and so does hf_bridge, with the fix. Tokens
        the processor adds outside the expansions (`frame.py`) are added here, so the
        prompt vLLM runs is the one transformers runs.
        """
        counts = inputs.mm_data_items.get_all_counts()
        frames = []
        for modality in sorted(set(counts) | set(self.info._placeholder_texts)):
            text = self.info._placeholder_texts.get(modality)
            if text is None:
                continue
            target = self.info.placeholder_ids(modality)
            found = placeholders.count_sublist(inputs.prompt, target)
            given = counts.get(modality, 0)
            prompt_frame = self.info.frame(modality) if given else None
            if prompt_frame is not None and prompt_frame.inserts_item:
                if found:
                    raise ValueError(errors.placeholder_not_wanted(modality, text, found, self.info.get_hf_processor()))
            elif found != given and (given or found):
                raise ValueError(errors.placeholder_mismatch(modality, text, found, given))
            if prompt_frame is not None and not prompt_frame.is_empty:
                frames.append((prompt_frame, target, given))
        if frames:
            inputs = dataclasses.replace(inputs, prompt=frame.apply_frame(inputs.prompt, frames))
        return super().apply(inputs, timing_ctx)

    def _apply_hf_processor_main(self, mm_items: MultiModalDataItems, hf_kwargs: Mapping[str, object]) -> BatchFeature:
        hf_data, hf_kwargs, passthrough = self._get_hf_mm_inputs(mm_items, hf_kwargs)
        hf_data.pop("text", None)
        per_modality: dict[str, list[tuple[BatchFeature, placeholders.Expansion]]] = {}
        for modality, keys in HF_DATA_KEYS.items():
            present = [k for k in keys if hf_data.get(k) is not None]
            if not present:
                continue
            count = len(hf_data[present[0]])  # type: ignore[arg-type]
            per_modality[modality] = [
                self._probe_item(modality, i, {k: [hf_data[k][i]] for k in present}, hf_kwargs)  # type: ignore[index]
                for i in range(count)
            ]
        merged = _merge_items(per_modality)
        return self._finalize_hf_mm_data(hf_data, hf_kwargs, passthrough, merged)

    def _probe_item(self, modality: str, index: int, item: dict, hf_kwargs: Mapping[str, object]):
        try:
            return self.info.probe(modality, item, hf_kwargs)
        except placeholders.PlaceholderError as exc:
            raise ValueError(f"hf_bridge cannot place {modality} {index}: {exc}.") from exc
        except ValueError as exc:
            raise ValueError(errors.unprocessable_item(modality, index, exc)) from exc

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

    def _get_prompt_updates(
        self,
        mm_items: MultiModalDataItems,
        hf_processor_mm_kwargs: Mapping[str, object],
        out_mm_kwargs: MultiModalKwargsItems,
    ) -> Sequence[PromptUpdate]:
        updates = []
        for modality, items in out_mm_kwargs.items():
            replacements = []
            for item in items:
                # Popped: the update is cached beside the item, the model needs neither
                full = item.pop(EXPANSION_KEY.format(modality)).data.tolist()
                mask = item.pop(IS_EMBED_KEY.format(modality)).data.clone()
                replacements.append(PromptUpdateDetails(full=full, is_embed=lambda _, m=mask: m))
            target = self.info.placeholder_ids(modality)
            updates.append(PromptReplacement(modality=modality, target=target, replacement=replacements.__getitem__))
        return updates


def _merge_items(per_modality: Mapping[str, list[tuple[BatchFeature, placeholders.Expansion]]]) -> BatchFeature:
    """One `BatchFeature` whose fields hold one entry per item (vLLM's `batched` layout)."""
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
    return BatchFeature(merged)


def _is_metadata(values: list[Any]) -> bool:
    return all(isinstance(v, torch.Tensor) and not v.is_floating_point() for v in values if v is not None)


def _chat_template_placeholder(processor: Any, modality: str) -> str | None:
    """The text the chat template emits for one item of `modality`, if it has a template."""
    if getattr(processor, "chat_template", None) is None:
        return None
    marker = "HFBRIDGEMARKER"
    try:
        with_item = processor.apply_chat_template(
            [{"role": "user", "content": [{"type": "text", "text": marker}, {"type": modality}, {"type": "text", "text": marker}]}],
            tokenize=False,
        )
    except Exception:  # a template that cannot render an item has no placeholder for it
        return None
    parts = with_item.split(marker)
    if len(parts) != 3 or not parts[1].strip():
        return None
    return parts[1].strip()


def _type_ids(out: BatchFeature, info: HFBridgeProcessingInfo):
    type_ids = out.get("mm_token_type_ids", out.get("token_type_ids"))
    if type_ids is None:
        raise ValueError(errors.no_token_types(info.get_hf_processor()))
    return type_ids


BLANK_SIDE = 112
BLANK_FRAMES = 4


def blank_items(modality: str, count: int, width: int = BLANK_SIDE, height: int = BLANK_SIDE, num_frames: int = BLANK_FRAMES) -> dict[str, list]:
    """`count` blank items of `modality`, in the layout `_call_one_item` takes."""
    import numpy as np
    from PIL import Image

    if modality == "image":
        return {"images": [Image.new("RGB", (width, height)) for _ in range(count)]}
    if modality == "video":
        return {"videos": [np.zeros((num_frames, height, width, 3), dtype=np.uint8) for _ in range(count)]}
    raise ValueError(f"hf_bridge cannot make a blank {modality} item to probe the processor with")
