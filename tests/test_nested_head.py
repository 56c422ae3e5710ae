"""`nested_head.py` without vLLM: a text model that is a whole generation model (Llama 4's
`Llama4ForCausalLM`) runs to its decoder's hidden states, for vLLM's head to take."""

from __future__ import annotations

import torch
from transformers import Llama4TextConfig, Llama4ForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen2Model

from hf_bridge.nested_head import generation_head, run_to_hidden_states

TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
            vocab_size=100)


def test_a_text_model_with_a_head_of_its_own_is_told_from_a_bare_decoder():
    assert generation_head(Qwen2Model(Qwen2Config(**TINY))) is None
    assert generation_head(Qwen2ForCausalLM(Qwen2Config(**TINY))) == "lm_head"
    # transformers' `get_decoder` returns Llama 4's text model itself; its decoder is `model`
    assert generation_head(Llama4ForCausalLM(Llama4TextConfig(**TINY, num_local_experts=2, intermediate_size_mlp=64))) == "lm_head"
    assert generation_head(None) is None


def test_it_then_returns_its_decoders_hidden_states_and_holds_no_head():
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**TINY)).eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        hidden = model.model(input_ids=ids).last_hidden_state
        run_to_hidden_states(model, "lm_head")
        # the head's own arguments are left out: the decoder takes none of them
        out = model(input_ids=ids, logits_to_keep=1, labels=ids)
    assert torch.equal(out.last_hidden_state, hidden)
    assert isinstance(model.lm_head, torch.nn.Identity)
    assert not any(p.shape[0] == TINY["vocab_size"] for n, p in model.named_parameters() if not n.startswith("model."))
