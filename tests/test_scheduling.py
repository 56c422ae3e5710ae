"""vLLM's default scheduling features give the same tokens as one plain step, and
prompts given as token ids expand exactly like text prompts."""

from __future__ import annotations

import pytest

from hf_bridge.validate import parity
from hf_bridge.validate.reference import references
from hf_bridge.zoo import SPECS


def _run(engines, model_dir, case, **engine_kwargs):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(model_dir)
    llm = engines.get(model_dir, **engine_kwargs)
    return llm, processor, parity.vllm_result(llm, processor, case)


@pytest.mark.engine
def test_chunked_prefill_splits_an_image_range(zoo, engines):
    model_dir = zoo("llava")
    case = parity.standard_cases(64)["one_image"]
    (reference,) = references(model_dir, [case])
    # image tokens sit at positions 6..22, so 16-token chunks cut through the range
    _, _, got = _run(
        engines, model_dir, case, limit_mm_per_prompt={"image": 1},
        enable_chunked_prefill=True, max_num_batched_tokens=16, max_model_len=512,
    )
    assert parity.compare(reference, got) == []


@pytest.mark.engine
def test_prefix_caching_of_a_repeated_multimodal_prompt(zoo, engines):
    from vllm import SamplingParams

    model_dir = zoo("qwen2_vl")
    # longer than one KV block, so the repeat can reuse cached blocks
    case = parity.Case("long", 64, num_images=1, text="Describe the image in detail. " * 40)
    (reference,) = references(model_dir, [case])
    llm, processor, first = _run(engines, model_dir, case, limit_mm_per_prompt={"image": 1}, enable_prefix_caching=True)
    assert parity.compare(reference, first) == []
    # prompt log-probs need every prompt position recomputed, so the repeat asks for none
    params = SamplingParams(max_tokens=parity.MAX_NEW_TOKENS, min_tokens=parity.MAX_NEW_TOKENS, temperature=0.0, logprobs=0)
    for _ in range(2):
        (again,) = llm.generate([parity.vllm_request(processor, case)], params, use_tqdm=False)
    assert (again.num_cached_tokens or 0) > 0, "the repeated prompt did not hit the prefix cache"
    completion = again.outputs[0]
    assert list(completion.token_ids) == reference.tokens
    got_lps = [lp[t].logprob for t, lp in zip(completion.token_ids, completion.logprobs)]
    assert max(abs(a - b) for a, b in zip(got_lps, reference.token_logprobs)) <= parity.ATOL


COMPILED = [("qwen2_vl", "one_image"), ("qwen2_vl", "video"), ("gemma3", "two_images"), ("qwen3_vl", "one_image"), ("qwen3_vl", "video")]
"""Qwen3-VL: its deepstack side features are per-step Python state, which a compiled decoder
graph froze at the profiling step (prompt log-probs 2.67 apart from the first image token
before its decoder was kept eager)."""


@pytest.mark.engine
@pytest.mark.parametrize("arch,case", COMPILED, ids=[f"{a}-{c}" for a, c in COMPILED])
def test_parity_in_compiled_mode(arch, case, zoo, engines):
    """vLLM's default mode (torch.compile of the decoder, no `enforce_eager`)."""
    model_dir = zoo(arch)
    the_case = parity.standard_cases(SPECS[arch].min_image_side)[case]
    (reference,) = references(model_dir, [the_case])
    limits = {"image": 2, "video": 1} if SPECS[arch].has_video else {"image": 2}
    _, _, got = _run(engines, model_dir, the_case, limit_mm_per_prompt=limits, enforce_eager=False)
    assert parity.compare(reference, got) == []


TOKEN_PROMPTS = ["llava", "qwen2_vl", "mistral3", "idefics3", "internvl", "gemma3"]


@pytest.mark.engine
@pytest.mark.parametrize("arch", TOKEN_PROMPTS)
def test_token_id_prompt_expands_like_the_hf_processor(arch, zoo, engines):
    """A token-id prompt with one unexpanded placeholder per item becomes exactly the
    HF processor's prompt, by token replacement alone (no decode round trip)."""
    from transformers import AutoProcessor
    from vllm.multimodal.processing import BaseMultiModalProcessor

    model_dir = zoo(arch)
    processor = AutoProcessor.from_pretrained(model_dir)
    case = parity.standard_cases(SPECS[arch].min_image_side)["two_images"]
    (reference,) = references(model_dir, [case])
    request = parity.vllm_request(processor, case)
    request["prompt_token_ids"] = processor.tokenizer.encode(request.pop("prompt"))
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2, "video": 1} if SPECS[arch].has_video else {"image": 2})

    calls = []
    original = BaseMultiModalProcessor._apply_prompt_updates_via_text

    def spy(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    BaseMultiModalProcessor._apply_prompt_updates_via_text = spy
    try:
        (out,) = llm.generate([request], parity.sampling_params(), use_tqdm=False)
    finally:
        BaseMultiModalProcessor._apply_prompt_updates_via_text = original
    assert list(out.prompt_token_ids) == reference.prompt_ids
    assert calls == [], "the placeholders were expanded through a decode/encode round trip"
    assert parity.compare(reference, parity.result_from_output(out)) == []
