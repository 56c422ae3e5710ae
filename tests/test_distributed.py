"""Tensor parallel through vLLM's own distributed engine: tokens identical to one worker."""

from __future__ import annotations

import os

import pytest

from hf_bridge.validate import parity
from helpers.scenarios import run_scenario


@pytest.mark.slow
def test_tensor_parallel_2_matches_a_single_worker(zoo, engines, monkeypatch):
    from transformers import AutoProcessor

    model_dir = zoo("llava")
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "0|1"))
    tp = run_scenario("tensor-parallel", model_dir)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND")
    processor = AutoProcessor.from_pretrained(model_dir)
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2})
    for name in ("one_image", "two_images"):
        single = parity.vllm_result(llm, processor, parity.standard_cases(64)[name])
        assert tp[name]["prompt_ids"] == single.prompt_ids
        assert tp[name]["tokens"] == single.tokens, name
        worst = max(abs(a - b) for a, b in zip(tp[name]["token_logprobs"], single.token_logprobs))
        assert worst <= parity.ATOL, worst
