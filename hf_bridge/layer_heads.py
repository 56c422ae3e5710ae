"""Query heads a decoder layer's attention module counts itself.

vLLM's Transformers backend builds each layer's attention with the text config's
`num_attention_heads` (or a heterogeneous config's per-layer count, transformers'
`per_layer_config`). Some decoders count a layer's query heads beside those: Laguna's
`num_attention_heads_per_layer`, which each of its attention modules reads into its
`num_heads`. Built with the config's count, vLLM's layer viewed such a layer's queries by
the wrong heads (a shape error in its kernel). Query heads size no cache (the keys and
values do), so each layer is built with its module's own count, per tensor-parallel rank.

A module's `num_heads` is transformers' convention for the heads it projects its queries
into; where a module means something else by it, the call-time width check
(`attention_terms.py`) still refuses the first forward, naming both counts, so reading
it can turn a refusal into a served layer but never a served layer into a wrong one.

Imports nothing from vLLM: the layer class is handed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .errors import module_heads_not_divisible

MODULE_HEADS_ATTR = "num_heads"
"""The instance attribute transformers' attention modules keep their query heads in."""


def own_query_heads(module: Any) -> int | None:
    """The query heads `module` counts itself (its own `num_heads`), or None."""
    heads = vars(module).get(MODULE_HEADS_ATTR)
    return heads if type(heads) is int and heads > 0 else None


def heads_beside_config(modules: Mapping[str, Any], configured: Mapping[str, int]) -> dict[str, int]:
    """Each module (by name) whose own query heads differ from its layer's configured
    total -> its own count; the others keep the config's."""
    own = {name: own_query_heads(module) for name, module in modules.items()}
    return {name: heads for name, heads in own.items() if heads is not None and heads != configured[name]}


def per_rank(heads: Mapping[str, int], tp_size: int, model_type: str) -> dict[str, int]:
    """Each module's query heads on one tensor-parallel rank."""
    uneven = {name: count for name, count in heads.items() if count % tp_size}
    if uneven:
        raise ValueError(module_heads_not_divisible(model_type, uneven, tp_size))
    return {name: count // tp_size for name, count in heads.items()}


def with_query_heads(build_layer: Callable[..., Any], heads: Mapping[str, int]) -> Callable[..., Any]:
    """Builds vLLM's attention layer as `build_layer` does; the layers named in `heads`
    (by their `prefix`) with that many query heads."""

    def build(**kwargs: Any) -> Any:
        if kwargs["prefix"] in heads:
            kwargs["num_heads"] = heads[kwargs["prefix"]]
        return build_layer(**kwargs)

    return build
