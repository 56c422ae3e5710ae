"""RoPE whose frequencies follow a sequence's length (LongRoPE, dynamic), per request
(`hf_bridge/length_rope.py`): transformers' rotary module takes the length from the largest
position of its whole forward, and a dynamic one keeps the last length it saw, so under
vLLM a short request batched with a long one took the long one's frequencies (both
backends: its tokens differed from themselves alone from the first). By property, on
transformers' own rotary module, each request's rows get what a fresh module gives that
request alone; end to end, a short and a long request batched keep strict parity with
transformers."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_bridge.length_rope import PerRequestFrequencies, frequency_groups, length_rope_types, length_rotaries
from hf_bridge.validate import parity

ORIGINAL = 64
HEAD_DIM = 32


def rope_config(rope_type: str):
    from transformers import LlamaConfig

    parameters = {"rope_type": rope_type, "rope_theta": 10000.0}
    if rope_type == "longrope":
        parameters |= {"original_max_position_embeddings": ORIGINAL, "short_factor": [1.0] * (HEAD_DIM // 2),
                       "long_factor": [1.0 + i / HEAD_DIM for i in range(HEAD_DIM // 2)]}
    else:
        parameters |= {"factor": 2.0}
    max_positions = 4 * ORIGINAL if rope_type == "longrope" else ORIGINAL
    return LlamaConfig(hidden_size=64, num_attention_heads=2, head_dim=HEAD_DIM, max_position_embeddings=max_positions,
                       rope_parameters=parameters)


def fresh_rotary(rope_type: str):
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    return LlamaRotaryEmbedding(rope_config(rope_type))


# a request of this step: its first position and its rows (a prompt, or a decode step's one)
requests = st.lists(st.tuples(st.integers(0, 3 * ORIGINAL), st.integers(1, ORIGINAL + 8)), min_size=1, max_size=5)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["longrope", "dynamic"]), requests, st.integers(1, 4 * ORIGINAL))
def test_each_request_gets_the_frequencies_it_gets_alone(rope_type, batch, seen_before):
    """Whatever the module computed before (vLLM's start-up run reaches the longest
    positions), each request's rows equal a fresh module's for that request alone."""
    rotary = fresh_rotary(rope_type)
    x = torch.zeros(1, 1, 64)
    rotary(x, torch.arange(seen_before)[None])  # the state a long call leaves
    positions = torch.cat([torch.arange(first, first + rows) for first, rows in batch])[None]
    starts = [0]
    for _, rows in batch:
        starts.append(starts[-1] + rows)
    PerRequestFrequencies(rotary, lambda num_rows: starts).install()
    cos, sin = rotary(torch.zeros(1, positions.shape[-1], 64), positions)
    for (first, rows), start in zip(batch, starts):
        alone_cos, alone_sin = fresh_rotary(rope_type)(x, torch.arange(first, first + rows)[None])
        assert torch.equal(cos[:, start:start + rows], alone_cos) and torch.equal(sin[:, start:start + rows], alone_sin)


def test_requests_share_a_call_where_they_get_the_same_frequencies():
    starts, lasts = [0, 5, 6, 7, 9], [70, 10, 80, 90]  # lengths 71, 11, 81, 91 against 64 original positions
    assert frequency_groups(starts, 9, lasts, "longrope", ORIGINAL) == [[(0, 5), (6, 7), (7, 9)], [(5, 6)]]
    assert frequency_groups(starts, 9, lasts, "dynamic", ORIGINAL) == [[(0, 5)], [(5, 6)], [(6, 7)], [(7, 9)]]
    assert frequency_groups([0, 3, 3, 4], 6, [2, 9, 3], "dynamic", ORIGINAL) == [[(0, 3), (3, 4), (4, 6)]]  # padding rows


def test_rope_types_that_follow_the_length_are_found_in_the_config_and_the_model():
    assert length_rope_types(rope_config("longrope")) == ["longrope"]
    assert length_rope_types(rope_config("dynamic")) == ["dynamic"]
    assert length_rope_types(type("Config", (), {"rope_parameters": {
        "full_attention": {"rope_type": "dynamic"}, "sliding_attention": {"rope_type": "default"}}})()) == ["dynamic"]
    assert length_rope_types(rope_config("linear")) == []
    assert [type(m).__name__ for m in length_rotaries(torch.nn.Sequential(fresh_rotary("longrope"), fresh_rotary("linear")))] == [
        "LlamaRotaryEmbedding"]


@pytest.fixture(scope="module")
def long_rope_checkpoints(zoo, generic, tmp_path_factory):
    """Phi-4-multimodal (the sweep's generic build) with LongRoPE past 1024 positions, as
    its real checkpoints have it past 4096, and the zoo's LLaVA with a dynamic RoPE past
    2048; each with the words of a prompt long enough to pass it."""
    import json
    from pathlib import Path

    from hf_bridge.zoo.variant import variant

    phi, llava = Path(generic("phi4_multimodal", 1)), Path(zoo("llava"))
    head_dim = 32  # the generic Phi's 64 wide, 2 heads
    longrope = {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 1.0, "original_max_position_embeddings": 1024,
                "short_factor": [1.0] * (head_dim // 2), "long_factor": [1.0 + i / head_dim for i in range(head_dim // 2)]}
    text = json.loads((llava / "config.json").read_text())["text_config"]
    dynamic = {**text, "max_position_embeddings": 2048, "rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}}
    root = tmp_path_factory.mktemp("long_rope")
    return {
        "longrope": (variant(phi, root / "phi", config={"rope_parameters": longrope, "max_position_embeddings": 8192,
                                                         "original_max_position_embeddings": 1024}), 1100),
        "dynamic": (variant(llava, root / "llava", config={"text_config": dynamic}), 2100),
    }


@pytest.mark.engine
@pytest.mark.parametrize("rope_type, short_case", [("longrope", "one_image"), ("dynamic", "text_only")])
def test_a_short_request_beside_a_long_one_keeps_parity(rope_type, short_case, long_rope_checkpoints, engines):
    """A short request batched with a text past the original length, in compiled mode
    (vLLM's default): both at strict parity with transformers, each alone. Before, Phi's
    LongRoPE stopped the engine's start in compiled mode (Dynamo: data-dependent branching
    in transformers' frequency update), and eagerly the short request took the long one's
    frequencies, its tokens different from itself alone; the in-tree backend does both still."""
    from hf_bridge.validate.checkpoint import load_processor
    from hf_bridge.validate.reference import references

    model_dir, words = long_rope_checkpoints[rope_type]
    short = parity.standard_cases(64)[short_case]
    long = dataclasses.replace(parity.standard_cases(64)["text_only"], text="cat " * words)
    reference_short, reference_long = references(model_dir, [short, long])
    processor = load_processor(model_dir)
    llm = engines.get(model_dir, enforce_eager=False, limit_mm_per_prompt={"image": 1})
    assert llm.llm_engine.vllm_config.cache_config.enable_prefix_caching is False
    long_out, short_out = llm.generate([parity.vllm_request(processor, c) for c in (long, short)], parity.sampling_params(),
                                       use_tqdm=False)
    assert len(long_out.prompt_token_ids) > (1024 if rope_type == "longrope" else 2048)
    assert parity.compare(reference_long, parity.result_from_output(long_out)) == []
    assert parity.compare(reference_short, parity.result_from_output(short_out)) == []


@pytest.mark.engine
def test_a_prompt_longer_than_a_step_is_prefilled_whole(long_rope_checkpoints, engines):
    """LongRoPE past its original length, the engine asked to prefill in chunks of 256
    tokens: transformers gives every row of a prompt the frequencies of its whole length,
    so the prompt is prefilled in one step, and keeps strict parity. Before, each chunk
    took the frequencies of the prompt so far (the first four, within the original 1024
    positions, the short factors), and the greedy tokens differed from transformers'."""
    from hf_bridge.validate.checkpoint import load_processor
    from hf_bridge.validate.reference import references

    model_dir, words = long_rope_checkpoints["longrope"]
    long = dataclasses.replace(parity.standard_cases(64)["text_only"], text="cat " * words)
    (reference,) = references(model_dir, [long])
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 1}, max_num_batched_tokens=256, enable_chunked_prefill=True)
    config = llm.llm_engine.vllm_config
    assert not config.scheduler_config.enable_chunked_prefill
    assert config.scheduler_config.max_num_batched_tokens >= config.model_config.max_model_len
    (output,) = llm.generate([parity.vllm_request(load_processor(model_dir), long)], parity.sampling_params(), use_tqdm=False)
    assert len(output.prompt_token_ids) > 1024
    assert parity.compare(reference, parity.result_from_output(output)) == []
