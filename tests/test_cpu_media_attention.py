"""Attention both ways within each image on vLLM's CPU backend (`cpu_media_attention.py`):
Gemma3 matches transformers where its sliding window bites, and where the step budget
would split an image across prefill steps (items are kept whole); PaliGemma, whose whole
prompt attends both ways, matches it in a batch of prompts of different lengths that share
their image, after a preemption, and as PaliGemma 2 (soft-capped attention, sliding-window
layers shorter than its prompts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hf_bridge.validate import parity

PALIGEMMA2 = Path(__file__).parent / "helpers" / "paligemma2.py"
PALIGEMMA2_WINDOW = 8
"""Shorter than every prompt (28 tokens and up), as PaliGemma 2's 4096 is than its
896-pixel checkpoints' 4096 image tokens and their text."""

pytestmark = pytest.mark.engine

WINDOW = 6
"""Longer than the tiny Gemma3's 4-token images, so vLLM keeps their ranges, and far
shorter than its prompts, so the sliding layers attend to part of each."""
STEP_BUDGET = 10
"""Tokens per engine step: one Gemma3 image's placeholder (the least vLLM accepts for
whole items), and both images of the two-image prompt would straddle a step boundary."""


@pytest.fixture(scope="module")
def windowed_gemma3(zoo, tmp_path_factory):
    """The zoo's Gemma3 with a 6-token sliding window (the same weights)."""
    from hf_bridge.zoo.variant import variant

    model_dir = zoo("gemma3")
    text_config = json.loads((model_dir / "config.json").read_text())["text_config"]
    return variant(model_dir, tmp_path_factory.mktemp("gemma3_window") / "gemma3", config={"text_config": {**text_config, "sliding_window": WINDOW}})


def _parity(llm, model_dir, case_names):
    from transformers import AutoProcessor

    from hf_bridge.validate.reference import references

    processor = AutoProcessor.from_pretrained(model_dir)
    cases = [parity.standard_cases(64)[name] for name in case_names]
    for case, reference in zip(cases, references(model_dir, cases)):
        assert parity.compare(reference, parity.vllm_result(llm, processor, case)) == [], case.name


def _generate(llm, processor, cases):
    """`cases` through `llm` in one batch."""
    return llm.generate([parity.vllm_request(processor, c) for c in cases], parity.sampling_params(), use_tqdm=False)


def _assert_outputs_match(model_dir, cases, outputs):
    """Each case's output at strict parity with transformers' reference."""
    from hf_bridge.validate.reference import references

    for case, reference, out in zip(cases, references(model_dir, cases), outputs, strict=True):
        assert parity.compare(reference, parity.result_from_output(out)) == [], case.name


def test_image_tokens_attend_both_ways_under_a_sliding_window(windowed_gemma3, engines):
    llm = engines.get(windowed_gemma3, limit_mm_per_prompt={"image": 2})
    config = llm.llm_engine.vllm_config
    layer_types = config.model_config.hf_text_config.layer_types
    assert "sliding_attention" in layer_types and config.model_config.hf_text_config.sliding_window == WINDOW
    _parity(llm, windowed_gemma3, ["one_image", "two_images", "text_only"])


def test_images_are_prefilled_whole_when_the_step_budget_would_split_them(zoo, engines):
    from transformers import AutoProcessor

    model_dir = zoo("gemma3")
    image_types = parity.hf_inputs(AutoProcessor.from_pretrained(model_dir), parity.standard_cases(64)["two_images"])["token_type_ids"][0].tolist()
    positions = [i for i, t in enumerate(image_types) if t == 1]
    straddled = {(p - 1) // STEP_BUDGET for p in positions if p % STEP_BUDGET == 0 and p - 1 in positions}
    assert len(straddled) == 2, "both images would be split by steps of STEP_BUDGET tokens"
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2}, max_num_batched_tokens=STEP_BUDGET, enable_chunked_prefill=True)
    scheduler_config = llm.llm_engine.vllm_config.scheduler_config
    assert scheduler_config.max_num_batched_tokens == STEP_BUDGET
    assert scheduler_config.disable_chunked_mm_input, "hf_bridge keeps each image whole on a CPU"
    _parity(llm, model_dir, ["one_image", "two_images"])


def test_a_prompt_attending_both_ways_is_prefilled_whole_and_matches_in_a_batch(zoo, engines, hf_bridge_log):
    """PaliGemma's prefix is its whole prompt: each request's range is its prompt, whatever
    its neighbours' lengths; prompts are prefilled whole and prefix caching is off, so two
    prompts sharing their image and first words do not share keys computed before the
    words that differ."""
    from dataclasses import replace

    from transformers import AutoProcessor
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    from hf_bridge.bidirectional import report_bidirectional_attention

    model_dir = zoo("paligemma")
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2}, enable_chunked_prefill=True, enable_prefix_caching=True)
    vllm_config = llm.llm_engine.vllm_config
    assert not vllm_config.scheduler_config.enable_chunked_prefill and not vllm_config.cache_config.enable_prefix_caching
    assert vllm_config.scheduler_config.max_num_batched_tokens >= vllm_config.model_config.max_model_len
    assert any("attends bidirectionally over its whole prompt; CPUMediaAttentionBackend does so too" in r.getMessage()
               for r in hf_bridge_log.records)
    hf_bridge_log.clear()
    report_bidirectional_attention(vllm_config.model_config, CPUAttentionBackend)
    (approximate,) = [r.getMessage() for r in hf_bridge_log.records]
    assert "over its whole prompt (a prefix LM), but the selected attention backend (CPUAttentionBackend)" in approximate
    standard = parity.standard_cases(64)
    cases = [standard["one_image"], standard["two_images"],
             replace(standard["one_image"], name="one_image_longer", text="Describe what you see, in detail, for a caption.")]
    processor = AutoProcessor.from_pretrained(model_dir)
    outputs = _generate(llm, processor, cases)
    _assert_outputs_match(model_dir, cases, outputs)


def test_a_prompt_attending_both_ways_keeps_parity_when_its_request_is_preempted(zoo, engines):
    """Two KV blocks of 32 tokens for two requests whose prompts (28 and 31 tokens) fit one
    block each: the first to generate past its block preempts the other, which is
    recomputed later with its generated token. That token must stay causal (a range
    reaching it, one token past the prompt, gave other tokens from the third on)."""
    from dataclasses import replace

    from transformers import AutoProcessor

    model_dir = zoo("paligemma")
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 1}, block_size=32, num_gpu_blocks_override=3,
                      max_num_seqs=2, max_model_len=64)
    one_image = parity.standard_cases(64)["one_image"]
    cases = [replace(one_image, name="short", text="Hi"), replace(one_image, name="longer", text="What is this?")]
    processor = AutoProcessor.from_pretrained(model_dir)
    assert [len(parity.hf_inputs(processor, c)["input_ids"][0]) for c in cases] == [28, 31]
    scheduler = llm.llm_engine.engine_core.engine_core.scheduler
    preempted = []
    preempt = scheduler._preempt_request

    def counting_preempt(request, *args, **kwargs):
        preempted.append((request.num_prompt_tokens, request.num_computed_tokens))
        return preempt(request, *args, **kwargs)

    scheduler._preempt_request = counting_preempt
    try:
        outputs = _generate(llm, processor, cases)
    finally:
        del scheduler._preempt_request
    assert preempted == [(31, 32)], "the longer prompt is preempted once, after its first generated token"
    _assert_outputs_match(model_dir, cases, outputs)


@pytest.fixture(scope="module")
def paligemma2(tmp_path_factory):
    out = tmp_path_factory.mktemp("paligemma2") / "paligemma2"
    done = subprocess.run([sys.executable, str(PALIGEMMA2), str(out), str(PALIGEMMA2_WINDOW)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_paligemma2_sees_its_whole_prompt_past_the_window_with_its_attention_soft_capped(paligemma2, engines):
    """On its sliding layers PaliGemma 2's prompt still sees all of itself ((causal AND
    window) OR prompt, as transformers composes it), so the prompt's pass runs without the
    window; its attention scores are soft-capped, which transformers' eager attention
    applies and its default SDPA drops, so the reference runs eager (`reference_attention`)."""
    from transformers import AutoConfig, AutoProcessor

    from hf_bridge.bidirectional import attends_across_prompt, prompt_escapes_window
    from hf_bridge.validate.reference import references
    from hf_bridge.validate.transformers_side import TransformersSide
    from helpers.conditioning import assert_well_conditioned

    config = AutoConfig.from_pretrained(paligemma2)
    assert attends_across_prompt(config) and prompt_escapes_window(config)
    assert parity.load_generation_model(paligemma2).config.get_text_config()._attn_implementation == "eager"
    side = TransformersSide(paligemma2, {"float32": []})  # `hf-bridge validate` says so on its progress line
    side.stop()
    assert side.work.endswith("with eager attention (the model soft-caps attention scores, which transformers' "
                              "default SDPA attention drops)")
    standard = parity.standard_cases(64)
    cases = [standard["one_image"], standard["two_images"]]
    processor = AutoProcessor.from_pretrained(paligemma2)
    assert min(len(parity.hf_inputs(processor, c)["input_ids"][0]) for c in cases) > PALIGEMMA2_WINDOW
    llm = engines.get(paligemma2, limit_mm_per_prompt={"image": 2}, block_size=32)
    outputs = _generate(llm, processor, cases)
    for case, reference in zip(cases, references(paligemma2, cases)):
        assert not parity.is_degenerate(reference.tokens), reference.tokens
        assert_well_conditioned(paligemma2, case, reference)
    _assert_outputs_match(paligemma2, cases, outputs)
