"""`ProcessorProbe`: what an HF processor does with one item, learnt by calling it, for
every caller (`probes.py`): no vLLM import.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import cached_property
from typing import Any

from . import errors, frame, numbering, pixel_sides, placeholders, text_step
from .probe_frames import FrameLearningMixin
from .probe_layouts import ItemLayoutMixin
from .probes import (AUDIO_SECONDS, HF_DATA_KEYS, MODALITIES, PROBE_SENTINEL, BlankShape, Call, ProbeError, blank_items,
                     call_reading_one_videos_metadata, chat_template_placeholder, config_token_ids, first_line, kwargs_key,
                     processor_modalities, token_type_ids, video_metadata_asked, without_asked_metadata)


class ProcessorProbe(FrameLearningMixin, ItemLayoutMixin):
    """Learns, by calling an HF processor, where its items go in a prompt.

    `call(data, hf_kwargs)` runs the processor (vLLM's context does it for the engine);
    `default_kwargs` are the processor kwargs frames are learnt with; `merge(hf_kwargs)`
    gives the kwargs a call reaches the processor with (vLLM's context merges the engine's
    into nested `videos_kwargs` too), by default the defaults updated by `hf_kwargs`.
    """

    def __init__(self, processor: Any, tokenizer: Any, config: Any, call: Call, default_kwargs: Mapping[str, object] = {},
                 merge: Callable[[Mapping[str, object]], Mapping[str, object]] | None = None):
        self.processor = processor
        self.tokenizer = tokenizer
        self.config = config
        self.call = call
        self.default_kwargs = dict(default_kwargs)
        self.merge = merge or (lambda hf_kwargs: {**self.default_kwargs, **hf_kwargs})
        self._placeholder_ids: dict[str, list[int]] = {}
        self._frames: dict[str, frame.PromptFrame] = {}
        self._blank_shapes: dict[str, BlankShape] = {}
        self.writes_prompt: set[str] = set()
        """Modalities whose prompts the processor lays out from their text alone (`text_step.py`)."""
        self._cores: dict[tuple[str, str], tuple[int, ...]] = {}
        self._number_windows: dict[tuple[str, str, int], numbering.NumberWindow | None] = {}
        self._stacks_along_rows: dict[str, bool] = {}
        self._fixed_sides: dict[tuple[str, str], dict[str, pixel_sides.Sides]] = {}
        self._blank_lengths: dict[tuple, int] = {}

    # -- placeholders -------------------------------------------------------------------

    @cached_property
    def placeholder_texts(self) -> dict[str, str]:
        """What a prompt holds for one item of each modality: what the chat template
        emits for it, else the processor's `<modality>_token`."""
        out = {}
        for modality in MODALITIES:
            text = chat_template_placeholder(self.processor, modality)
            if text is None:
                text = getattr(self.processor, f"{modality}_token", None)
            if text is not None:
                out[modality] = text
        return out

    def placeholder_text(self, modality: str) -> str:
        if modality not in self.placeholder_texts:
            raise ProbeError(
                f"{type(self.processor).__name__} has no placeholder for {modality} "
                f"(no chat template entry and no `{modality}_token`), so hf_bridge cannot "
                f"tell where a {modality} goes in the prompt"
            )
        return self.placeholder_texts[modality]

    def item_text(self, modality: str) -> str:
        """What a prompt writes for one item: its placeholder, or nothing where the
        processor inserts each item itself (Fuyu's, at the start)."""
        return "" if self.frame(modality).inserts_item else self.placeholder_text(modality)

    def placeholder_ids(self, modality: str) -> list[int]:
        """`placeholder_text` as token ids (encoded once; every request looks for them)."""
        if modality not in self._placeholder_ids:
            text = self.placeholder_text(modality)
            self._placeholder_ids[modality] = self.tokenizer.encode(text, add_special_tokens=False)
        return self._placeholder_ids[modality]

    def embed_token_candidates(self, modality: str) -> list[int]:
        """Tokens the checkpoint names as holding embeddings, most authoritative first.

        The model config comes first (`config_token_ids`): it is what the HF forward
        scatters features by (`get_placeholder_mask`). Processors' own `image_token_id` can
        name a marker instead (Gemma3's is its begin-of-image token). The other modalities'
        tokens follow, for processors that expand one modality into another's tokens.
        """
        named = config_token_ids(self.config)
        candidates: list[int] = []
        for m in (modality, *(m for m in MODALITIES if m != modality)):
            for value in (named.get(m), getattr(self.processor, f"{m}_token_id", None)):
                if isinstance(value, int) and value not in candidates:
                    candidates.append(value)
        return candidates

    # -- one item -----------------------------------------------------------------------

    def probe(self, modality: str, item: Mapping[str, list], hf_kwargs: Mapping[str, object]):
        """Process one item alone; return the processor's output and its expansion."""
        prompt_frame = self.frame(modality)
        text = self.item_text(modality)
        probe_ids = self.tokenizer.encode(text)
        span = self._placeholder_span(modality, probe_ids, prompt_frame)
        out = self.call_one_item(text, item, hf_kwargs)
        ids = out["input_ids"][0].tolist()
        types = token_type_ids(out, self.processor, self.config)[0].tolist()
        ids, types = frame.strip_frame(prompt_frame, ids, types)
        expansion = placeholders.expansion_from_probe(
            modality, probe_ids, span, ids, types, self.embed_token_candidates(modality)
        )
        if modality in self.writes_prompt:
            expansion = self._core(modality, expansion, hf_kwargs)
        return out, expansion

    def _core(self, modality: str, expansion: placeholders.Expansion, hf_kwargs: Mapping[str, object]) -> placeholders.Expansion:
        """The item's core (`text_step.typed_core`): under the same processor kwargs, the
        same for every item, since the processor writes it without the item."""
        core = text_step.typed_core(expansion)
        known = self._cores.setdefault((modality, kwargs_key(hf_kwargs)), core.token_ids)
        if core.token_ids != known:
            raise placeholders.PlaceholderError("the processor expanded this item otherwise than the text alone")
        return core

    def core(self, modality: str, hf_kwargs: Mapping[str, object]) -> tuple[int, ...]:
        """The core every item of a modality the processor writes prompts for takes under
        `hf_kwargs` (`writes_prompt`), read off a blank item's probe the first time."""
        key = (modality, kwargs_key(hf_kwargs))
        if key not in self._cores:
            self.probe(modality, self.blank(modality, hf_kwargs=hf_kwargs), hf_kwargs)
        return self._cores[key]

    def written_prompt(self, prompt: list[int], counts: Mapping[str, int], hf_kwargs: Mapping[str, object]) -> list[int]:
        """`prompt` as the processor writes it from its text (`text_step.py`), each item's
        core folded back into its placeholder, for vLLM's prompt update to expand:
        `counts` holds the items of each modality it writes prompts for."""
        text = self.tokenizer.decode(prompt, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if self.tokenizer.encode(text, add_special_tokens=False) != list(prompt):
            raise ValueError(errors.prompt_ids_not_text(self.processor))
        out = self.call({"text": text}, {**hf_kwargs, "add_special_tokens": False})  # the prompt holds its own specials
        written = out["input_ids"][0].tolist()
        for modality, count in counts.items():
            written = text_step.fold_cores(written, self.core(modality, hf_kwargs), self.placeholder_ids(modality), count)
        return written

    def _placeholder_span(self, modality: str, probe_ids: list[int], prompt_frame: frame.PromptFrame) -> tuple[int, int]:
        if prompt_frame.inserts_item:  # the processor puts the item before everything
            return (0, 0)
        target = self.placeholder_ids(modality)
        start = placeholders.find_sublist(probe_ids, target)
        if start is None:
            raise ProbeError(f"{self.placeholder_text(modality)!r} does not tokenize to the same ids inside and outside a prompt")
        return (start, start + len(target))

    def call_one_item(self, text: str, item: Mapping[str, list], hf_kwargs: Mapping[str, object]):
        """Call the processor on one item, flat (`videos=[v]`) or per sample (`[[v]]`).

        Processors disagree on the layout of media lists (SmolVLM counts a flat
        video's frames as videos); the per-sample layout is what every processor
        accepts for a batch of one, so it is tried when the flat one is refused.
        The token types are hf_bridge's to ask for, over a request's own
        `return_mm_token_type_ids` (an output the model never gets), which would
        otherwise reach the call twice.
        """
        merged = self.merge(hf_kwargs)
        asked = {"return_mm_token_type_ids": True, **video_metadata_asked(self.processor, item, merged)}
        hf_kwargs = {k: v for k, v in hf_kwargs.items() if k not in asked}
        try:
            flat = call_reading_one_videos_metadata(lambda media: self.call({"text": text, **media, **asked}, hf_kwargs), dict(item))
            return without_asked_metadata(flat, merged)
        except ValueError as flat_error:
            nested = {"text": [text], **{k: [v] for k, v in item.items()}, **asked}
            try:
                return without_asked_metadata(self.call(nested, hf_kwargs), merged)
            except ValueError:
                raise flat_error  # noqa: B904 - its cause is the processor's own error

    def blank(
        self, modality: str, count: int = 1, width: int | None = None, height: int | None = None,
        frames: int | None = None, seconds: float = AUDIO_SECONDS, hf_kwargs: Mapping[str, object] = {},
    ):
        """`count` blank items of the shape this processor accepts (see `BLANK_SHAPES`),
        with any of its sides (a clip's length) replaced, for a call with the request's
        `hf_kwargs`."""
        shape = self.blank_shape(modality)
        shape = BlankShape(width or shape.width, height or shape.height, frames or shape.frames)
        return blank_items(self.processor, modality, count, shape, seconds, kwargs=self.merge(hf_kwargs))

    @cached_property
    def pad_tokens_added(self) -> int:
        """How many more of the tokenizer's pad token the default kwargs give a probe's text
        than the same call with padding off: the sentinel alone, or where the processor
        refuses text alone, a blank item of the first modality it takes. 0 where no call
        runs both ways."""
        pad = getattr(self.tokenizer, "pad_token_id", None)
        if pad is None:
            return 0
        calls = [lambda kw: self.call({"text": PROBE_SENTINEL}, kw)]
        calls += [lambda kw, m=m: self.call_one_item(self.placeholder_text(m), self.blank(m), kw)
                  for m in processor_modalities(self.processor)]
        for call in calls:
            try:
                padded, plain = call({}), call({"padding": False})
            except Exception:  # noqa: BLE001 - try the next layout
                continue
            return padded["input_ids"][0].tolist().count(pad) - plain["input_ids"][0].tolist().count(pad)
        return 0

    def blank_placeholder_length(
        self, modality: str, width: int | None = None, height: int | None = None,
        frames: int | None = None, seconds: float = AUDIO_SECONDS,
    ) -> int:
        """Placeholder length of one blank item of these sides (a clip of these seconds),
        under the default kwargs. Kept here, once per processor: vLLM runs its size searches
        three times at engine start, each on a processing info of its own, and a video
        model processed the same blank videos three times (18 s of Nemotron-H-Omni's 42 s)."""
        key = (modality, width, height, frames, seconds)
        if key not in self._blank_lengths:
            item = self.blank(modality, 1, width, height, frames, seconds)
            self._blank_lengths[key] = len(self.probe(modality, item, self.default_kwargs)[1])
        return self._blank_lengths[key]

    def blank_shape(self, modality: str) -> BlankShape:
        if modality not in self._blank_shapes:
            self.frame(modality)
        return self._blank_shapes[modality]

    # -- what can be placed -------------------------------------------------------------

    @cached_property
    def failures(self) -> dict[str, str]:
        """Modality -> why hf_bridge cannot place its items, for each modality the
        processor has a sub-processor for and hf_bridge cannot probe. Empty: all placeable."""
        out = {}
        for modality in processor_modalities(self.processor):
            try:
                self.probe(modality, self.blank(modality), self.default_kwargs)
            except Exception as exc:  # noqa: BLE001 - any failure switches the modality off
                out[modality] = f"{type(exc).__name__}: {first_line(exc)}"
        return out

    def placeable(self) -> list[str]:
        return [m for m in processor_modalities(self.processor) if m not in self.failures]

    def iter_items(self, modality: str, hf_data: Mapping[str, Any]) -> Iterator[dict[str, list]]:
        """Each item of `modality` in `hf_data` (the processor's keyword layout), alone."""
        present = [k for k in HF_DATA_KEYS[modality] if hf_data.get(k) is not None]
        if not present:
            return
        for i in range(len(hf_data[present[0]])):
            yield {k: [hf_data[k][i]] for k in present}
