"""What vLLM's paged attention cannot carry is refused at engine start, never dropped
(`hf_bridge/attention_terms.py`): a model's own attention terms (a position bias, the
key blocks a sparse indexer chose), and layers whose indexer keeps keys of its own. Decoder layers that keep a convolution or recurrent
state between steps are found here as transformers caches them; hf_bridge keeps their
states per request (`tests/test_carried_state.py`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hf_bridge import errors
from hf_bridge.attention_terms import (
    install,
    known_keywords,
    layers_holding_nothing,
    layers_with_carried_state,
    layers_with_indexed_attention,
    refuse_unapplied_terms,
    unapplied_terms,
)

MINIMAX_SPARSE = Path(__file__).parent / "helpers" / "minimax_sparse.py"
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

    checked = refuse_unapplied_terms(attention, errors.attention_terms_not_applied)
    assert refuse_unapplied_terms(checked, errors.attention_terms_not_applied) is checked, "wrapped once"
    query = torch.ones(1, 2, 3, 4)
    assert checked(torch.nn.Identity(), query, query, query, None, scaling=0.5)[0] is query and calls == [{"scaling": 0.5}]
    # the function's own parameters, by keyword (Cohere-Compass hands its mask so)
    assert checked(torch.nn.Identity(), query, query, query, mask=query)[0] is query and len(calls) == 2
    calls.clear()
    with pytest.raises(ValueError) as raised:
        checked(torch.nn.Identity(), query, query, query, None, position_bias=torch.zeros(1))
    assert str(raised.value) == errors.attention_terms_not_applied(torch.nn.Identity(), ["position_bias"])
    assert str(raised.value).startswith("Identity passes `position_bias` to its attention function") and calls == []


def test_vllms_attention_functions_are_wrapped_not_replaced():
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from vllm.model_executor.models import transformers as backend

    install(errors.attention_terms_not_applied)
    install(errors.attention_terms_not_applied)
    assert ALL_ATTENTION_FUNCTIONS["vllm"].__wrapped__ is backend.vllm_attention_forward
    assert ALL_ATTENTION_FUNCTIONS["vllm_mla"].__wrapped__ is backend.vllm_mla_attention_forward


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
     "(a position bias, the key blocks a sparse indexer chose) that vLLM's paged attention does not apply: served by the "
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
