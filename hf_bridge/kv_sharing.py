"""Decoder layers that attend over an earlier layer's keys and values (transformers'
`num_kv_shared_layers`: Gemma 3n, Gemma 4's small checkpoints).

transformers hands such a layer the keys and values its source layer computed. Built as a
plain vLLM layer, it would write them again into a KV cache of its own: correct, but each
shared layer costs as much cache memory as a layer computing its own. Built reading its
source's cache (vLLM's `kv_sharing_target_layer_name`, as vLLM's native Gemma 3n and
Gemma 4 build theirs), it costs none, so the same memory holds more tokens.

Imports nothing from vLLM: the layer class is handed in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

KV_SHARED_LAYERS = "num_kv_shared_layers"
"""transformers' config field: how many of the last decoder layers share keys and values."""
SHARED_LAYER_FLAG = "is_kv_shared_layer"
"""What transformers' attention module of such a layer sets; a layer whose module does not
say so keeps a cache of its own, whatever its config says."""


def kv_sharing_sources(text_config: Any) -> dict[int, int]:
    """Each decoder layer that reuses another's keys and values -> that layer, by
    transformers' rule: the last `num_kv_shared_layers` layers share, each the last
    unshared layer of its own kind (`layer_types`: a sliding-window layer reads a
    sliding-window layer's)."""
    depth = text_config.num_hidden_layers
    shared = getattr(text_config, KV_SHARED_LAYERS, 0) or 0
    first_shared = depth - shared
    if shared <= 0 or first_shared <= 0:
        return {}
    kinds = list(getattr(text_config, "layer_types", None) or [None] * depth)
    sources = {}
    for layer in range(first_shared, depth):
        same_kind = [source for source in range(first_shared) if kinds[source] == kinds[layer]]
        if same_kind:
            sources[layer] = same_kind[-1]
    return sources


def reading_shared_caches(layer_cls: type, targets: dict[str, str]) -> Callable[..., Any]:
    """Builds `layer_cls` (vLLM's `Attention`) as it is called; the layers named in
    `targets` (by their `prefix`) read the named layer's cache instead of keeping one."""

    def build(**kwargs: Any) -> Any:
        return layer_cls(**kwargs, kv_sharing_target_layer_name=targets.get(kwargs["prefix"]))

    return build
