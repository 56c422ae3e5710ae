"""Placeholders paired with a request's items before vLLM processes it: a surplus or missing
placeholder refused, as transformers refuses it (vLLM would leave a surplus one in the
prompt as a plain token), and the tokens the HF processor adds outside the expansions
(`frame.py`) or writes itself (`text_step.py`) laid into the prompt, so the prompt vLLM runs
is the one transformers runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from . import errors, frame, placeholders
from .audio_channels import ArrayRowsAudioItems
from .dummy_request import is_dummy_request
from .hf_classes import base_model_class
from .probes import config_token_ids


class PlaceholderPairingMixin:
    """The multimodal processor's pairing of placeholders with items, and its refusals of
    a prompt whose placeholders or embedding tokens the items do not account for."""

    def _paired_with_items(self, inputs):
        """`inputs` with its prompt laid out as the HF processor lays it out, once each
        modality's placeholders match its items; a request with items of several modalities
        that the model encodes inside one forward (`inline_modalities`) is refused, as
        encoding each item alone cannot reproduce it."""
        counts = inputs.mm_data_items.get_all_counts()
        together = [m for m in self.info.inline_modalities if counts.get(m)]
        if len(together) > 1 and not is_dummy_request():
            model_class = base_model_class(self.info.get_hf_config()).__name__
            raise ValueError(errors.modalities_encoded_together(together, model_class, self.info.get_hf_processor()))
        frames = []
        probes = self.info.probes
        for modality in sorted(set(counts) | set(probes.placeholder_texts)):
            text = probes.placeholder_texts.get(modality)
            if text is None:
                continue
            target = probes.placeholder_ids(modality)
            found = placeholders.count_sublist(inputs.prompt, target)
            given = counts.get(modality, 0)
            prompt_frame = self.info.frame(modality) if given else None
            if prompt_frame is not None and prompt_frame.inserts_item:
                if found:
                    raise ValueError(errors.placeholder_not_wanted(modality, text, found, self.info.get_hf_processor()))
            elif found != given and (given or found):
                expanded = self._expanded_placeholder(modality, inputs.prompt, given)
                message = errors.placeholder_mismatch(modality, text, found, given, expanded)
                if isinstance(rows := inputs.mm_data_items.get(modality), ArrayRowsAudioItems):
                    message += " " + errors.audio_rows_read_as_clips(rows.array_shape)
                raise ValueError(message)
            if prompt_frame is not None and not prompt_frame.is_empty:
                frames.append((prompt_frame, target, given))
        written = {m: n for m, n in counts.items() if n and m in probes.writes_prompt}
        if written:  # the processor lays these out itself, from the text (`text_step.py`)
            inputs = dataclasses.replace(inputs, prompt=probes.written_prompt(inputs.prompt, written, inputs.hf_processor_mm_kwargs))
        if frames:
            inputs = dataclasses.replace(inputs, prompt=frame.apply_frame(inputs.prompt, frames))
        return inputs

    def _expanded_placeholder(self, modality: str, prompt: list[int], given: int) -> tuple[str, int] | None:
        """(token, times) where the prompt holds the token the model reads the modality's
        embeddings at more times in a row than the request has items: the HF processor's
        `input_ids`, whose placeholders it expanded already, sent as the prompt."""
        token = config_token_ids(self.info.probes.config).get(modality)
        if token is None or (longest := placeholders.longest_run(prompt, token)) <= max(given, 1):
            return None
        return self.info.get_tokenizer().decode([token]), longest

    def _check_no_embedding_tokens_outside_items(self, prompt: list[int], ranges: Mapping[str, Sequence[Any]]) -> None:
        """Refuse a prompt holding a token the model reads embeddings at (its config's
        `image_token_id`...) outside every item's placeholder. The HF processor's
        `input_ids` sent as the prompt hold them, and where the placeholder survives its
        expansion (Gemma3's `<start_of_image>`) vLLM expanded it again, silently; or the
        text names the token itself. vLLM runs such a token as text, where transformers
        refuses it for the features it lacks."""
        spans = [(r.offset, r.length) for per_modality in ranges.values() for r in per_modality]
        for modality, token in config_token_ids(self.info.probes.config).items():
            if stray := placeholders.count_outside(prompt, token, spans):
                inserts = modality in self.info.probes.placeholder_texts and self.info.frame(modality).inserts_item
                raise ValueError(errors.embedding_tokens_outside_items(
                    modality, self.info.get_tokenizer().decode([token]), stray, self.info.probes.placeholder_texts.get(modality),
                    self.info.get_hf_processor() if inserts else None))
