"""A model's ignore patterns drop only the checkpoint names it has no weight for, as
transformers drops them (`hf_bridge/unexpected_weights.py`).

GPT-2 ignores "attn.bias" (its old causal-mask buffer), a regex that also matches each
layer's `attn.c_attn.bias`; vLLM's mapper dropped those too, and both backends stopped
on `Following weights were not initialized from checkpoint`.
"""

from __future__ import annotations

import re

from vllm.model_executor.models.utils import WeightsMapper

from hf_bridge.unexpected_weights import UnexpectedOnlyMapper, ignoring_unexpected_only

WEIGHTS = {"model.h.0.attn.c_attn.bias", "model.h.0.attn.c_attn.weight"}


def _vllm_mapper(ignored: list[str]) -> WeightsMapper:
    """The mapper vLLM's Transformers backend builds: ignore patterns first, then the
    base-model prefix."""
    return WeightsMapper(orig_to_new_regex={**{re.compile(key): None for key in ignored},
                                            re.compile(r"^(?!model\.)(.+)"): r"model.\1"})


def test_an_ignore_pattern_matching_a_weight_no_longer_drops_it():
    vllm_mapper = _vllm_mapper(["attn.bias", "crossattention.bias"])
    names = ["h.0.attn.c_attn.bias", "h.0.attn.c_attn.weight", "h.0.attn.bias", "h.0.crossattention.bias"]
    assert vllm_mapper.apply_list(names) == ["model.h.0.attn.c_attn.weight"]

    mapper = ignoring_unexpected_only(vllm_mapper, {"attn.bias", "crossattention.bias"}, WEIGHTS.__contains__)
    assert isinstance(mapper, UnexpectedOnlyMapper)
    assert mapper.apply_list(names) == ["model.h.0.attn.c_attn.bias", "model.h.0.attn.c_attn.weight"]
    # a name no pattern matches and no weight has is still the loader's to report
    assert mapper.apply_list(["h.0.mlp.bias"]) == ["model.h.0.mlp.bias"]
    # the other mappings keep their order and their effect
    assert list(mapper.orig_to_new_regex.values()) == [r"model.\1"]
    # vLLM's consumers that only rename (LoRA, quantization lists) still derive theirs, which drop nothing
    assert mapper.get_rename_mapper().apply_list(["h.0.attn.c_attn.bias", "h.0.attn.bias"]) == [
        "model.h.0.attn.c_attn.bias", "model.h.0.attn.bias"]


def test_a_model_ignoring_nothing_keeps_vllms_mapper():
    vllm_mapper = _vllm_mapper([])
    assert ignoring_unexpected_only(vllm_mapper, None, WEIGHTS.__contains__) is vllm_mapper
    assert ignoring_unexpected_only(vllm_mapper, set(), WEIGHTS.__contains__) is vllm_mapper
