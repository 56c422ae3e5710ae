"""An HF MoE router's renormalization is measured on the router itself (`hf_bridge.routing`),
where the config does not name it: vLLM's fused-MoE layer, which redoes the routing from
the router's weight, renormalized DeepSeek-OCR-2's top-k weights by default (its config
names no `norm_topk_prob`; its router keeps the softmax scores as they are)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModel

from hf_bridge.routing import RENORMALIZE_FIELD, name_renormalization, renormalizes, routers

SMALL = dict(hidden_size=32, intermediate_size=32, moe_intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
             num_key_value_heads=2, head_dim=16, vocab_size=64, num_local_experts=8, num_experts=8, n_routed_experts=8,
             num_experts_per_tok=2, mlp_layer_types=["sparse"], first_k_dense_replace=0)


def text_model(model_type: str):
    config = AutoConfig.for_model(model_type)
    text = config.get_text_config()
    for name, value in SMALL.items():
        if hasattr(text, name):
            setattr(text, name, value)
    with torch.device("meta"):  # as vLLM builds it: the probe runs a copy on the CPU
        return AutoModel.from_config(config), text


@pytest.mark.parametrize(("model_type", "renormalized"), [("deepseek_ocr2", False), ("qwen3_vl_moe", True), ("mixtral", True)])
def test_router_renormalization_is_measured(model_type, renormalized):
    model, text = text_model(model_type)
    (router, *_) = routers(model)
    assert renormalizes(router, text.hidden_size) is renormalized
    assert getattr(text, RENORMALIZE_FIELD, None) is None  # none of the three names it
    assert name_renormalization(model, text) is renormalized
    assert getattr(text, RENORMALIZE_FIELD) is renormalized


def test_a_named_renormalization_is_left_as_named():
    model, text = text_model("deepseek_v3")
    assert text.norm_topk_prob is True
    text.norm_topk_prob = False
    assert name_renormalization(model, text) is None and text.norm_topk_prob is False


def test_a_router_of_another_form_is_not_measured():
    """Aria's router returns its logits only (the block takes the top-k): vLLM's default stands."""
    model, text = text_model("aria")
    assert all(renormalizes(r, text.hidden_size) is None for r in routers(model))
    assert name_renormalization(model, text) is None and getattr(text, RENORMALIZE_FIELD, None) is None
