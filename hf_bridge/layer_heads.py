"""The heads a decoder layer's attention module counts itself.

vLLM's Transformers backend builds each layer's attention with the text config's
`num_attention_heads` and `num_key_value_heads` (or a heterogeneous config's per-layer
counts, transformers' `per_layer_config`). Some decoders count a layer's heads beside
those, on the module:
- query heads in its `num_heads` (Laguna's `num_attention_heads_per_layer`);
- key and value heads through its `num_key_value_groups`, the query heads each key head
  serves, which transformers' own attention functions read to repeat the keys (`repeat_kv`):
  MiMo-V2-Flash's sliding-window layers hold twice the config's key heads, and JetMoE hands
  its key heads tiled once per attention expert, each serving one query head.
Built with the config's counts, vLLM's layer viewed such a call's heads wrongly (a shape
error in its kernel, or another token's keys). Each layer is built with its module's own
counts, per tensor-parallel rank, so vLLM maps queries to keys as transformers does, and
its KV cache holds as many key heads as the module hands.

Where a module means something else by these attributes, the call-time width check
(`attention_terms.py`) still refuses the first forward, naming both counts, so reading
them can turn a refusal into a served layer but never a served layer into a wrong one.

Imports nothing from vLLM: the layer class is handed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from .errors import module_heads_not_divisible

QUERY_HEADS_ATTR = "num_heads"
"""The instance attribute transformers' attention modules keep their query heads in."""
GROUPS_ATTR = "num_key_value_groups"
"""The instance attribute transformers' attention functions repeat each key head by."""


class LayerHeads(NamedTuple):
    """Query and key/value heads of one attention layer (whole, or per rank)."""

    num_heads: int
    num_kv_heads: int


def _own_count(module: Any, attribute: str) -> int | None:
    """A positive int `module` sets itself (a class attribute or a flag says nothing of it)."""
    value = vars(module).get(attribute)
    return value if type(value) is int and value > 0 else None


def own_heads(module: Any, configured: LayerHeads) -> LayerHeads:
    """The heads `module` counts itself, each the configured count where it counts none:
    query heads by its `num_heads`, key heads as those over its `num_key_value_groups`."""
    query = _own_count(module, QUERY_HEADS_ATTR) or configured.num_heads
    groups = _own_count(module, GROUPS_ATTR)
    keys = query // groups if groups and query % groups == 0 else configured.num_kv_heads
    return LayerHeads(query, keys)


def heads_beside_config(modules: Mapping[str, Any], configured: Mapping[str, LayerHeads]) -> dict[str, LayerHeads]:
    """Each module (by name) whose own heads differ from its layer's configured ones -> its
    own; the others keep the config's."""
    own = {name: own_heads(module, configured[name]) for name, module in modules.items()}
    return {name: heads for name, heads in own.items() if heads != configured[name]}


def per_rank(heads: Mapping[str, LayerHeads], tp_size: int, model_type: str) -> dict[str, LayerHeads]:
    """Each module's heads on one tensor-parallel rank: its share of the query heads, and of
    the key heads as vLLM shares them (each rank keeps at least one, replicated)."""
    uneven = {name: count.num_heads for name, count in heads.items() if count.num_heads % tp_size}
    if uneven:
        raise ValueError(module_heads_not_divisible(model_type, uneven, tp_size))
    return {name: LayerHeads(count.num_heads // tp_size, max(1, count.num_kv_heads // tp_size))
            for name, count in heads.items()}


def with_heads(build_layer: Callable[..., Any], heads: Mapping[str, LayerHeads]) -> Callable[..., Any]:
    """Builds vLLM's attention layer as `build_layer` does; the layers named in `heads` (by
    their `prefix`) with those heads."""

    def build(**kwargs: Any) -> Any:
        if kwargs["prefix"] in heads:
            kwargs.update(heads[kwargs["prefix"]]._asdict())
        return build_layer(**kwargs)

    return build
