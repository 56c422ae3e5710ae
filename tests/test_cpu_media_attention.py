"""Attention both ways within each image on vLLM's CPU backend (`cpu_media_attention.py`):
Gemma3 matches transformers where its sliding window bites, and where the step budget
would split an image across prefill steps (items are kept whole)."""

from __future__ import annotations

import json

import pytest

from hf_bridge.validate import parity

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
