"""A decoder layer's attention module counting its own query heads (`hf_bridge/layer_heads.py`)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from hf_bridge.layer_heads import heads_beside_config, own_query_heads, per_rank, with_query_heads


class _Attention(torch.nn.Module):
    def __init__(self, **attributes):
        super().__init__()
        for name, value in attributes.items():
            setattr(self, name, value)


class _HeadsOnTheClass(torch.nn.Module):
    num_heads = 4


def test_a_module_counts_query_heads_by_its_own_num_heads_only():
    """An instance's positive int `num_heads`; a class attribute, a flag, a tensor or a
    count of none say nothing of this module's projections."""
    assert own_query_heads(_Attention(num_heads=4)) == 4
    assert own_query_heads(_Attention()) is None
    assert own_query_heads(_HeadsOnTheClass()) is None
    assert own_query_heads(_Attention(num_heads=True)) is None
    assert own_query_heads(_Attention(num_heads=0)) is None
    assert own_query_heads(_Attention(num_heads=torch.tensor(4))) is None


@given(st.lists(st.tuples(st.integers(1, 64), st.one_of(st.none(), st.integers(1, 64))), min_size=1, max_size=8))
def test_only_modules_counting_other_heads_than_the_config_are_named(layers):
    modules = {f"layers.{i}.attn": _Attention() if own is None else _Attention(num_heads=own)
               for i, (_, own) in enumerate(layers)}
    configured = {f"layers.{i}.attn": config for i, (config, _) in enumerate(layers)}
    assert heads_beside_config(modules, configured) == {
        f"layers.{i}.attn": own for i, (config, own) in enumerate(layers) if own is not None and own != config}


def test_each_rank_takes_its_share_and_an_uneven_count_is_refused_naming_the_layers():
    assert per_rank({"layers.1.self_attn": 4}, 2, "laguna") == {"layers.1.self_attn": 2}
    with pytest.raises(ValueError) as raised:
        per_rank({"layers.0.self_attn": 2, "layers.1.self_attn": 3}, 2, "laguna")
    assert str(raised.value) == (
        "This laguna model's attention modules count query heads of their own that 2 tensor-parallel ranks cannot "
        "share evenly (layers.1.self_attn: 3). Choose a tensor_parallel_size that divides each count.")


def test_only_the_named_layers_are_built_with_their_own_heads():
    built = []
    build = with_query_heads(lambda **kwargs: built.append(kwargs), {"layers.1.self_attn.attn": 4})
    build(prefix="layers.0.self_attn.attn", num_heads=2, head_size=32)
    build(prefix="layers.1.self_attn.attn", num_heads=2, head_size=32)
    assert built == [dict(prefix="layers.0.self_attn.attn", num_heads=2, head_size=32),
                     dict(prefix="layers.1.self_attn.attn", num_heads=4, head_size=32)]
