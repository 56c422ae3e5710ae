"""Per-layer token embeddings, carried from the token ids to the decoder (no vLLM import).

Gemma 4's decoder adds, at every layer, an embedding looked up by token id
(transformers' "PLE": `hidden_size_per_layer_input`), with each media position's id
replaced by the pad id. vLLM hands a multimodal model's decoder the merged input
embeddings only; given no ids, transformers recovers them by comparing every row with
the whole embedding table: a `[tokens, vocab, hidden]` comparison, beyond any memory at
real sizes, that fails outright at an image row. So hf_bridge looks the per-layer
embeddings up where vLLM still has the ids (`embed_input_ids`) and hands them to the HF
model's forward, which takes them as `per_layer_inputs`. A model whose forward has no
such argument (Gemma 3n's) serves text only.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from .hf_classes import base_model_class, forward_takes
from .step_kwargs import hand_step_kwargs

PER_LAYER_INPUT_FIELD = "hidden_size_per_layer_input"
"""transformers' text-config field for per-layer token embeddings (Gemma 3n, Gemma 4)."""
PER_LAYER_INPUTS_ARG = "per_layer_inputs"
"""The HF model's forward argument for them, `[batch, tokens, layers, hidden_size_per_layer_input]`."""
DYNAMIC_DIM = 1
"""Its token dimension, which vLLM's compile decorator must leave dynamic."""
MEDIA_TOKEN_ID = "pad_token_id"
"""The text config's id whose per-layer embedding media positions get, as in transformers."""


def reads_per_layer_token_embeddings(config: Any) -> bool:
    return bool(getattr(config.get_text_config(), PER_LAYER_INPUT_FIELD, None))


def media_need_token_ids(config: Any) -> bool:
    """Whether the decoder reads per-layer token embeddings that hf_bridge cannot hand it:
    media positions would then fail, text alone is served."""
    return reads_per_layer_token_embeddings(config) and not forward_takes(base_model_class(config), PER_LAYER_INPUTS_ARG)


class PerLayerTokenInputs:
    """One step's per-layer token embeddings, from `embed_input_ids` to the HF forward.

    They live in one buffer sized for the most tokens a step holds, whose address never
    changes: a captured graph reads it, and a runner that pads the step reads rows past
    the step's own (their outputs are dropped)."""

    def __init__(self, text_model: torch.nn.Module, max_tokens: int):
        self.lookup = text_model.get_per_layer_inputs
        takes_embeds = "inputs_embeds" in inspect.signature(self.lookup).parameters
        self.lookup_kwargs = {"inputs_embeds": None} if takes_embeds else {}  # Gemma 4 asks, Gemma 3n does not
        self.media_token_id = getattr(text_model.config, MEDIA_TOKEN_ID, None) or 0
        row = self._rows(torch.zeros(1, dtype=torch.long, device=next(text_model.parameters()).device))
        self.buffer = row.new_zeros(max_tokens, *row.shape[1:])

    def _rows(self, token_ids: torch.Tensor) -> torch.Tensor:
        """`[tokens, layers, width]` for 1-D `token_ids`."""
        return self.lookup(token_ids[None], **self.lookup_kwargs)[0]

    def record(self, input_ids: torch.Tensor, is_multimodal: torch.Tensor | None) -> None:
        """Look up this step's ids, each media position's as the pad id (transformers' rule)."""
        if is_multimodal is not None:
            input_ids = torch.where(is_multimodal.to(input_ids.device), self.media_token_id, input_ids)
        rows = self._rows(input_ids)
        self.buffer[: rows.shape[0]].copy_(rows)

    def decoder_kwargs(self, num_tokens: int) -> dict[str, object]:
        return {PER_LAYER_INPUTS_ARG: self.buffer[:num_tokens][None]}

    def install(self, hf_model: torch.nn.Module) -> None:
        """Hand them to the HF model on each call with embeddings; it passes them on to its
        decoder, whose compiled graph takes them as an argument (`DYNAMIC_DIM`)."""
        hand_step_kwargs(hf_model, self.decoder_kwargs)

