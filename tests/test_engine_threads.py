"""Every in-process engine computes at the OpenMP thread count the process's first engine
had (`engine_threads.py`)."""

from __future__ import annotations

import os

import pytest


@pytest.mark.engine
def test_an_engine_after_an_ngram_drafting_one_keeps_transformers_tokens(zoo):
    """vLLM's n-gram drafter runs numba's OpenMP pool, which sets the process's thread
    count to the machine's cores; an engine built after it then ran vLLM's CPU matmul
    primitives, cached by the first engine at the old count, at the new one, and its
    greedy tokens differed from transformers' from the first (`engine_threads.py`)."""
    from helpers.engine_threads import second_engine_after_ngram_drafts

    from hf_bridge.clean_interpreter import CleanCall
    from hf_bridge.validate import parity
    from hf_bridge.validate.reference import references

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("numba's pool changes the thread count only on a machine with more than one core")
    model_dir = zoo("qwen2_vl")
    run = CleanCall(second_engine_after_ngram_drafts, str(model_dir), "text_only", doing="two engines")
    (reference,) = references(model_dir, [parity.standard_cases(64)["text_only"]])
    seen = run.result()
    assert parity.compare(reference, seen["drafting"]) == []
    assert parity.compare(reference, seen["plain"]) == []
    # numba's pool changed the count once, at its start; each step after that set it back
    (changed,) = seen["logged"]
    assert changed.startswith("The OpenMP thread count changed from 1 to "), changed
    assert seen["threads after drafting"] == seen["threads after plain"] == 1, seen
