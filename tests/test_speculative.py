"""Speculative decoding (`speculative_config`) on hf_bridge's models: drafts verified by the
model, so the greedy tokens stay transformers'.

n-gram drafts (no draft model) run through hf_bridge as through the in-tree backend.
EAGLE-3 drafts need the decoder's hidden states at some layers; for a multimodal model
neither backend hands them out yet (README, "Speculative decoding").
"""

from __future__ import annotations

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
