"""`nested_head.py` without vLLM: a text model that is a whole generation model (Llama 4's
`Llama4ForCausalLM`) runs to its decoder's hidden states, for vLLM's head to take; and a
model type whose one class is such a generation class (Nemotron-H-Omni's) is built by
`AutoModel` (`hf_classes.register_generation_class_alone`); a whole model with no forward
of its own generates with its one multimodal model (`hf_classes.text_generation_delegate`)."""

from __future__ import annotations

import torch
from transformers import Llama4TextConfig, Llama4ForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen2Model

from hf_bridge.hf_classes import (base_model_class, delegated_weights, generating_config, generation_class_alone,
                                 register_generation_class_alone, text_generation_delegate)
from hf_bridge.nested_head import bare_decoder, generation_head, run_to_hidden_states

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


def test_what_its_forward_hands_its_decoder_can_still_be_asked():
    """`features.handed_to_decoder` stands a child in for the decoder to learn what the
    forward hands it. The forward had held the decoder from before, so it ran whole
    instead (Qwen2.5-Omni's thinker, its own generation model): in vLLM's compiled mode,
    the decorator compiled the decoder for that call's ids alone, and the engine stopped at
    its first step on the embeddings it is handed (`'NoneType' object has no attribute 'size'`)."""
    from hf_bridge.features import handed_to_decoder

    model = Qwen2ForCausalLM(Qwen2Config(**TINY)).eval()
    run_to_hidden_states(model, "lm_head")
    decoder = model.model
    ran = []
    decoder.register_forward_hook(lambda *_: ran.append(True))
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        handed = handed_to_decoder(model, ids, {})
    assert handed is not None and torch.equal(handed["input_ids"], ids)  # a causal LM embeds inside its decoder
    assert not ran and model.model is decoder


def test_a_caller_that_reads_its_text_models_logits_gets_the_hidden_states():
    """Nemotron-H-Omni's forward returns `self.language_model(...).logits`: with
    `read_as_logits` those are the hidden states, and the output's first entry stays them."""
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**TINY)).eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        hidden = model.model(input_ids=ids).last_hidden_state
        run_to_hidden_states(model, "lm_head", read_as_logits=True)
        out = model(input_ids=ids)
    assert torch.equal(out.logits, hidden) and torch.equal(out[0], hidden)


def test_the_decoder_layers_sit_in_the_decoder_inside_a_whole_generation_model():
    wrapper = torch.nn.Module()
    wrapper.language_model = Qwen2ForCausalLM(Qwen2Config(**TINY))
    wrapper.get_decoder = lambda: wrapper.language_model
    assert bare_decoder(wrapper) is wrapper.language_model.model
    bare = Qwen2Model(Qwen2Config(**TINY))
    assert bare_decoder(bare) is bare


def test_a_type_whose_one_class_is_a_generation_class_is_built_by_automodel():
    from transformers import AutoModel, LlavaConfig, LlavaModel, NemotronH_Omni_Reasoning_V3_Config
    from transformers.models.nemotron_h_omni.modeling_nemotron_h_omni import NemotronH_Omni_Reasoning_V3

    config = NemotronH_Omni_Reasoning_V3_Config()
    assert generation_class_alone(config) is NemotronH_Omni_Reasoning_V3 is base_model_class(config)
    assert register_generation_class_alone(config) is NemotronH_Omni_Reasoning_V3
    assert AutoModel._model_mapping[type(config)] is NemotronH_Omni_Reasoning_V3
    # a type with a base model class keeps it, and nothing is registered for it
    assert generation_class_alone(LlavaConfig()) is None and base_model_class(LlavaConfig()) is LlavaModel
    assert register_generation_class_alone(LlavaConfig()) is None


def test_a_whole_model_without_a_forward_generates_text_with_its_one_multimodal_model():
    """Qwen2.5-Omni's and Qwen3-Omni-MoE's classes have no forward: their `thinker` writes the
    text, their `talker` speaks it. hf_bridge builds the thinker, from its sub-config, and
    loads only the checkpoint weights under its name."""
    from transformers import (LlavaConfig, NemotronH_Omni_Reasoning_V3_Config, Qwen2_5OmniConfig,
                              Qwen2_5OmniThinkerConfig, Qwen3OmniMoeConfig, Qwen3OmniMoeThinkerConfig)

    for config, thinker in ((Qwen2_5OmniConfig(), Qwen2_5OmniThinkerConfig), (Qwen3OmniMoeConfig(), Qwen3OmniMoeThinkerConfig)):
        delegate = text_generation_delegate(config)
        assert delegate.attribute == "thinker" and delegate.config is config.thinker_config
        assert type(generating_config(config)) is thinker
    # a class with a forward of its own generates itself, with a sub-config that is a whole model or not
    for config in (LlavaConfig(), NemotronH_Omni_Reasoning_V3_Config()):
        assert text_generation_delegate(config) is None and generating_config(config) is config
    weights = [("thinker.model.embed_tokens.weight", 1), ("talker.model.norm.weight", 2), ("token2wav.code_embedding.weight", 3),
               ("thinker.lm_head.weight", 4)]
    assert list(delegated_weights(weights, "thinker.")) == [("model.embed_tokens.weight", 1), ("lm_head.weight", 4)]
