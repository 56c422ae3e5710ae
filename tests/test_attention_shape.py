"""vLLM's attention functions answer in the shape transformers' own do (`hf_bridge/attention_shape.py`).

vLLM's return (tokens, heads x head size); GPT-2 reshapes the answer by its own leading
dimensions, so a prompt became one row and its output projection stopped the engine.
"""

from __future__ import annotations

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from hf_bridge.attention_shape import SHAPED_ATTR, in_transformers_shape


def _flat_like_vllm(module, query, key, value, attention_mask, **kwargs):
    """transformers' SDPA answer, laid out as vLLM's functions lay theirs: (tokens, heads x size)."""
    output, weights = sdpa_attention_forward(module, query, key, value, attention_mask, is_causal=True, **kwargs)
    return output.reshape(query.shape[2], -1), weights


@pytest.mark.parametrize(("heads", "key_heads", "size", "value_size"), [(4, 4, 16, 16), (4, 2, 32, 32), (2, 1, 16, 8)])
def test_the_answer_has_transformers_shape_and_values(heads, key_heads, size, value_size):
    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = True, heads // key_heads
    tokens = 7
    query = torch.randn(1, heads, tokens, size)
    key = torch.randn(1, key_heads, tokens, size)
    value = torch.randn(1, key_heads, tokens, value_size)
    expected, _ = sdpa_attention_forward(module, query, key, value, None, is_causal=True)

    shaped = in_transformers_shape(_flat_like_vllm)
    answer, _ = shaped(module, query, key, value, None)
    assert answer.shape == expected.shape == (1, tokens, heads, value_size)
    torch.testing.assert_close(answer, expected, rtol=0, atol=0)
    # GPT-2's reshape by the answer's own leading dimensions keeps one row per token
    assert answer.reshape(*answer.shape[:-2], -1).shape == (1, tokens, heads * value_size)


def test_wrapping_twice_wraps_once():
    shaped = in_transformers_shape(_flat_like_vllm)
    assert getattr(shaped, SHAPED_ATTR) and in_transformers_shape(shaped) is shaped
