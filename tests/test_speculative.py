"""Speculative decoding (`speculative_config`) on hf_bridge's models: drafts verified by the
model, so the greedy tokens stay transformers'.

n-gram drafts (no draft model) run through hf_bridge as through the in-tree backend.
EAGLE-3 drafts read the decoder's hidden states at some layers, which the in-tree backend
does not hand out for a multimodal model (`eagle3.py`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hf_bridge.validate import parity
from hf_bridge.validate.reference import references

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}


def metric(llm, name: str):
    return next(m for m in llm.get_metrics() if m.name == name)


@pytest.mark.engine
def test_ngram_drafts_keep_transformers_tokens(zoo, engines):
    from transformers import AutoProcessor

    model_dir = zoo("qwen2_5_vl")  # its continuation repeats a token, so some drafts are accepted
    case = parity.standard_cases(64)["one_image"]
    (reference,) = references(model_dir, [case])
    llm = engines.get(model_dir, speculative_config=NGRAM, disable_log_stats=False)
    (out,) = llm.generate([parity.vllm_request(AutoProcessor.from_pretrained(model_dir), case)], parity.sampling_params(),
                          use_tqdm=False)
    assert parity.compare(reference, parity.result_from_output(out)) == []
    assert metric(llm, "vllm:spec_decode_num_accepted_tokens").value > 0


AUX_LAYERS = [0, 1, 2]
"""Of the zoo's two decoder layers: the merged input embeddings (image rows included), the
first layer's output, and the last, after the final norm."""


def hf_hidden_states(model_dir, case: str, tmp_path):
    import torch

    out = tmp_path / "hidden_states.pt"
    done = subprocess.run([sys.executable, str(Path(__file__).parent / "helpers" / "hf_hidden_states.py"), str(model_dir), case, str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(out)


@pytest.mark.engine
@pytest.mark.parametrize("model", ["llava", "qwen2_vl"])  # Qwen2-VL: M-RoPE, and a config naming its image token image_token_id
def test_an_eagle3_draft_reads_transformers_hidden_states(zoo, engines, tmp_path, model):
    """The draft receives, for each prompt token, transformers' `hidden_states` at its
    layers (read where it takes them in, its `fc`), and the greedy tokens stay
    transformers'. vLLM's in-tree backend fails the first step here ("too many values to
    unpack (expected 2)"), and cannot start Qwen2-VL with a draft (its config has no
    `image_token_index`)."""
    import torch
    from transformers import AutoProcessor

    from helpers.eagle3_draft import write_draft

    model_dir = zoo(model)
    draft = write_draft(model_dir, tmp_path / "draft", AUX_LAYERS)
    case = parity.standard_cases(64)["one_image"]
    (reference,) = references(model_dir, [case])
    expected = hf_hidden_states(model_dir, "one_image", tmp_path)
    llm = engines.get(model_dir, speculative_config={"method": "eagle3", "model": str(draft), "num_speculative_tokens": 2})
    taken = []
    fc = llm.llm_engine.model_executor.driver_worker.worker.model_runner.drafter.model.model.fc
    hook = fc.register_forward_pre_hook(lambda module, args: taken.append(args[0].clone()))
    try:
        (out,) = llm.generate([parity.vllm_request(AutoProcessor.from_pretrained(model_dir), case)], parity.sampling_params(),
                              use_tqdm=False)
    finally:
        hook.remove()
    assert parity.compare(reference, parity.result_from_output(out)) == []
    prompt = taken[0].unflatten(-1, (len(AUX_LAYERS), -1)).transpose(0, 1)  # layers x prompt tokens x width
    assert prompt.shape == expected[AUX_LAYERS].shape
    torch.testing.assert_close(prompt, expected[AUX_LAYERS], atol=1e-4, rtol=1e-4)
