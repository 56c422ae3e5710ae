"""What vLLM's paged attention cannot carry is refused at engine start, never dropped
(`hf_bridge/attention_terms.py`): a model's own attention terms (a position bias, the
key blocks a sparse indexer chose), and layers whose indexer keeps keys of its own. vLLM soft-caps the scores as the module
asks its attention function to, not as the config names. Decoder layers that keep a convolution or recurrent
state between steps are found here as transformers caches them; hf_bridge keeps their
states per request (`tests/test_carried_state.py`).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hf_bridge import errors
from hf_bridge.attention_terms import (
    APPLIED_SOFT_CAP_ATTR,
    BUILT_HEADS_ATTR,
    BuiltHeads,
    Refusals,
    heads_not_as_built,
    install,
    own_mask,
    known_keywords,
    layers_holding_nothing,
    layers_with_carried_state,
    layers_with_indexed_attention,
    passed_soft_cap,
    refuse_unapplied_terms,
    unapplied_terms,
    wrap_vllm_attention_functions,
)

MINIMAX_SPARSE = Path(__file__).parent / "helpers" / "minimax_sparse.py"
REFUSALS = Refusals(errors.attention_terms_not_applied, errors.soft_cap_not_as_applied, errors.heads_not_as_built)
NATIVE = ("Serve it with vLLM's native implementation (model_impl=\"vllm\") where vLLM has one for this architecture, "
          "or check it with transformers itself.")


def test_a_tensor_term_outside_what_vllm_applies_is_named():
    tensor = torch.zeros(1)
    assert unapplied_terms({"position_bias": tensor, "block_indices": tensor, "indices": None}, known_keywords()) == [
        "position_bias", "block_indices"]
    # what vLLM's layer is built with, checks itself, or lays out itself (transformers' shared keywords)
    assert unapplied_terms({"s_aux": tensor, "position_ids": tensor, "cu_seq_lens_q": tensor, "max_length_q": 7,
                            "scaling": 0.125, "sliding_window": 4, "softcap": 30.0, "dropout": 0.0, "is_causal": True},
                           known_keywords()) == []


def test_the_check_calls_the_attention_function_unchanged_or_refuses():
    calls = []

    def attention(module, query, key, value, mask, **kwargs):
        calls.append(kwargs)
        return query, None

    checked = refuse_unapplied_terms(attention, REFUSALS)
    assert refuse_unapplied_terms(checked, REFUSALS) is checked, (
        "wrapped once")
    query = torch.ones(1, 2, 3, 4)
    assert checked(torch.nn.Identity(), query, query, query, None, scaling=0.5)[0] is query and calls == [{"scaling": 0.5}]
    # the function's own parameters, by keyword (Cohere-Compass hands its mask so)
    assert checked(torch.nn.Identity(), query, query, query, mask=query)[0] is query and len(calls) == 2
    calls.clear()
    with pytest.raises(ValueError) as raised:
        checked(torch.nn.Identity(), query, query, query, None, position_bias=torch.zeros(1))
    assert str(raised.value) == errors.attention_terms_not_applied(torch.nn.Identity(), ["position_bias"])
    assert str(raised.value).startswith("Identity passes `position_bias` to its attention function") and calls == []


class LiteralSoftCap(torch.nn.Module):
    """A checkpoint's own attention (remote code) passing a soft cap no config field names."""

    def forward(self, query, key, value, mask):
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        attention = ALL_ATTENTION_FUNCTIONS.get_interface("vllm", None)
        return attention(self, query, key, value, mask, softcap=30.0)


class ComputedSoftCap(torch.nn.Module):
    def forward(self, query, key, value, mask, cap):
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        attention = ALL_ATTENTION_FUNCTIONS.get_interface("vllm", None)
        return attention(self, query, key, value, mask, softcap=cap * 2)


def test_the_soft_cap_is_read_from_the_modules_call():
    """As vLLM's attention fuser reads a module's `scaling=`: Gemma 2 hands its config's soft
    cap, Gemma 3's config has the field and its attention hands none, Llama has neither; a
    literal is read, an expression is not (the config's value, which the call-time check
    then compares)."""
    from transformers import Gemma2Config, Gemma3TextConfig, LlamaConfig
    from transformers.models.gemma2.modeling_gemma2 import Gemma2Attention
    from transformers.models.gemma3.modeling_gemma3 import Gemma3Attention
    from transformers.models.llama.modeling_llama import LlamaAttention
    from vllm.model_executor.models.transformers.fusers.attention import interface_call

    small = dict(hidden_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=32)
    modules = {
        5.0: Gemma2Attention(Gemma2Config(**small, attn_logit_softcapping=5.0), layer_idx=0),
        None: Gemma3Attention(Gemma3TextConfig(**small, attn_logit_softcapping=5.0), layer_idx=0),
        30.0: LiteralSoftCap(),
        7.0: ComputedSoftCap(),
    }
    for expected, module in modules.items():
        assert passed_soft_cap(interface_call(type(module).forward), module, configured=7.0) == expected, module
    assert passed_soft_cap(interface_call(LlamaAttention.forward), LlamaAttention(LlamaConfig(**small), 0), None) is None
    assert passed_soft_cap(None, torch.nn.Identity(), configured=7.0) == 7.0, "no call found: the config's"


def test_a_soft_cap_other_than_vllms_layer_applies_is_refused():
    def attention(module, query, key, value, mask, **kwargs):
        return query, None

    checked = refuse_unapplied_terms(attention, REFUSALS)
    query = torch.ones(1, 2, 3, 4)
    module = torch.nn.Identity()
    assert checked(module, query, query, query, None, softcap=5.0)[0] is query, "a module hf_bridge did not mark"
    setattr(module, APPLIED_SOFT_CAP_ATTR, None)
    assert checked(module, query, query, query, None)[0] is query
    assert checked(module, query, query, query, None, softcap=0.0)[0] is query, "0: no cap, as vLLM reads it"
    with pytest.raises(ValueError) as raised:
        checked(module, query, query, query, None, softcap=5.0)
    assert str(raised.value) == (
        "Identity hands its attention function a soft cap of 5, while vLLM's attention layer for it applies none (the "
        "config's `attn_logit_softcapping`, where hf_bridge could not read the soft cap from the module's call): served "
        "so, the model would not attend as transformers computes it. Set `attn_logit_softcapping` in the checkpoint's "
        "text config to 5.")
    setattr(module, APPLIED_SOFT_CAP_ATTR, 5.0)
    assert checked(module, query, query, query, None, softcap=5)[0] is query
    with pytest.raises(ValueError, match="a soft cap of none, while vLLM's attention layer for it applies 5 "):
        checked(module, query, query, query, None)


def test_queries_and_keys_are_judged_by_their_width_per_token():
    """vLLM's function views a call's queries and keys as (tokens, heads x head size): what
    counts is that width, so keys handed as one packed head pass, and keys repeated for
    attention experts (JetMoE: twice the config's key heads) or a layer's own query heads
    (Laguna) do not."""
    built = BuiltHeads(num_heads=4, num_kv_heads=2, head_size=32)
    assert heads_not_as_built(torch.ones(1, 4, 3, 32), torch.ones(1, 2, 3, 32), built) is None
    assert heads_not_as_built(torch.ones(1, 4, 3, 32), torch.ones(1, 1, 3, 64), built) is None, "one packed head"
    assert heads_not_as_built(torch.ones(1, 4, 3, 32), torch.ones(1, 4, 3, 32), built) == ("key", (4, 32), (2, 32))
    assert heads_not_as_built(torch.ones(1, 48, 3, 32), torch.ones(1, 2, 3, 32), built) == ("query", (48, 32), (4, 32))


def test_a_mask_of_the_modules_own_is_a_term_vllm_does_not_apply():
    """Under vLLM's attention implementation transformers' mask functions build none, so a
    tensor mask is the module's own (Doge's dynamic mask), by keyword or in its place."""
    query = torch.ones(1, 2, 3, 4)
    assert own_mask((query, query, query, None), {}) == [] and own_mask((query, query, query), {}) == []
    assert own_mask((query, query, query), {"attention_mask": None}) == []
    assert own_mask((query, query, query), {"attention_mask": query}) == ["attention_mask"]
    assert own_mask((query, query, query, query), {}) == ["attention_mask"]

    def attention(module, query, key, value, attention_mask, **kwargs):
        return query, None

    with pytest.raises(ValueError, match=r"^Identity passes `attention_mask` to its attention function, a term"):
        refuse_unapplied_terms(attention, REFUSALS)(torch.nn.Identity(), query, query, query, attention_mask=query)


def test_queries_or_keys_other_than_vllms_layer_views_are_refused():
    def attention(module, query, key, value, mask, **kwargs):
        return query, None

    checked = refuse_unapplied_terms(attention, REFUSALS)
    query, key = torch.ones(1, 4, 3, 32), torch.ones(1, 4, 3, 32)
    module = torch.nn.Identity()
    assert checked(module, query, key, key, None)[0] is query, "a module hf_bridge did not mark"
    setattr(module, BUILT_HEADS_ATTR, BuiltHeads(4, 4, 32))
    assert checked(module, query, key, key, None)[0] is query
    setattr(module, BUILT_HEADS_ATTR, BuiltHeads(4, 2, 32))
    with pytest.raises(ValueError) as raised:
        checked(module, query, key, key, None)
    assert str(raised.value) == (
        "Identity hands its attention function 4 key heads of 32, while vLLM's attention layer for it was built for 2 "
        "of 32 (the text config's `num_key_value_heads` and head size, or the module's own `num_heads` and "
        "`num_key_value_groups`, per tensor-parallel rank): this decoder computes its heads otherwise than either "
        "counts them, and vLLM would read them as other tokens' and answer wrongly. vLLM's Transformers backend "
        f"cannot build such a layer. {NATIVE}")


@pytest.mark.engine
def test_a_decoder_adding_a_mask_of_its_own_is_refused(backbones, engines):
    """Doge adds a mask of its own, computed from the values, to the scores; vLLM never
    read it, and its greedy tokens differed from transformers' from the first, without an
    error. Now the first forward refuses, naming the module and the cause. (JetMoE's and
    Laguna's heads, refused here before, are now built as their modules count them:
    `test_backbones.py`.)"""
    from vllm import SamplingParams

    llm = engines.get(backbones("doge"), limit_mm_per_prompt={"image": 1})
    with pytest.raises(ValueError, match=re.escape(
            "DogeAttention passes `attention_mask` to its attention function, a term of the attention scores")):
        llm.generate("Hello", SamplingParams(max_tokens=2), use_tqdm=False)
    engines.close()  # an in-process engine that raised is rebuilt before it serves again


@pytest.mark.engine
def test_a_config_soft_cap_the_model_never_applies_is_not_applied(zoo, engines, tmp_path, hf_bridge_log):
    """Gemma 3's config with `attn_logit_softcapping` set, which its attention never hands
    on: vLLM built every layer with it, so the scores were capped where transformers' are
    not (both backends: a text's tokens apart from the second, its prompt's log-probs up to
    2.6; an image's tokens apart from the first). Now strict parity, images and text."""
    import json

    from hf_bridge.validate.checkpoint import load_processor
    from hf_bridge.validate.reference import references
    from hf_bridge.validate import parity
    from hf_bridge.zoo.variant import variant

    gemma3 = Path(zoo("gemma3"))
    text = json.loads((gemma3 / "config.json").read_text())["text_config"]
    model_dir = variant(gemma3, tmp_path / "gemma3", config={"text_config": {**text, "attn_logit_softcapping": 5.0}})
    cases = [parity.standard_cases(64)[name] for name in ("one_image", "text_only")]
    processor = load_processor(model_dir)
    outputs = engines.get(model_dir).generate([parity.vllm_request(processor, c) for c in cases], parity.sampling_params(),
                                              use_tqdm=False)
    for reference, output in zip(references(model_dir, cases), outputs):
        assert parity.compare(reference, parity.result_from_output(output)) == []
    assert "hand their attention function a soft cap of None, the config names 5.0" in hf_bridge_log.text


def test_vllms_attention_functions_are_wrapped_not_replaced():
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from vllm.model_executor.models import transformers as backend

    from hf_bridge.attention_shape import in_transformers_shape

    for _ in range(2):  # each model built installs both wrappers; each wraps once
        install(REFUSALS)
        wrap_vllm_attention_functions(in_transformers_shape)
    for name, original in [("vllm", backend.vllm_attention_forward), ("vllm_mla", backend.vllm_mla_attention_forward)]:
        wrappers, function = [], ALL_ATTENTION_FUNCTIONS[name]
        while hasattr(function, "__wrapped__"):
            wrappers.append(function)
            function = function.__wrapped__
        assert function is original and len(wrappers) == 2, (name, wrappers)


def test_layers_keeping_state_are_read_as_transformers_caches_them():
    from transformers import InklingConfig, LlavaConfig, Lfm2VlConfig, MiniMaxM3VLConfig, Qwen3_5Config

    qwen = Qwen3_5Config()
    assert layers_with_carried_state(qwen) == [(i, "linear_attention") for i, t in enumerate(qwen.text_config.layer_types)
                                               if t == "linear_attention"] != []
    lfm2 = Lfm2VlConfig(text_config={"num_hidden_layers": 3, "layer_types": ["conv", "full_attention", "conv"]})
    assert layers_with_carried_state(lfm2) == [(0, "conv"), (2, "conv")]
    inkling = InklingConfig()
    assert [kind for _, kind in layers_with_carried_state(inkling)] == inkling.text_config.layer_types
    assert {"hybrid", "hybrid_sliding"} <= set(inkling.text_config.layer_types)
    assert layers_with_carried_state(LlavaConfig()) == [] and layers_with_carried_state(MiniMaxM3VLConfig()) == []


def test_layers_that_neither_attend_nor_carry_a_state_are_named():
    """Nemotron-H's MLP and MoE layers: transformers caches nothing for them; its Mamba
    layer carries a state and its attention layer attends. A model without such layers has none."""
    from transformers import Qwen3_5Config

    from hf_bridge.zoo.backbones import backbone_config

    nemotron = backbone_config("nemotron_h", 64)
    assert nemotron.layers_block_type == ["linear_attention", "moe", "full_attention", "mlp"]  # Mamba, MoE, attention, MLP
    assert layers_holding_nothing(nemotron) == [(1, "moe"), (3, "mlp")]
    assert layers_with_carried_state(nemotron) == [(0, "linear_attention")]
    assert layers_holding_nothing(Qwen3_5Config()) == []


def test_layers_whose_indexer_keeps_keys_are_read_as_transformers_caches_them():
    """DeepSeek-V3.2's, GLM-5's and Qwen4-Exp's indexed layers: transformers' cache keeps
    their indexer's keys (`DynamicIndexedLayer`). Dense, sliding and state layers are not."""
    from transformers import (DeepseekV32Config, GlmMoeDsaConfig, InklingConfig, LlavaConfig, MiniMaxM3VLConfig,
                              Qwen3_5Config, Qwen4ExpConfig)

    deepseek = DeepseekV32Config(num_hidden_layers=3)
    assert layers_with_indexed_attention(deepseek) == [(0, "indexed_attention"), (1, "indexed_attention"),
                                                       (2, "indexed_attention")]
    assert [index for index, _ in layers_with_indexed_attention(GlmMoeDsaConfig(num_hidden_layers=2))] == [0, 1]
    qwen4 = Qwen4ExpConfig(text_config={"num_hidden_layers": 8})
    assert layers_with_indexed_attention(qwen4) == [(3, "indexed_attention"), (7, "indexed_attention")]
    assert layers_with_carried_state(qwen4) == [(i, "linear_attention") for i in (0, 1, 2, 4, 5, 6)]
    for config in (LlavaConfig(), Qwen3_5Config(), InklingConfig(), MiniMaxM3VLConfig()):
        assert layers_with_indexed_attention(config) == []


REFUSE = """
import os, sys
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
from hf_bridge.validate.engine import make_llm
make_llm(sys.argv[1]).generate("Tell me about the weather today, and tomorrow.")
"""


BUILD_SWEEP_MODEL = """
import sys
from pathlib import Path
from hf_bridge.zoo.shrink import build_sweep_model
build_sweep_model(sys.argv[1], Path(sys.argv[2]))
"""


@pytest.fixture
def checkpoint(kind, tmp_path):
    """MiniMax-M3 with a sparse layer (its helper), or a type the sweep's shrinker builds."""
    out = tmp_path / kind
    command = [str(MINIMAX_SPARSE)] if kind == "minimax_sparse" else ["-c", BUILD_SWEEP_MODEL, kind]
    done = subprocess.run([sys.executable, *command, str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.engine
@pytest.mark.parametrize(("kind", "message"), [
    ("minimax_sparse",
     "ValueError: MiniMaxM3VLAttention passes `block_indices` to its attention function, a term of the attention scores "
     "(a position bias, a mask of its own, the key blocks a sparse indexer chose) that vLLM's paged attention does not "
     "apply: served by the "
     "Transformers backend, this model would not attend as it was trained to, and answer wrongly. " + NATIVE),
    ("qwen4_exp",
     "ValueError: 1 decoder layer(s) of this qwen4_exp model attend sparsely (layers 1 (indexed_attention)): an indexer "
     "picks the keys each query attends to, from keys of its own that transformers caches beside the keys and values. "
     "vLLM's paged attention attends to every key and keeps no indexer keys: served by the Transformers backend, this "
     "model would not attend as it was trained to. " + NATIVE),
])
def test_the_engine_refuses_naming_what_vllm_cannot_carry(kind, message, checkpoint):
    """MiniMax-M3's sparse layers (their indexer's block choice, passed as `block_indices`):
    before, the engine started, and the first decode step died inside the indexer
    ("RuntimeError: index 11 is out of bounds", measured in eager mode: vLLM keeps no
    indexer cache), with the block choice dropped on the steps before. Attention terms are
    refused on the first forward: vLLM's start-up pass on a GPU, here (the CPU's eager mode
    skips that pass) the first request.

    Qwen4-Exp's indexer folds its choice into the attention mask, which vLLM's attention
    functions never receive: its first request raised `AttributeError: 'NoneType' object has
    no attribute 'dtype'` in the indexer. Layers whose indexer keeps keys of its own are
    refused before the model is built."""
    done = subprocess.run([sys.executable, "-c", REFUSE, str(checkpoint)], capture_output=True, text=True, timeout=900)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr[-3000:]
