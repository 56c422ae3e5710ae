"""LoRA adapters (`enable_lora`) on hf_bridge's models.

vLLM's LoRA layers adapt the linears of the text model that `get_mm_mapping` names, as
for the in-tree backend: the one `get_language_model` finds, so a flat model (Chameleon,
whose text layers sit in its base model) takes adapters too, where the in-tree mapping
raises "Could not locate the language model submodule".

vLLM's LoRA embedding finds each token's adapter by its position in the step's tokens. A
tower that looks its tokens up in the text model's embedding (Chameleon's VQ codes) is
not such a step, so it reads the embedding as the checkpoint has it: an adapter on the
token embedding reaches the prompt's tokens, not the tokens a tower looks up.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from vllm.lora.layers import BaseLayerWithLoRA
from vllm.model_executor.models.module_mapping import MultiModelKeys


class TextModelAdaptersMixin:
    """Goes before vLLM's `MultiModalMixin`, whose `get_mm_mapping` it replaces."""

    def get_mm_mapping(self) -> MultiModelKeys:
        text_model = self.get_language_model().model
        return MultiModelKeys.from_string_field(language_model=next(n for n, m in self.named_modules() if m is text_model))


@contextmanager
def token_embedding_unadapted(hf_model: torch.nn.Module, lora_config) -> Iterator[None]:
    """While a tower encodes: `hf_model`'s token embedding as the checkpoint has it (where
    `lora_config` enables LoRA; else nothing is looked up)."""
    embedding = hf_model.get_input_embeddings() if lora_config is not None else None
    if not isinstance(embedding, BaseLayerWithLoRA):
        yield
        return
    embedding.forward = embedding.base_layer.forward
    try:
        yield
    finally:
        del embedding.forward
