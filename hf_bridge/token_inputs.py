"""Decoders that read token ids beside the input embeddings (no vLLM import).

Gemma 4's decoder adds per-layer embeddings looked up by token id (transformers' "PLE":
`hidden_size_per_layer_input`, `per_layer_inputs`), with each media position's id
replaced by the pad id. vLLM hands a multimodal model's decoder the merged embeddings
only; transformers then recovers the ids by matching the embeddings against its table,
which works for text and fails at the first image row (a RuntimeError that would stop
the engine). Until hf_bridge carries those inputs itself, such a model serves text, and
a request with media is refused before it reaches the engine.
"""

from __future__ import annotations

from typing import Any

PER_LAYER_INPUT_FIELD = "hidden_size_per_layer_input"
"""transformers' text-config field for per-layer token embeddings (Gemma 3n, Gemma 4)."""


def reads_per_layer_token_embeddings(config: Any) -> bool:
    return bool(getattr(config.get_text_config(), PER_LAYER_INPUT_FIELD, None))
