"""Attention terms vLLM's paged attention cannot apply: refused, never dropped; and the
decoder layers that carry a state, which it cannot hold.

transformers' attention interface hands each call a model's own terms beside q, k and v:
a relative-position bias added to the scores (Inkling's `position_bias`), the key blocks a
sparse indexer selected (MiniMax-M3's `block_indices`, DeepSeek-V3.2's `indices`). vLLM's
`"vllm"` and `"vllm_mla"` functions take them in `**kwargs` and drop them, as they once
dropped attention sinks (vLLM's `check_sinks` now refuses those): the model then runs
dense, unbiased attention, and answers wrongly without an error (MiniMax-M3's prefill
differs only past the blocks its indexer keeps, so tiny checks pass; its first decode
step then fails inside the indexer, which reads a cache vLLM does not keep).
`refuse_unapplied_terms` wraps each of vLLM's functions with that check, calling it
unchanged otherwise; the first forward refuses (vLLM's start-up pass, where it runs one:
every GPU engine; the CPU's eager mode skips it, so there the first request).

A decoder layer may also keep a convolution or recurrent state from one step to the next
(linear attention, LFM2's short convolutions, Inkling's `hybrid` layers), which
transformers caches beside the keys and values and vLLM's paged KV cache cannot hold:
served as attention, each step would see its own tokens only. `layers_with_carried_state`
finds them with transformers' own reading of the config; hf_bridge gives them vLLM's
per-request state slots (`state_layers.py`), or refuses them by name.

vLLM builds every decoder layer's attention with the config's `attn_logit_softcapping`;
transformers soft-caps the scores only where a module hands its attention function a
`softcap` (Gemma 2 does; Gemma 3's config has the field, which its attention never
passes). `passed_soft_cap` reads what a module's call hands, so vLLM applies that, and the
check above also refuses a call whose `softcap` is not what vLLM's layer applies.

vLLM's function reads each call's queries and keys as (tokens, heads x head size) and views
them by the heads its layer was built with, the config's counts (per tensor-parallel rank).
A module that hands it other counts was read as other tokens' keys, and answered wrongly
without an error (JetMoE, which tiles its key heads once per attention expert), or stopped
on a shape deep in vLLM's kernel (Laguna's query heads per layer); where the module counts
them itself, its layer is now built with them (`layer_heads.py`). Each
module is marked with its layer's counts (`BUILT_HEADS_ATTR`), and the check refuses a call
whose widths differ from them.

transformers' mask functions build no mask under vLLM's attention implementation (it
registers none), so a tensor mask handed to vLLM's function is the module's own term
(Doge's dynamic mask, computed from the values and added to the scores): refused the same
way, as vLLM's kernel attends by positions and never reads it.

A layer whose indexer picks the keys each query attends to and keeps keys of its own in
the cache (transformers' "indexed_attention": DeepSeek-V3.2, GLM-5, Qwen4-Exp) is found the
same way, `layers_with_indexed_attention`, and refused before anything is built: some such
layers hand their choice to the attention function (refused at the first forward, above),
others fold it into the attention mask, which vLLM's functions never receive (Qwen4-Exp's
indexer then raised `AttributeError` on the first request). No vLLM import here.
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch

VLLM_ATTENTION_FUNCTIONS = ("vllm", "vllm_mla")
"""The names vLLM registers its attention functions under in transformers' `ALL_ATTENTION_FUNCTIONS`."""
APPLIED_BY_VLLM = frozenset({"dropout", "scaling", "sliding_window", "softcap", "s_aux"})
"""Keywords vLLM's attention layer stands for: built with the module's scale, the config's
sliding window and soft cap, and the sinks (which vLLM checks itself); no dropout at inference."""
CHECKED_ATTR = "hf_bridge_checks_terms"
SOFT_CAP_KEYWORD = "softcap"
"""The keyword transformers' attention functions take a soft cap of the scores by."""
APPLIED_SOFT_CAP_ATTR = "hf_bridge_soft_cap"
"""Set on an HF attention module: the soft cap vLLM's layer for it applies (None: none)."""
MASK_ARGUMENT, MASK_POSITION = "attention_mask", 3
"""How transformers' attention functions take the mask: after the module, q, k and v."""
BUILT_HEADS_ATTR = "hf_bridge_built_heads"
"""Set on an HF attention module: the `BuiltHeads` of vLLM's layer for it."""
_UNSET = object()


class BuiltHeads(NamedTuple):
    """What vLLM's attention layer views a call's queries and keys by (per rank)."""

    num_heads: int
    num_kv_heads: int
    head_size: int


class Refusals(NamedTuple):
    """The messages the call-time check raises (hf_bridge's `errors` writes them)."""

    terms: Callable[[torch.nn.Module, list[str]], str]
    soft_cap: Callable[[torch.nn.Module, float | None, float | None], str]
    heads: Callable[[torch.nn.Module, str, tuple[int, int], tuple[int, int]], str]


def known_keywords() -> frozenset[str]:
    """`APPLIED_BY_VLLM` and transformers' shared keywords (`TransformersKwargs`: positions,
    packed-sequence bounds, output flags), which describe the batch vLLM lays out itself."""
    from transformers.utils.generic import TransformersKwargs

    return APPLIED_BY_VLLM | frozenset(TransformersKwargs.__annotations__)


def unapplied_terms(kwargs: Mapping[str, Any], known: frozenset[str]) -> list[str]:
    """The keywords of one attention call that carry a tensor vLLM's attention would drop."""
    return [name for name, value in kwargs.items() if isinstance(value, torch.Tensor) and name not in known]


def passed_soft_cap(call: ast.Call | None, module: torch.nn.Module, configured: float | None) -> float | None:
    """The soft cap `module` hands transformers' attention interface in `call` (its one call
    to it, as vLLM's attention fuser finds it): the `softcap=` keyword's value, a constant or
    an attribute of the module; none without that keyword. `configured` where it cannot be
    read (no call found, another expression): the call-time check compares it then."""
    if call is None:
        return configured
    passed = [keyword.value for keyword in call.keywords if keyword.arg == SOFT_CAP_KEYWORD]
    if not passed:
        return None
    node = passed[0]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return getattr(module, node.attr, configured)
    return configured


def same_soft_cap(passed: float | None, applied: float | None) -> bool:
    """Whether a call's soft cap is the one vLLM's layer applies (0 and None: no cap, as vLLM reads them)."""
    return (passed or None) == (applied or None)


def own_mask(args: tuple, kwargs: Mapping[str, Any]) -> list[str]:
    """`[MASK_ARGUMENT]` where a call hands a tensor mask: transformers' mask functions give
    none under vLLM's attention implementation, which registers none, so such a mask is the
    module's own term (Doge's dynamic mask, added to the scores), which vLLM's kernel,
    attending by positions, never reads."""
    mask = kwargs[MASK_ARGUMENT] if MASK_ARGUMENT in kwargs else args[MASK_POSITION] if len(args) > MASK_POSITION else None
    return [MASK_ARGUMENT] if isinstance(mask, torch.Tensor) else []


def heads_not_as_built(query: torch.Tensor, key: torch.Tensor, built: BuiltHeads) -> tuple[str, tuple[int, int], tuple[int, int]] | None:
    """("query" or "key", (heads, head size) handed, (heads, head size) vLLM's layer holds) for
    the first of a call's queries and keys, each (batch, heads, tokens, head size), whose
    width per token is not the layer's; None where both are."""
    for name, tensor, heads in (("query", query, built.num_heads), ("key", key, built.num_kv_heads)):
        if tensor.shape[1] * tensor.shape[-1] != heads * built.head_size:
            return name, (tensor.shape[1], tensor.shape[-1]), (heads, built.head_size)
    return None


def refuse_unapplied_terms(attention: Callable, refusals: Refusals) -> Callable:
    """`attention`, raising `ValueError` with `refusals`' message on a call that carries terms
    it would drop, on one whose soft cap is not the one vLLM's layer for the module applies
    (`APPLIED_SOFT_CAP_ATTR`), and on one whose queries or keys are not as wide as that
    layer views them (`BUILT_HEADS_ATTR`)."""
    if getattr(attention, CHECKED_ATTR, False):
        return attention
    named = inspect.signature(attention).parameters  # a mask may come by keyword (Cohere-Compass)
    known = known_keywords() | {n for n, p in named.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}

    @functools.wraps(attention)
    def checked(module, *args, **kwargs):
        terms = unapplied_terms(kwargs, known) + own_mask(args, kwargs)
        if terms:
            raise ValueError(refusals.terms(module, terms))
        applied = getattr(module, APPLIED_SOFT_CAP_ATTR, _UNSET)
        if applied is not _UNSET and not same_soft_cap(kwargs.get(SOFT_CAP_KEYWORD), applied):
            raise ValueError(refusals.soft_cap(module, kwargs.get(SOFT_CAP_KEYWORD), applied))
        built = getattr(module, BUILT_HEADS_ATTR, None)
        if built is not None and len(args) >= 2 and (mismatch := heads_not_as_built(args[0], args[1], built)) is not None:
            raise ValueError(refusals.heads(module, *mismatch))
        return attention(module, *args, **kwargs)

    setattr(checked, CHECKED_ATTR, True)
    return checked


def wrap_vllm_attention_functions(wrap: Callable[[Callable], Callable]) -> None:
    """Register `wrap(function)` in place of each of vLLM's attention functions in
    transformers' registry (a wrapper that marks itself wraps once per process)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    for name in VLLM_ATTENTION_FUNCTIONS:
        if name in ALL_ATTENTION_FUNCTIONS:
            ALL_ATTENTION_FUNCTIONS.register(name, wrap(ALL_ATTENTION_FUNCTIONS[name]))


def install(refusals: Refusals) -> None:
    """Wrap vLLM's attention functions in transformers' registry with the check, once per process."""
    wrap_vllm_attention_functions(lambda attention: refuse_unapplied_terms(attention, refusals))


def attends_beside_its_state(kind: str) -> bool:
    """Whether transformers' cache layer for a layer type keeps keys and values beside a
    state (the "hybrid" types: Falcon-H1's Mamba mixer beside attention)."""
    from transformers.cache_utils import DYNAMIC_LAYER_TYPE_MAPPING, DynamicLayer

    return issubclass(DYNAMIC_LAYER_TYPE_MAPPING.get(kind, object), DynamicLayer)


def layers_holding_nothing(config: Any) -> list[tuple[int, str]]:
    """(index, layer type) of each decoder layer that neither attends nor carries a state
    (Nemotron-H's "mlp" and "moe" layers): transformers gives it an empty cache layer, a
    linear-attention layer with no state."""
    from transformers.cache_utils import DYNAMIC_LAYER_TYPE_MAPPING, LinearAttentionLayer, get_layer_types_and_kwargs

    types, per_layer_kwargs = get_layer_types_and_kwargs(config.get_text_config(decoder=True))
    return [(index, kind) for index, (kind, kwargs) in enumerate(zip(types, per_layer_kwargs))
            if DYNAMIC_LAYER_TYPE_MAPPING.get(kind) is LinearAttentionLayer and "number_of_states" not in kwargs]


def layers_with_carried_state(config: Any) -> list[tuple[int, str]]:
    """(index, layer type) of each decoder layer whose transformers cache keeps a
    convolution or recurrent state: those `get_layer_types_and_kwargs` gives a
    `number_of_states`, as it does for "conv", "linear_attention" and the "hybrid" types."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    types, per_layer_kwargs = get_layer_types_and_kwargs(config.get_text_config(decoder=True))
    return [(index, kind) for index, (kind, kwargs) in enumerate(zip(types, per_layer_kwargs)) if "number_of_states" in kwargs]


def layers_with_indexed_attention(config: Any) -> list[tuple[int, str]]:
    """(index, layer type) of each decoder layer whose transformers cache keeps a sparse
    indexer's keys beside the keys and values (`DynamicIndexedLayer`)."""
    from transformers import cache_utils

    indexed = getattr(cache_utils, "DynamicIndexedLayer", None)
    if indexed is None:
        return []
    types, _ = cache_utils.get_layer_types_and_kwargs(config.get_text_config(decoder=True))
    return [(index, kind) for index, kind in enumerate(types)
            if issubclass(cache_utils.DYNAMIC_LAYER_TYPE_MAPPING.get(kind, object), indexed)]
