"""A call stopped with Ctrl-C leaves its engine serving (`interrupted_calls.py`).

Without it, an interrupt inside a step's forward left the in-process engine stepping for
ever with nothing computed (8 requests "running", no outputs, measured over 30 steps),
and an interrupted call's requests ran on into the next call's outputs.
"""

from __future__ import annotations

import _thread
import signal
import threading
import time
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


KERNEL_SETUP = """
import os
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ["VLLM_CPU_KVCACHE_SPACE"] = "1"
from transformers import AutoProcessor
from vllm import SamplingParams
from hf_bridge.validate import parity
from hf_bridge.validate.engine import make_llm
llm = make_llm({model_dir!r})
request = parity.vllm_request(AutoProcessor.from_pretrained({model_dir!r}), parity.standard_cases(64)["one_image"])
first = list(llm.generate([request], parity.sampling_params(), use_tqdm=False)[0].outputs[0].token_ids)
"""


class Kernel:
    """A notebook kernel (ipykernel) driven as JupyterLab drives one, through jupyter_client."""

    def __init__(self):
        from jupyter_client import KernelManager

        self.manager = KernelManager(kernel_name="python3")  # ipykernel's; jupyter_client runs it on this interpreter
        self.manager.start_kernel()
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def start(self, code: str) -> str:
        return self.client.execute(code)

    def finish(self, cell: str, timeout: float) -> tuple[str, str | None]:
        """The cell's printed text and the name of the error it ended with (None if none)."""
        printed, error = [], None
        while True:
            message = self.client.get_iopub_msg(timeout=timeout)
            if message["parent_header"].get("msg_id") != cell:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "stream":
                printed.append(content["text"])
            elif kind == "error":
                error = content["ename"]
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(printed), error

    def run(self, code: str, timeout: float = 300) -> str:
        """The last line the cell printed (vLLM's log lines come before it)."""
        printed, error = self.finish(self.start(code), timeout)
        assert error is None, (error, printed)
        return printed.strip().splitlines()[-1] if printed.strip() else ""

    def close(self):
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@pytest.mark.slow
def test_a_notebook_cell_interrupted_as_jupyterlab_interrupts_it_leaves_the_engine_serving(zoo):
    """The kernel runs vLLM in-process; jupyter_client's interrupt signals the kernel's
    process group. Without hf_bridge (the in-tree backend, measured by hand) the cell ended
    in KeyboardInterrupt with 8 requests unfinished, and the next cell's generate did not
    return within 60 s."""
    kernel = Kernel()
    try:
        kernel.run(KERNEL_SETUP.format(model_dir=str(zoo("llava"))))
        cell = kernel.start("llm.generate([request] * 8, SamplingParams(max_tokens=3000, temperature=0, ignore_eos=True), use_tqdm=False)")
        time.sleep(4)  # decoding: three thousand steps take far longer
        kernel.manager.interrupt_kernel()
        assert kernel.finish(cell, timeout=60)[1] == "KeyboardInterrupt"
        assert kernel.run("print(llm.llm_engine.get_num_unfinished_requests())") == "0"
        again = "outputs = llm.generate([request], parity.sampling_params(), use_tqdm=False)\n"
        again += "print(len(outputs), list(outputs[0].outputs[0].token_ids) == first)"
        assert kernel.run(again, timeout=60) == "1 True"
    finally:
        kernel.close()
