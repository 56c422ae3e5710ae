"""A decoder layer's attention module counting its own heads (`hf_bridge/layer_heads.py`)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from hf_bridge.layer_heads import LayerHeads, heads_beside_config, own_heads, per_rank, with_heads


class _Attention(torch.nn.Module):
    def __init__(self, **attributes):
        super().__init__()
        for name, value in attributes.items():
            setattr(self, name, value)


class _CountsOnTheClass(torch.nn.Module):
    num_heads = 4
    num_key_value_groups = 4


CONFIGURED = LayerHeads(8, 2)


@pytest.mark.parametrize(("attributes", "heads"), [
    (dict(), CONFIGURED),
    (dict(num_heads=8, num_key_value_groups=4), CONFIGURED),  # Llama's: the config's counts
    (dict(num_heads=4), LayerHeads(4, 2)),  # Laguna's query heads per layer
    (dict(num_key_value_groups=2), LayerHeads(8, 4)),  # MiMo-V2-Flash's sliding-window layers
    (dict(num_heads=8, num_key_value_groups=1), LayerHeads(8, 8)),  # JetMoE's tiled key heads
    (dict(num_key_value_groups=3), CONFIGURED),  # groups that do not divide the query heads
    (dict(num_heads=True, num_key_value_groups=True), CONFIGURED),
    (dict(num_heads=0, num_key_value_groups=0), CONFIGURED),
    (dict(num_heads=torch.tensor(4)), CONFIGURED),
])
def test_a_module_counts_its_heads_by_its_own_num_heads_and_key_value_groups(attributes, heads):
    """An instance's positive ints only; key heads are the query heads over the groups,
    as transformers' `repeat_kv` reads them; a count the module does not give stays the config's."""
    assert own_heads(_Attention(**attributes), CONFIGURED) == heads


def test_counts_on_the_class_say_nothing_of_the_module():
    assert own_heads(_CountsOnTheClass(), CONFIGURED) == CONFIGURED


@given(st.lists(st.tuples(st.integers(1, 16), st.integers(1, 16), st.one_of(st.none(), st.integers(1, 16))),
                min_size=1, max_size=8))
def test_only_modules_counting_other_heads_than_the_config_are_named(layers):
    modules = {f"layers.{i}.attn": _Attention() if own is None else _Attention(num_heads=own)
               for i, (_, _, own) in enumerate(layers)}
    configured = {f"layers.{i}.attn": LayerHeads(query, keys) for i, (query, keys, _) in enumerate(layers)}
    assert heads_beside_config(modules, configured) == {
        f"layers.{i}.attn": LayerHeads(own, keys) for i, (query, keys, own) in enumerate(layers)
        if own is not None and own != query}


def test_each_rank_takes_its_share_and_an_uneven_count_is_refused_naming_the_layers():
    """Key heads fewer than the ranks are replicated, one per rank, as vLLM does."""
    assert per_rank({"layers.1.self_attn": LayerHeads(4, 1)}, 2, "laguna") == {"layers.1.self_attn": LayerHeads(2, 1)}
    assert per_rank({"layers.1.self_attn": LayerHeads(8, 4)}, 2, "laguna") == {"layers.1.self_attn": LayerHeads(4, 2)}
    with pytest.raises(ValueError) as raised:
        per_rank({"layers.0.self_attn": LayerHeads(2, 1), "layers.1.self_attn": LayerHeads(3, 1)}, 2, "laguna")
    assert str(raised.value) == (
        "This laguna model's attention modules count query heads of their own that 2 tensor-parallel ranks cannot "
        "share evenly (layers.1.self_attn: 3). Choose a tensor_parallel_size that divides each count.")


def test_only_the_named_layers_are_built_with_their_own_heads():
    built = []
    build = with_heads(lambda **kwargs: built.append(kwargs), {"layers.1.self_attn.attn": LayerHeads(4, 4)})
    build(prefix="layers.0.self_attn.attn", num_heads=2, num_kv_heads=1, head_size=32)
    build(prefix="layers.1.self_attn.attn", num_heads=2, num_kv_heads=1, head_size=32)
    assert built == [dict(prefix="layers.0.self_attn.attn", num_heads=2, num_kv_heads=1, head_size=32),
                     dict(prefix="layers.1.self_attn.attn", num_heads=4, num_kv_heads=4, head_size=32)]
