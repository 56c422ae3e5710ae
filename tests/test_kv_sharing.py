"""Decoder layers that attend over an earlier layer's keys and values read that layer's KV
cache and keep none of their own (`kv_sharing.py`).

Which layer a layer reads is checked against transformers' own attention modules
(Gemma 3n and Gemma 4), over any layout their configs allow; the engine test checks
that such a Gemma 4 keeps strict parity while its KV cache holds twice the tokens.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hf_bridge.kv_sharing import kv_sharing_sources

KINDS = ("sliding_attention", "full_attention")


@st.composite
def layouts(draw):
    depth = draw(st.integers(1, 8))
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=depth, max_size=depth))
    return kinds, draw(st.integers(0, depth))


def transformers_sources(attention_cls, config) -> dict[int, int] | None:
    """What transformers' modules of `config` read: each sharing layer -> the layer that
    stores its kind's keys and values; None where a sharing layer has no earlier layer of
    its kind (transformers refuses to build it, or Gemma 4 builds it and its forward
    finds nothing to read)."""
    with torch.device("meta"):
        try:
            layers = [attention_cls(config, index) for index in range(config.num_hidden_layers)]
        except ValueError:
            return None
    stores = {config.layer_types[i]: i for i, layer in enumerate(layers) if layer.store_full_length_kv}
    if any(layer.is_kv_shared_layer and config.layer_types[i] not in stores for i, layer in enumerate(layers)):
        return None
    sources = {i: stores[config.layer_types[i]] for i, layer in enumerate(layers) if layer.is_kv_shared_layer}
    for i, layer in enumerate(layers):  # Gemma 3n names the source itself
        if getattr(layer, "kv_shared_layer_index", None) is not None:
            assert sources[i] == layer.kv_shared_layer_index
    return sources


@settings(max_examples=60, deadline=None)
@given(layouts())
def test_each_sharing_layer_reads_the_layer_gemma3n_reads(layout):
    from transformers import Gemma3nTextConfig
    from transformers.models.gemma3n.modeling_gemma3n import Gemma3nTextAttention

    kinds, shared = layout
    config = Gemma3nTextConfig(num_hidden_layers=len(kinds), layer_types=kinds, num_kv_shared_layers=shared,
                               hidden_size=64, num_attention_heads=2, num_key_value_heads=2, head_dim=32,
                               activation_sparsity_pattern=[0.0] * len(kinds), intermediate_size=128)
    expected = transformers_sources(Gemma3nTextAttention, config)
    assume(expected is not None)
    assert kv_sharing_sources(config) == expected


@settings(max_examples=60, deadline=None)
@given(layouts())
def test_each_sharing_layer_reads_the_layer_gemma4_reads(layout):
    from transformers import Gemma4TextConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextAttention

    kinds, shared = layout
    config = Gemma4TextConfig(num_hidden_layers=len(kinds), layer_types=kinds, num_kv_shared_layers=shared,
                              hidden_size=64, num_attention_heads=2, num_key_value_heads=2, head_dim=32)
    expected = transformers_sources(Gemma4TextAttention, config)
    assume(expected is not None)
    assert kv_sharing_sources(config) == expected


def test_a_config_without_shared_layers_shares_nothing():
    from transformers import Gemma4TextConfig, LlamaConfig

    assert kv_sharing_sources(LlamaConfig(num_hidden_layers=4)) == {}
    assert kv_sharing_sources(Gemma4TextConfig(num_hidden_layers=4)) == {}


@pytest.fixture(scope="module")
def gemma4_kv_shared(gemma4_variant):
    return gemma4_variant("kv_shared")


@pytest.mark.engine
def test_shared_layers_read_their_source_cache_and_keep_parity(gemma4_kv_shared, engines):
    """Gemma 4's two last layers attend over the first two's keys and values. Built as
    plain vLLM layers they kept caches of their own, holding the same keys again: the
    same memory then held 4096 blocks, now 8192 (measured). They read their sources'
    caches, and text, an image and audio keep strict parity, in vLLM's default compiled
    mode too."""
    from transformers import AutoProcessor

    from helpers.conditioning import assert_well_conditioned
    from hf_bridge.validate import parity
    from hf_bridge.validate.reference import cache_references, references

    processor = AutoProcessor.from_pretrained(gemma4_kv_shared)
    standard = parity.standard_cases(64)
    cases = [standard["text_only"], standard["one_image"], standard["audio"]]
    cache_references(gemma4_kv_shared, cases, ("float32",))
    for enforce_eager in (True, False):
        llm = engines.get(gemma4_kv_shared, limit_mm_per_prompt={"image": 1, "audio": 1, "video": 0}, enforce_eager=enforce_eager)
        runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
        layer = "model.language_model.layers.{}.self_attn.attn".format
        assert runner.shared_kv_cache_layers == {layer(2): layer(0), layer(3): layer(1)}
        # every layer is in its source's cache group, each group allocated once
        groups = {tuple(group.layer_names) for group in runner.kv_cache_config.kv_cache_groups}
        assert groups == {(layer(0), layer(2)), (layer(1), layer(3))}
        assert len(runner.kv_cache_config.kv_cache_tensors) == 2
        for case, reference in zip(cases, references(gemma4_kv_shared, cases)):
            assert not parity.is_degenerate(reference.tokens), reference.tokens
            assert parity.compare(reference, parity.vllm_result(llm, processor, case)) == [], (case.name, enforce_eager)
    assert_well_conditioned(gemma4_kv_shared, standard["text_only"], references(gemma4_kv_shared, [standard["text_only"]])[0])


@pytest.mark.engine
def test_fast_prefill_over_shared_layers_is_refused(gemma4_kv_shared):
    """vLLM's `kv_sharing_fast_prefill` hands the sharing layers only the prompt tokens
    whose logits are needed, where the HF decoder computes every token: served, an image
    prompt's tokens differed from transformers' from the first (measured: 381, 165, 421
    against 6, 26, 171). The engine refuses to start instead."""
    from helpers.engine_start import start_engine
    from hf_bridge import errors

    done = start_engine(gemma4_kv_shared, kv_sharing_fast_prefill=True, limit_mm_per_prompt={"image": 1, "audio": 1, "video": 0})
    refusal = errors.kv_sharing_fast_prefill_unserved("Gemma4Model", 2)
    assert done.returncode != 0 and refusal in done.stderr, done.stderr[-3000:]
