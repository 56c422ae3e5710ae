"""Tensor and pipeline parallel through vLLM's own distributed engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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


def _pipeline_parallel(model_dir, side: int, cases: str) -> dict[str, list[str]]:
    helper = Path(__file__).parent / "helpers" / "pipeline_parallel.py"
    env = dict(os.environ, VLLM_CPU_OMP_THREADS_BIND=os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "0|1"))
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # pipeline stages are processes of their own
    done = subprocess.run([sys.executable, str(helper), str(model_dir), str(side), cases],
                          capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line[5:]) for line in done.stdout.splitlines() if line.startswith("CASE ")]
    return {line["case"]: line["problems"] for line in lines}


@pytest.mark.slow
def test_pipeline_parallel_2_reaches_parity(zoo):
    assert _pipeline_parallel(zoo("llava"), 64, "one_image,two_images,text_only") == {
        "one_image": [], "two_images": [], "text_only": []
    }


@pytest.mark.slow
def test_pipeline_parallel_2_carries_side_features_to_the_later_rank(zoo):
    """Qwen3-VL's deepstack features are computed with the image on the first rank, travel
    to the second in the intermediate tensors, and each rank adds the levels of its own
    decoder layers (the tiny Qwen3-VL has two layers and two levels: one per rank)."""
    assert _pipeline_parallel(zoo("qwen3_vl"), 64, "text_only,one_image,two_images,video") == {
        "text_only": [], "one_image": [], "two_images": [], "video": []
    }
