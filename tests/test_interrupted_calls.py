"""A call stopped with Ctrl-C leaves its engine serving (`interrupted_calls.py`).

Without it, an interrupt inside a step's forward left the in-process engine stepping for
ever with nothing computed (8 requests "running", no outputs, measured over 30 steps),
and an interrupted call's requests ran on into the next call's outputs.
"""

from __future__ import annotations

import _thread
import signal
import threading
import traceback

import pytest

from hf_bridge.interrupted_calls import held_interrupts


def test_an_interrupt_is_held_until_the_block_ends_then_raised():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with held_interrupts():
            signal.raise_signal(signal.SIGINT)
            done.append("the rest of the block")
    assert done == ["the rest of the block"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_interrupt_stays_ignored_and_other_threads_are_left_alone():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with held_interrupts():
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    entered = []

    def in_a_thread():
        with held_interrupts():  # no handler can be set here: nothing is held
            entered.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert entered == [signal.default_int_handler]


def _one_image_request(model_dir) -> dict:
    from transformers import AutoProcessor

    from hf_bridge.validate import parity

    return parity.vllm_request(AutoProcessor.from_pretrained(model_dir), parity.standard_cases(64)["one_image"])


@pytest.mark.engine
def test_a_generate_stopped_inside_its_steps_leaves_the_engine_serving(zoo, engines):
    """Ctrl-C a second into eight long generations: the interrupt waits for its step to
    end, the eight are aborted, and the next call returns its own one output, the tokens
    it gives on a fresh engine."""
    from vllm import SamplingParams

    from hf_bridge.validate import parity

    llm, request = engines.get(zoo("llava")), _one_image_request(zoo("llava"))
    expected = llm.generate([request], parity.sampling_params(), use_tqdm=False)[0].outputs[0].token_ids
    long = SamplingParams(max_tokens=3000, temperature=0, ignore_eos=True)

    threading.Timer(1.0, _thread.interrupt_main).start()
    with pytest.raises(KeyboardInterrupt) as interrupted:
        llm.generate([request] * 8, long, use_tqdm=False)
    assert "held_interrupts" in "".join(traceback.format_tb(interrupted.value.__traceback__))  # it came during a step
    assert llm.llm_engine.get_num_unfinished_requests() == 0

    again = llm.generate([request], parity.sampling_params(), use_tqdm=False)
    assert len(again) == 1 and again[0].outputs[0].token_ids == expected


@pytest.mark.engine
def test_a_call_stopped_while_it_adds_requests_aborts_those_it_added(zoo, engines):
    """Ctrl-C while the prompts are still being prepared (here: the third is never made):
    the two added are aborted, not run into the next call."""
    from hf_bridge.validate import parity

    llm, request = engines.get(zoo("llava")), _one_image_request(zoo("llava"))

    class StoppedAtTheThird(list):
        def __iter__(self):
            yield from self[:2]
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        llm.generate(StoppedAtTheThird([request] * 3), parity.sampling_params(), use_tqdm=False)
    assert llm.llm_engine.get_num_unfinished_requests() == 0
    assert len(llm.generate([request], parity.sampling_params(), use_tqdm=False)) == 1
