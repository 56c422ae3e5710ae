"""An in-process engine replaced by a newer one leaves the newer one's state alone, and
an engine freed frees its model (`engine_lifetime.py`)."""

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


@pytest.mark.engine
@pytest.mark.parametrize("shut_down_first", [True, False], ids=["shut_down", "dropped"])
def test_an_engine_freed_frees_its_compiled_model(zoo, shut_down_first):
    """In compiled mode (vLLM's default) each compiled module registers a Dynamo bytecode
    hook, which holds it. vLLM removed the hooks through a weak reference to the model,
    already dead when it collected an engine shut down first: each compiled engine that
    `hf-bridge validate` ran in a notebook kept its decoder, weights and all. An engine
    only dropped, as a notebook cell run again drops it, is freed too."""
    from helpers.engine_freed import compiled_model_left_after

    from hf_bridge.clean_interpreter import CleanCall

    left = CleanCall(compiled_model_left_after, str(zoo("llava")), shut_down_first, doing="freeing an engine").result()
    assert left["tokens"] > 0 and left["compiled modules"] > 0, left
    assert left["hooks while alive"] == left["compiled modules"], left
    assert left["hooks left"] == left["compiled modules left"] == 0, left
