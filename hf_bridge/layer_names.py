"""How vLLM's Transformers backend names each decoder layer's attention layer: the HF
attention module's name plus `VLLM_ATTN_ATTR`, under the model's prefix. vLLM's KV-cache
specs, shared caches and per-layer builds are all keyed by this name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm.model_executor.models.transformers.base import VLLM_ATTN_ATTR
from vllm.model_executor.models.utils import maybe_prefix


def vllm_layer_name(prefix: str, module_name: str) -> str:
    """The vLLM layer name of the attention layer set on the HF module `module_name`."""
    return maybe_prefix(prefix, f"{module_name}.{VLLM_ATTN_ATTR}")


def attention_module_names(attention_fusers: Mapping[int, tuple[str, Any]]) -> dict[int, str]:
    """Decoder layer index -> its HF attention module's name, from vLLM's `attention_fusers`."""
    return {layer: name for layer, (name, _) in attention_fusers.items()}
