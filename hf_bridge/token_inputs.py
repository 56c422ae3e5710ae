"""Per-layer token embeddings, carried from the token ids to the decoder (no vLLM import).

Gemma 4's decoder adds, at every layer, an embedding looked up by token id
(transformers' "PLE": `hidden_size_per_layer_input`), with each media position's id
replaced by the pad id. vLLM hands a multimodal model's decoder the merged input
embeddings only; given no ids, transformers recovers them by comparing every row with
the whole embedding table: a `[tokens, vocab, hidden]` comparison, beyond any memory at
real sizes, that fails outright at an image row. So hf_bridge looks the per-layer
embeddings up where vLLM still has the ids (`embed_input_ids`) and hands them to the HF
model's forward, which takes them as `per_layer_inputs`, or where the base model's does
not, to its text model's where the base model hands it them too (Gemma 3n's) or the text
model, given embeddings alone, looks them up itself (Gemma 4's). A base model that does
neither (LLaVA's over a Gemma 3n decoder) runs its decoder without them in transformers,
and so it does here. Ids whose per-layer rows the forward builds
otherwise (Gemma 3n's media ranges, past the table's rows) take the forward's own
(`forward_token_rows.py`).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from .forward_token_rows import TokenRows
from .hf_classes import base_model_class, forward_passes, forward_takes
from .step_kwargs import hand_step_kwargs

PER_LAYER_INPUT_FIELD = "hidden_size_per_layer_input"
"""transformers' text-config field for per-layer token embeddings (Gemma 3n, Gemma 4)."""
PER_LAYER_INPUTS_ARG = "per_layer_inputs"
"""The HF model's forward argument for them, `[batch, tokens, layers, hidden_size_per_layer_input]`."""
DYNAMIC_DIM = 1
"""Its token dimension, which vLLM's compile decorator must leave dynamic."""
MEDIA_TOKEN_ID = "pad_token_id"
"""The text config's id whose per-layer embedding media positions get, as in transformers."""
PER_LAYER_VOCAB_FIELD = "vocab_size_per_layer_input"
"""transformers' text-config field for the rows of the per-layer table (the vocabulary's
first ids; Gemma 3n's media ids lie past it)."""


def reads_per_layer_token_embeddings(config: Any) -> bool:
    return bool(getattr(config.get_text_config(), PER_LAYER_INPUT_FIELD, None))


def media_need_token_ids(config: Any) -> bool:
    """Whether the decoder reads per-layer token embeddings that hf_bridge cannot hand it:
    media positions would then fail, text alone is served."""
    takers = (base_model_class(config), base_model_class(config.get_text_config()))
    return reads_per_layer_token_embeddings(config) and not any(forward_takes(cls, PER_LAYER_INPUTS_ARG) for cls in takers)


def per_layer_inputs_taker(hf_model: torch.nn.Module, text_model: torch.nn.Module | None) -> torch.nn.Module | None:
    """The module hf_bridge hands per-layer inputs: the HF base model where its forward
    takes them (Gemma 4's passes them on to its text model), else its text model where
    that takes them and transformers' forward gives it them (`text_model_gets_them`)."""
    if forward_takes(type(hf_model), PER_LAYER_INPUTS_ARG):
        return hf_model
    if text_model is not None and forward_takes(type(text_model), PER_LAYER_INPUTS_ARG) and text_model_gets_them(
            type(hf_model), type(text_model)):
        return text_model
    return None


def text_model_gets_them(base_class: type, text_class: type) -> bool:
    """Whether transformers' base model runs its text model with per-layer token embeddings:
    it hands them on (Gemma 3n's computes them from the ids), or the text model, given
    embeddings alone, maps them back to ids and looks them up itself (Gemma 4's
    `get_per_layer_inputs` takes `inputs_embeds`). Gemma 3n's text model given embeddings
    alone adds none, so behind LLaVA's base model it runs without them."""
    return looks_up_from_embeddings(text_class) or forward_passes(base_class, PER_LAYER_INPUTS_ARG)


def looks_up_from_embeddings(text_class: type) -> bool:
    """Whether the text model's `get_per_layer_inputs` takes `inputs_embeds` (Gemma 4's,
    which given embeddings alone maps them back to ids); Gemma 3n's takes ids only."""
    lookup = getattr(text_class, "get_per_layer_inputs", None)
    return lookup is not None and "inputs_embeds" in inspect.signature(lookup).parameters


class PerLayerTokenInputs:
    """One step's per-layer token embeddings, from `embed_input_ids` to the HF forward.

    They live in one buffer sized for the most tokens a step holds, whose address never
    changes: a captured graph reads it, and a runner that pads the step reads rows past
    the step's own (their outputs are dropped)."""

    def __init__(self, text_model: torch.nn.Module, max_tokens: int):
        self.lookup = text_model.get_per_layer_inputs
        self.lookup_kwargs = {"inputs_embeds": None} if looks_up_from_embeddings(type(text_model)) else {}  # Gemma 4 asks
        self.media_token_id = getattr(text_model.config, MEDIA_TOKEN_ID, None) or 0
        self.table_size = getattr(text_model.config, PER_LAYER_VOCAB_FIELD, None) or text_model.config.vocab_size
        row = self._rows(torch.zeros(1, dtype=torch.long, device=next(text_model.parameters()).device))
        self.buffer = row.new_zeros(max_tokens, *row.shape[1:])
        self.learnt: TokenRows | None = None
        """The forward's own rows for the ids it gives no table row (`forward_token_rows.py`)."""

    def _rows(self, token_ids: torch.Tensor) -> torch.Tensor:
        """`[tokens, layers, width]` for 1-D `token_ids`."""
        return self.lookup(token_ids[None], **self.lookup_kwargs)[0]

    def table_rows(self, token_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The table's rows for 1-D `token_ids`, and which ids it has a row for (the others
        read the media id's row here)."""
        served = token_ids < self.table_size
        return self._rows(torch.where(served, token_ids, self.media_token_id)), served

    def record(self, input_ids: torch.Tensor, is_multimodal: torch.Tensor | None) -> None:
        """Look up this step's ids, each media position's as the pad id (transformers' rule),
        and the learnt ids' rows as the forward builds them."""
        lookup = input_ids
        if is_multimodal is not None:
            lookup = torch.where(is_multimodal.to(input_ids.device), self.media_token_id, lookup)
        if self.learnt is not None:
            lookup = torch.where(self.learnt.covers(input_ids), self.media_token_id, lookup)
        rows = self._rows(lookup)
        if self.learnt is not None:
            rows = self.learnt.apply(input_ids, rows)
        self.buffer[: rows.shape[0]].copy_(rows)

    def decoder_kwargs(self, num_tokens: int) -> dict[str, object]:
        return {PER_LAYER_INPUTS_ARG: self.buffer[:num_tokens][None]}

    def install(self, hf_model: torch.nn.Module) -> None:
        """Hand them to the HF model on each call with embeddings; it passes them on to its
        decoder, whose compiled graph takes them as an argument (`DYNAMIC_DIM`)."""
        hand_step_kwargs(hf_model, self.decoder_kwargs)

