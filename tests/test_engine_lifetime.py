"""An in-process engine replaced by a newer one leaves the newer one's state alone
(`engine_lifetime.py`)."""

from __future__ import annotations

import gc

import pytest


@pytest.mark.engine
def test_a_notebook_cell_building_its_engine_again_keeps_serving(zoo, engines):
    """`llm = LLM(...)` run twice: vLLM builds the new engine, then frees the old one,
    whose teardown used to take the new one's parallel state ("pipeline model parallel
    group is not initialized" at its first request)."""
    from hf_bridge.engine_lifetime import is_superseded
    from hf_bridge.validate import parity
    from hf_bridge.validate.engine import make_llm, shutdown

    engines.close()  # the shared engine would be superseded too
    prompt, params = ["Describe a cat."], parity.sampling_params()

    def tokens(llm):
        return llm.generate(prompt, params, use_tqdm=False)[0].outputs[0].token_ids

    llm = make_llm(zoo("llava"))
    first = tokens(llm)
    core = llm.llm_engine.engine_core.engine_core
    llm = make_llm(zoo("qwen2_vl"))  # the cell again, with another checkpoint
    assert len(tokens(llm)) == parity.MAX_NEW_TOKENS
    assert is_superseded(core)
    del core
    llm = make_llm(zoo("llava"))  # and back: the same greedy tokens as the first time
    assert tokens(llm) == first
    shutdown(llm)  # the newest engine still tears the process's state down in full
    del llm
    gc.collect()
    again = make_llm(zoo("llava"))
    assert tokens(again) == first
    shutdown(again)
