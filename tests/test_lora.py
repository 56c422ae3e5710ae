"""LoRA adapters (`enable_lora`): a request with an adapter on the text model's attention
and MLP linears gives transformers' tokens and log-probs on the checkpoint with that
adapter merged (`helpers/lora_adapter.py`).

The in-tree backend serves LLaVA and Qwen2-VL so too. It cannot start Chameleon with
LoRA ("Could not locate the language model submodule": its text layers sit in the base
model), and on the CPU it fails Qwen3-VL-MoE's first step (vLLM's LoRA on fused experts
runs Triton kernels, which its CPU build lacks; hf_bridge keeps those experts in
transformers there).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hf_bridge.validate import parity
from hf_bridge.validate.reference import references

HELPER = Path(__file__).parent / "helpers" / "lora_adapter.py"
SIDE = 64


def adapter_and_merged(model_dir: Path, tmp_path: Path) -> tuple[Path, Path]:
    adapter, merged = tmp_path / "adapter", tmp_path / "merged"
    done = subprocess.run([sys.executable, str(HELPER), str(model_dir), str(adapter), str(merged)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return adapter, merged


@pytest.mark.engine
@pytest.mark.parametrize(("model", "case"), [
    ("llava", "two_images"),
    ("qwen2_vl", "one_image"),  # M-RoPE
    ("chameleon", "one_image"),  # flat: text layers in the base model, whose embedding its tower reads
    ("qwen3_vl_moe", "one_image"),  # experts kept in transformers (CPU)
])
def test_an_adapter_gives_the_tokens_of_its_merged_checkpoint(zoo, engines, tmp_path, model, case):
    from transformers import AutoProcessor
    from vllm.lora.request import LoRARequest

    model_dir = zoo(model)
    adapter, merged = adapter_and_merged(model_dir, tmp_path)
    the_case = parity.standard_cases(SIDE)[case]
    (reference,) = references(merged, [the_case])
    processor = AutoProcessor.from_pretrained(model_dir)
    llm = engines.get(model_dir, enable_lora=True, max_lora_rank=8, limit_mm_per_prompt={"image": 2})
    request = parity.vllm_request(processor, the_case)
    (adapted,) = llm.generate([request], parity.sampling_params(), use_tqdm=False, lora_request=LoRARequest("merged", 1, str(adapter)))
    (base,) = llm.generate([request], parity.sampling_params(), use_tqdm=False)
    assert parity.compare(reference, parity.result_from_output(adapted)) == []
    assert parity.result_from_output(base).tokens != reference.tokens  # the adapter is not lost on the way
