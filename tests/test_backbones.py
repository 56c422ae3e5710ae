"""Decoders no VLM type in transformers ships yet, behind the zoo's LLaVA tower
(`hf_bridge/zoo/backbones.py`; the whole table: `scripts/backbones.py`, BACKBONES.md).

Each decoder exercises a kind of layer the sweep's VLMs lack:
- Falcon-H1 runs a Mamba mixer beside attention in every layer: both get their vLLM layer;
- Nemotron-H mixes Mamba, attention, MoE and MLP layers: the last two hold nothing;
- Jamba's Mamba mixer multiplies by its `dt_proj.weight` itself: that projection stays
  `nn.Linear`, whose weight vLLM's CPU linear layer would have packed away;
- GPT-OSS's experts gate otherwise than vLLM's fused layer and store (in, out) per expert:
  kept as transformers wrote them, they load as it stores them (they were transposed for
  vLLM's layer, and the engine failed to load where the in-tree backend passes);
- Gemma 3n's decoder takes per-layer token embeddings, which LLaVA's base model never
  hands it, so in transformers it runs without them: so it does here (handed them, the
  greedy tokens left transformers' at the first); its last two layers read the first
  two's KV caches;
- Laguna counts each layer's query heads itself (2 and 4 here, the config 2), MiMo-V2-Flash
  gives its sliding-window layers twice the config's key heads, and JetMoE hands its key
  heads tiled once per attention expert, each serving one query head: each layer is built
  with its module's counts (`num_heads`, `num_key_value_groups`);
- ZAYA's attention projects its queries, keys and values through a convolution over time
  and a delayed value, whose states transformers caches beside the keys (its projection
  gets a state slot inside the attention module, and hands back all three; the in-tree
  backend, which keeps no such states, gives other greedy tokens from the second);
- GPT-2 ignores checkpoint names matching "attn.bias", which also matches its fused
  projection's `c_attn.bias` (vLLM's mapper dropped it: neither backend loaded), and
  reshapes its attention's answer by the answer's own leading dimensions (vLLM's flat
  answer became one row);
- Kimi-Linear and Zamba2 lay out their layers in ways vLLM cannot build: refused by name.
"""

from __future__ import annotations

import pytest

LANGUAGE_LAYERS = "model.language_model.layers"


def _groups(llm) -> list[tuple[str, list[str]]]:
    """vLLM's KV-cache groups: (spec type, layer names) each."""
    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    return [(type(group.kv_cache_spec).__name__, group.layer_names) for group in runner.kv_cache_config.kv_cache_groups]


def _heads(llm) -> dict[str, tuple[tuple[int, int], tuple[int, int]]]:
    """Each vLLM attention layer's name -> (the heads its HF module hands, by its own counts
    where it keeps them, else the config's; the heads vLLM's layer was built with)."""
    from vllm.model_executor.layers.attention import Attention

    from hf_bridge.layer_heads import LayerHeads, own_heads

    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    config = model.config.get_text_config()
    configured = LayerHeads(config.num_attention_heads, getattr(config, "num_key_value_heads", config.num_attention_heads))
    return {name: (tuple(own_heads(model.get_submodule(name.rpartition(".")[0]), configured)),
                   (layer.num_heads, layer.num_kv_heads))
            for name, layer in model.named_modules() if isinstance(layer, Attention)}


@pytest.mark.engine
@pytest.mark.parametrize(("text_type", "groups"), [
    ("falcon_h1", [("FullAttentionSpec", [f"{LANGUAGE_LAYERS}.0.self_attn.attn", f"{LANGUAGE_LAYERS}.1.self_attn.attn"]),
                   ("MambaSpec", [f"{LANGUAGE_LAYERS}.0.mamba.attn", f"{LANGUAGE_LAYERS}.1.mamba.attn"])]),
    ("nemotron_h", [("MambaSpec", [f"{LANGUAGE_LAYERS}.0.mixer.attn"]),
                    ("FullAttentionSpec", [f"{LANGUAGE_LAYERS}.2.mixer.attn"])]),
    ("jamba", [("MambaSpec", [f"{LANGUAGE_LAYERS}.0.mamba.attn"]),
               ("FullAttentionSpec", [f"{LANGUAGE_LAYERS}.1.self_attn.attn"])]),
    ("gpt_oss", [("SlidingWindowSpec", [f"{LANGUAGE_LAYERS}.0.self_attn.attn"]),
                 ("FullAttentionSpec", [f"{LANGUAGE_LAYERS}.1.self_attn.attn"])]),
    ("gemma3n_text", [("SlidingWindowSpec", [f"{LANGUAGE_LAYERS}.0.self_attn.attn", f"{LANGUAGE_LAYERS}.2.self_attn.attn"]),
                      ("FullAttentionSpec", [f"{LANGUAGE_LAYERS}.1.self_attn.attn", f"{LANGUAGE_LAYERS}.3.self_attn.attn"])]),
    ("laguna", [("FullAttentionSpec", [f"{LANGUAGE_LAYERS}.0.self_attn.attn", f"{LANGUAGE_LAYERS}.1.self_attn.attn"])]),
    ("mimo_v2_flash", [("FullAttentionSpec", [f"{LANGUAGE_LAYERS}.0.self_attn.attn"]),
                       ("SlidingWindowSpec", [f"{LANGUAGE_LAYERS}.1.self_attn.attn"])]),
    ("jetmoe", [("FullAttentionSpec", [f"{LANGUAGE_LAYERS}.0.self_attention.attn",
                                       f"{LANGUAGE_LAYERS}.1.self_attention.attn"])]),
    ("zaya", [("FullAttentionSpec", [f"{LANGUAGE_LAYERS}.0.self_attn.attn", f"{LANGUAGE_LAYERS}.1.self_attn.attn"]),
              ("MambaSpec", [f"{LANGUAGE_LAYERS}.0.self_attn.qkv_proj.attn", f"{LANGUAGE_LAYERS}.1.self_attn.qkv_proj.attn"])]),
    ("gpt2", [("FullAttentionSpec", ["model.language_model.h.0.attn.attn", "model.language_model.h.1.attn.attn"])]),
])
def test_the_decoder_keeps_parity(backbones, engines, text_type, groups):
    """Each layer that attends gets a KV cache and each that carries a state a slot, no
    other layer gets either; each is built with the heads its module counts; text
    and an image keep strict parity with transformers."""
    from transformers import AutoProcessor

    from hf_bridge.validate import parity
    from hf_bridge.validate.reference import cache_references, references

    model_dir = backbones(text_type)
    processor = AutoProcessor.from_pretrained(model_dir)
    standard = parity.standard_cases(64)
    cases = [standard["text_only"], standard["one_image"]]
    cache_references(model_dir, cases, ("float32",))
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 1})
    assert _groups(llm) == groups
    assert {name: heads for name, heads in _heads(llm).items() if heads[0] != heads[1]} == {}
    for case, reference in zip(cases, references(model_dir, cases)):
        assert not parity.is_degenerate(reference.tokens), (case.name, reference.tokens)
        assert parity.compare(reference, parity.vllm_result(llm, processor, case)) == [], case.name


@pytest.mark.engine
@pytest.mark.parametrize(("text_type", "message"), [
    ("kimi_linear", lambda errors: errors.carried_state_beside_latent_attention("llava")),
    ("zamba2", lambda errors: errors.attention_beside_state_not_found([(1, "hybrid")], "llava")),
    ("falcon", lambda errors: errors.text_model_computes_its_own_attention("llava", "FalconModel")),
])
def test_decoders_vllm_cannot_serve_are_refused_by_name(backbones, text_type, message):
    """Kimi-Linear's state layers sit beside multi-head latent attention, which vLLM builds
    only when handed its MLA class itself; Zamba2's hybrid layers attend through one block
    shared across layers, which carries no layer index for vLLM to find its layer by (served,
    it raised `'Zamba2Attention' object has no attribute 'attn'` at the first request).
    Falcon computes its attention itself, outside transformers' attention interface, which
    vLLM's registry checks of the class a checkpoint names (LLaVA's) only (both backends
    stopped on `KeyError: 'vllm'`, looking its attention class up by implementation).
    Each is refused as the engine is built, with the way out."""
    from helpers.engine_start import start_engine
    from hf_bridge import errors

    done = start_engine(backbones(text_type))
    assert done.returncode != 0 and message(errors) in done.stderr, done.stderr[-3000:]


@pytest.mark.engine
def test_validate_keeps_the_rows_a_decoder_then_scales_in_place(backbones):
    """CTRL's decoder multiplies the embeddings it is handed by the square root of its width,
    in place: `validate` kept transformers' rows by reference, read them scaled, and failed
    the encoder stage of both backends (relative difference 0.87) while their decoding passed."""
    from hf_bridge.validate import command
    from hf_bridge.validate.stages import PASS

    report = command.run(backbones("ctrl"), "hf_bridge", case_names=["one_image"])
    assert report.exit_code == 0, repr(report)
    assert {v.stage: v.outcome for v in report.verdicts} == {"processing": PASS, "encoder": PASS, "decoding": PASS}


@pytest.mark.parametrize(("text_type", "refused"), [
    ("falcon", "FalconModel"), ("bloom", "BloomModel"), ("gptj", "GPTJModel"), ("mpt", "MptModel"),
    ("llama", None), ("gpt2", None), ("opt", None),
])
def test_a_nested_text_model_computing_its_own_attention_is_found(text_type, refused):
    """vLLM's registry asks the class a checkpoint names whether it takes vLLM's attention
    function; hf_bridge asks the text model that class nests too. Standing alone, the text
    model is the registry's to refuse."""
    from transformers import AutoConfig, LlavaConfig

    from hf_bridge.hf_classes import text_model_computing_its_own_attention

    text = AutoConfig.for_model(text_type)
    found = text_model_computing_its_own_attention(LlavaConfig(text_config=text.to_dict()))
    assert (found.__name__ if found is not None else None) == refused
    assert text_model_computing_its_own_attention(text) is None
