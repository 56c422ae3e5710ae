"""What a processor adds to prompts outside its items' expansions, learnt from blank-item
probes (`frame.py`), or that it lays a modality's prompts out from their text alone
(`text_step.py`): no vLLM import.
"""

from __future__ import annotations

from functools import cached_property

from . import frame, placeholders
from .probes import PROBE_SENTINEL, BlankShape, blank_items, first_accepted_shape, token_type_ids


class FrameLearningMixin:
    """`ProcessorProbe`'s prompt frames, learnt once per modality."""

    def frame(self, modality: str) -> frame.PromptFrame:
        """What the processor adds to prompts with `modality` items, outside their expansions."""
        if modality not in self._frames:
            self._frames[modality] = self._learn_frame(modality)
        return self._frames[modality]

    def _learn_frame(self, modality: str) -> frame.PromptFrame:
        """Probe with blank items, placeholder then sentinel text (see `frame.py`), in the
        first blank shape the processor accepts (`first_accepted_shape`)."""

        def learn(shape: BlankShape) -> frame.PromptFrame:
            try:
                return self._learn_frame_with(modality, shape)
            except placeholders.PlaceholderError:
                if not self._writes_prompt_alone(modality, shape):
                    raise  # the processor ran: its output is what cannot be read
                self.writes_prompt.add(modality)
                return frame.PromptFrame()  # its text step writes everything

        shape, learnt = first_accepted_shape(self.processor, modality, learn)
        self._blank_shapes[modality] = shape
        return learnt

    def _learn_frame_with(self, modality: str, shape: BlankShape) -> frame.PromptFrame:
        sentinel_text = PROBE_SENTINEL
        sentinel = self.tokenizer.encode(sentinel_text, add_special_tokens=False)
        hf_kwargs = self.default_kwargs
        placeholder = self.placeholder_text(modality)
        one_blank = blank_items(self.processor, modality, 1, shape, kwargs=hf_kwargs)
        placeholder_probe = self.tokenizer.encode(placeholder)
        text_before = placeholder_probe[: placeholders.find_sublist(placeholder_probe, self.placeholder_ids(modality)) or 0]
        try:
            one = self.call_one_item(placeholder + sentinel_text, one_blank, hf_kwargs)
            inserts = False
        except Exception as explicit_error:  # noqa: BLE001 - any refusal means: try without a placeholder
            try:
                one = self.call_one_item(sentinel_text, one_blank, hf_kwargs)
            except Exception:  # noqa: BLE001 - neither layout: the item itself is refused
                raise explicit_error  # noqa: B904 - keeps the processor's own error as its cause
            if not any(token_type_ids(one, self.processor, self.config)[0].tolist()):  # it did not insert the item either
                raise explicit_error
            inserts = True
        two = None
        if not inserts:
            try:
                two_blank = blank_items(self.processor, modality, 2, shape, kwargs=hf_kwargs)
                two = self.call_one_item((placeholder + sentinel_text) * 2, two_blank, hf_kwargs)["input_ids"][0].tolist()
            except Exception:  # noqa: BLE001 - a processor may take one item per prompt (Fuyu)
                two = None
        return frame.frame_from_probes(
            one["input_ids"][0].tolist(), token_type_ids(one, self.processor, self.config)[0].tolist(), two, sentinel, text_before, inserts
        )

    def _writes_prompt_alone(self, modality: str, shape: BlankShape) -> bool:
        """Whether the processor's ids for the frame probes' texts (one item, two items)
        are the same without the items as with blank ones: it lays them out from the
        text alone (`text_step.py`)."""
        placeholder = self.placeholder_text(modality) + PROBE_SENTINEL
        for count in (1, 2):
            text = placeholder * count
            try:
                with_items = self.call_one_item(text, blank_items(self.processor, modality, count, shape, kwargs=self.default_kwargs), self.default_kwargs)
                alone = self.call({"text": text}, self.default_kwargs)
            except Exception:  # noqa: BLE001 - it cannot run one of them: not what it does
                return False
            if with_items["input_ids"][0].tolist() != alone["input_ids"][0].tolist():
                return False
        return True

    @cached_property
    def text_only_frame(self) -> frame.PromptFrame | None:
        """What the processor adds to a prompt without items (Chameleon's separator,
        Emu3's BOS), read off its ids for the sentinel alone. Empty where it adds nothing
        or refuses text alone (PaliGemma's: transformers cannot run such a prompt either);
        None where it rewrites the text itself, which no frame can say."""
        try:
            out = self.call({"text": PROBE_SENTINEL}, self.default_kwargs)
        except Exception:  # noqa: BLE001 - a processor that needs items has no text-only layout
            return frame.PromptFrame()
        return frame.text_only_frame(out["input_ids"][0].tolist(), self.tokenizer.encode(PROBE_SENTINEL))
