"""vLLM's attention functions answering in the shape of transformers' attention interface:
(batch, tokens, heads, head size), as its eager and SDPA functions return. No vLLM import.

vLLM's return the rows flat, (tokens, heads x head size). A module that reshapes them by
its hidden states' shape (Llama's `reshape(*input_shape, -1)`) does not notice; one that
reshapes them by their own leading dimensions, as GPT-2's does
(`attn_output.reshape(*attn_output.shape[:-2], -1)`), turned a prompt's tokens into one
row, and its output projection stopped the engine (`mat1 and mat2 shapes cannot be
multiplied (1x1344 and 64x64)`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

SHAPED_ATTR = "hf_bridge_answers_in_transformers_shape"


def in_transformers_shape(attention: Callable) -> Callable:
    """`attention` (a vLLM function, which reads queries as (batch 1, heads, tokens, head
    size)), its output viewed as (batch, tokens, heads, rest): the view needs no copy."""
    if getattr(attention, SHAPED_ATTR, False):
        return attention

    @functools.wraps(attention)
    def shaped(module, query: torch.Tensor, *args, **kwargs):
        output, weights = attention(module, query, *args, **kwargs)
        batch, heads, tokens = query.shape[:3]
        return output.view(batch, tokens, heads, -1), weights

    setattr(shaped, SHAPED_ATTR, True)
    return shaped
