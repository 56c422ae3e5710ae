"""Decoder layers that carry a state from step to step (linear attention, short
convolutions) run transformers' own modules on states vLLM keeps per request
(`carried_state.py`, `state_layers.py`).

The property runs transformers' Gated DeltaNet (Qwen3.5) and short convolution (LFM2)
modules through `run_on_slots` on any schedule vLLM could make of a few requests: prompts
split into chunks, one-token steps batched, slots anywhere. Each request's rows must equal
one whole run of its tokens through the module, as transformers runs a prompt. The engine
test checks that vLLM gives such a model's layers state slots, not KV caches, and that
Qwen3.5 keeps strict parity with requests batched together and prompts chunked.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_bridge.carried_state import OneLayerCache, StepSequence, cache_argument, measure_layout, run_on_slots, state_modules

WIDTH = 32
SLOTS = 5


def qwen3_5_text_config():
    from transformers import Qwen3_5TextConfig

    return Qwen3_5TextConfig(hidden_size=WIDTH, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                             num_key_value_heads=1, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                             linear_key_head_dim=8, linear_value_head_dim=8, vocab_size=64,
                             layer_types=["linear_attention", "full_attention"])


def lfm2_config():
    from transformers import Lfm2Config

    return Lfm2Config(hidden_size=WIDTH, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, vocab_size=64, layer_types=["conv", "full_attention"])


def zaya_config():
    from transformers import ZayaConfig

    return ZayaConfig(hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                      moe_intermediate_size=48, num_experts=4, router_hidden_size=16, vocab_size=64)


def state_module(kind: str):
    """transformers' module for decoder layer 0 of a tiny model of `kind`, and its config."""
    torch.manual_seed(0)
    if kind == "zaya_cca":
        from transformers.models.zaya.modeling_zaya import ZayaCCAProjection

        config = zaya_config()
        return ZayaCCAProjection(config, 0).eval(), config, "past_key_values"
    if kind == "gated_deltanet":
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet

        config = qwen3_5_text_config()
        return Qwen3_5GatedDeltaNet(config, 0).eval(), config, "cache_params"
    from transformers.models.lfm2.modeling_lfm2 import Lfm2ShortConv

    config = lfm2_config()
    return Lfm2ShortConv(config, 0).eval(), config, "past_key_values"


@st.composite
def schedules(draw):
    """Requests' lengths, their slots, and steps: each step a list of (request, tokens), one
    token (a decode step, or a prompt of one) and the whole rest drawn often."""
    lengths = draw(st.lists(st.integers(1, 12), min_size=1, max_size=3))
    slots = draw(st.permutations(range(SLOTS)))[: len(lengths)]
    done = [0] * len(lengths)
    steps = []
    while any(d < n for d, n in zip(done, lengths)):
        step = [(r, draw(st.sampled_from([0, 1, n - d]) | st.integers(0, n - d))) for r, (d, n) in enumerate(zip(done, lengths)) if d < n]
        if not any(take for _, take in step):  # each step moves some request on
            step[0] = (step[0][0], 1)
        step = [(r, take) for r, take in step if take]
        for request, take in step:
            done[request] += take
        steps.append(step)
    return lengths, slots, steps


def _parts(out) -> tuple[torch.Tensor, ...]:
    """A module's output as a tuple: ZAYA's convolved projection returns queries, keys and values."""
    return out if isinstance(out, tuple) else (out,)


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(["gated_deltanet", "short_conv", "zaya_cca"]), schedule=schedules())
def test_any_schedule_gives_each_request_its_whole_run(kind, schedule):
    """ZAYA's module is its attention's q/k/v projection, convolved over time with a
    delayed value: its three outputs each follow the request."""
    module, config, argument = state_module(kind)
    lengths, slots, steps = schedule
    cache = OneLayerCache(config, 0)
    layout = measure_layout(module.forward, argument, cache, WIDTH, torch.device("cpu"), torch.float32)
    generator = torch.Generator().manual_seed(sum(lengths))
    tokens = [torch.randn(n, WIDTH, generator=generator) for n in lengths]
    with torch.no_grad():
        whole = [tuple(part[0] for part in _parts(module(t[None], **{argument: cache.holding(None, layout)}))) for t in tokens]
    storage = [torch.full((SLOTS, *entry.shape), float("nan"), dtype=entry.dtype) for entry in layout]
    rows: list[list[torch.Tensor]] = [[] for _ in lengths]
    done = [0] * len(lengths)
    for step in steps:
        sequences, inputs, start = [], [], 0
        for request, take in step:
            sequences.append(StepSequence(start, start + take, slots[request], done[request] > 0))
            inputs.append(tokens[request][done[request]:done[request] + take])
            start += take
        with torch.no_grad():
            out = run_on_slots(module.forward, torch.cat(inputs)[None], {}, argument, sequences, storage, layout, cache)
        for (request, take), sequence in zip(step, sequences):
            rows[request].append([part[0, sequence.start:sequence.end] for part in _parts(out)])
            done[request] += take
    for request, expected in enumerate(whole):
        assert len(rows[request][0]) == len(expected)
        for index, part in enumerate(expected):
            torch.testing.assert_close(torch.cat([row[index] for row in rows[request]]), part, rtol=1e-4, atol=1e-5)


def test_the_layout_is_what_transformers_caches():
    """Gated DeltaNet: a convolution over q, k and v's channels (kernel 4) and one recurrent
    matrix per value head; LFM2's short convolution: its window of 3 over the hidden width."""
    module, config, argument = state_module("gated_deltanet")
    layout = measure_layout(module.forward, argument, OneLayerCache(config, 0), WIDTH, torch.device("cpu"), torch.float32)
    channels = 2 * 2 * 8 + 4 * 8
    assert [(e.kind, e.index, e.shape) for e in layout] == [("conv_states", 0, (channels, 4)), ("recurrent_states", 0, (4, 8, 8))]
    module, config, argument = state_module("short_conv")
    layout = measure_layout(module.forward, argument, OneLayerCache(config, 0), WIDTH, torch.device("cpu"), torch.float32)
    assert [(e.kind, e.index, e.shape) for e in layout] == [("conv_states", 0, (WIDTH, config.conv_L_cache))]


def test_a_module_that_needs_more_than_the_cache_is_refused_by_name():
    """MiniMax's lightning attention takes position embeddings and a mask too, and reads a
    cache class of its own (`get_linear_cache`): it cannot be run as hf_bridge runs a layer,
    and says so, naming the module and what it raised."""
    from transformers.models.minimax.modeling_minimax import MiniMaxLightningAttention

    from hf_bridge import errors
    from hf_bridge.carried_state import StateLayoutError
    from hf_bridge.zoo.backbones import backbone_config

    config = backbone_config("minimax", 64)
    index = config.layer_types.index("linear_attention")
    module = MiniMaxLightningAttention(config, index)
    with pytest.raises(StateLayoutError) as raised:
        measure_layout(module.forward, "past_key_values", OneLayerCache(config, index), 64, torch.device("cpu"), torch.float32)
    assert str(raised.value) == errors.state_module_not_run_alone("MiniMaxLightningAttention.forward", raised.value.__cause__)
    assert isinstance(raised.value.__cause__, TypeError)


def test_the_module_given_each_layer_cache_is_found():
    """The innermost module with the layer's index that takes the cache: Qwen3.5's
    `linear_attn`, not the decoder layer around it; LFM2's `conv`; Falcon-H1's `mamba`,
    not the attention beside it, which is handed the cache too (vLLM keeps its keys)."""
    from transformers import AutoModel

    from hf_bridge.zoo.backbones import backbone_config

    falcon_h1 = backbone_config("falcon_h1", 64)
    for config, expected in ((qwen3_5_text_config(), "layers.0.linear_attn"), (lfm2_config(), "layers.0.conv"),
                             (falcon_h1, "layers.0.mamba")):
        with torch.device("meta"):
            model = AutoModel.from_config(config)
        found = state_modules(model, [0])
        assert list(found) == [0] and found[0][0] == expected, found


def test_a_layer_whose_states_several_modules_share_is_left_out():
    """Inkling's hybrid layers hand one cache to four short convolutions (keys, values,
    attention output, MLP): no one module holds the layer's states, so none is wrapped
    and the model is refused by name (`errors.layers_with_carried_state`)."""
    from transformers import AutoModel, InklingConfig

    text = InklingConfig().text_config
    text.num_hidden_layers, text.layer_types = 2, text.layer_types[:2]
    with torch.device("meta"):
        model = AutoModel.from_config(text)
    sharing = [name for name, m in model.named_modules() if getattr(m, "layer_idx", None) == 0 and cache_argument(m)]
    assert len(sharing) > 2, sharing
    assert state_modules(model, [0, 1]) == {}


@pytest.mark.engine
def test_qwen3_5_keeps_parity_batched_and_chunked(generic, engines):
    """Qwen3.5's linear-attention layer gets a state slot (no KV cache); requests run
    together and alone give the same tokens, and a prompt prefilled in chunks of 16
    tokens keeps strict parity with transformers."""
    from transformers import AutoProcessor

    from hf_bridge.validate import parity
    from hf_bridge.validate.reference import cache_references, references

    model_dir = generic.build({"qwen3_5": 0})["qwen3_5"]
    processor = AutoProcessor.from_pretrained(model_dir)
    standard = parity.standard_cases(64)
    cases = [standard["text_only"], standard["one_image"], standard["two_images"]]
    cache_references(model_dir, cases, ("float32",))
    expected = references(model_dir, cases)
    for reference in expected:
        assert not parity.is_degenerate(reference.tokens), reference.tokens
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2, "video": 0}, max_num_batched_tokens=16,
                      max_num_seqs=4)
    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    specs = {type(group.kv_cache_spec).__name__: group.layer_names for group in runner.kv_cache_config.kv_cache_groups}
    assert specs == {"MambaSpec": ["model.language_model.layers.0.linear_attn.attn"],
                     "FullAttentionSpec": ["model.language_model.layers.1.self_attn.attn"]}, specs
    alone = [parity.vllm_result(llm, processor, case) for case in cases]
    outputs = llm.generate([parity.vllm_request(processor, case) for case in cases], parity.sampling_params(), use_tqdm=False)
    for case, reference, one, output in zip(cases, expected, alone, outputs):
        assert parity.compare(reference, one) == [], case.name
        assert parity.compare(reference, parity.result_from_output(output)) == [], case.name


@pytest.mark.engine
def test_lfm2_vl_short_convolutions_keep_parity(generic, engines):
    """LFM2-VL with a short-convolution layer before its attention layer, as its
    checkpoints have them (the sweep's recipe): the convolution's window is a state slot,
    and an image and text keep strict parity."""
    from transformers import AutoProcessor

    from hf_bridge.validate import parity
    from hf_bridge.validate.reference import cache_references, references

    model_dir = generic("lfm2_vl")
    processor = AutoProcessor.from_pretrained(model_dir)
    standard = parity.standard_cases(64)
    cases = [standard["text_only"], standard["one_image"]]
    cache_references(model_dir, cases, ("float32",))
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 1})
    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    specs = {type(group.kv_cache_spec).__name__: group.layer_names for group in runner.kv_cache_config.kv_cache_groups}
    assert specs["MambaSpec"] == ["model.language_model.layers.0.conv.attn"], specs
    for case, reference in zip(cases, references(model_dir, cases)):
        assert not parity.is_degenerate(reference.tokens), (case.name, reference.tokens)
        assert parity.compare(reference, parity.vllm_result(llm, processor, case)) == [], case.name


REFUSE = """
import json, os, sys
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
from hf_bridge.validate.engine import make_llm
make_llm(sys.argv[1], **json.loads(sys.argv[2]))
"""


@pytest.mark.engine
@pytest.mark.parametrize(("engine_kwargs", "message"), [
    ({"hf_overrides": {"architectures": ["HFBridgeForConditionalGeneration"]}},
     lambda errors: errors.carried_state_without_slots([(0, "linear_attention")], "qwen3_5", "HFBridgeForConditionalGeneration")),
    ({"speculative_config": {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 2}},
     lambda errors: errors.carried_state_without_speculative_decoding("qwen3_5")),
], ids=["plain_class", "speculative_decoding"])
def test_what_cannot_keep_the_states_refuses_by_name(generic, engine_kwargs, message):
    """Named explicitly, hf_bridge's plain class would serve Qwen3.5's linear attention as
    if each step began afresh; speculative decoding would advance the states over draft
    tokens before they are accepted. Each refuses as the engine is built, naming the way out."""
    import json
    import subprocess
    import sys

    from hf_bridge import errors

    done = subprocess.run([sys.executable, "-c", REFUSE, str(generic("qwen3_5")), json.dumps(engine_kwargs)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode != 0 and message(errors) in done.stderr, done.stderr[-3000:]
