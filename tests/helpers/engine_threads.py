"""Two in-process engines over one checkpoint, the first drafting with n-grams, in a clean
interpreter whose OpenMP thread count starts at 1 (as `OMP_NUM_THREADS=1` sets it)."""

from __future__ import annotations

import gc


def second_engine_after_ngram_drafts(model_dir: str, case_name: str) -> dict:
    """Runs `case_name` on an engine drafting with n-grams (vLLM's drafter runs numba's
    OpenMP pool, which sets the process's thread count to the machine's cores), then on a
    plain engine built after it; reports both results, the thread count after each, and
    what hf_bridge logged of the count."""
    import logging
    import os

    import torch
    from transformers import AutoProcessor

    from hf_bridge import LOGGER_NAME
    from hf_bridge.validate import parity
    from hf_bridge.validate.engine import make_llm, shutdown

    torch.set_num_threads(1)
    os.environ["VLLM_LOGGING_LEVEL"] = "INFO"
    logged = []
    logger = logging.getLogger(LOGGER_NAME)
    handle = logger.handle  # vLLM's logging set-up resets handlers, not the logger's own `handle`

    def kept(record):
        if "OpenMP thread count" in record.getMessage():
            logged.append(record.getMessage())
        handle(record)

    logger.handle = kept
    case = parity.standard_cases(64)[case_name]
    request = parity.vllm_request(AutoProcessor.from_pretrained(model_dir), case)
    ngram = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
    seen = {}

    def run(name, **kwargs):
        llm = make_llm(model_dir, **kwargs)
        (out,) = llm.generate([request], parity.sampling_params(), use_tqdm=False)
        seen[f"threads after {name}"] = torch.get_num_threads()
        shutdown(llm)
        del llm
        gc.collect()
        return parity.result_from_output(out)

    drafting = run("drafting", speculative_config=ngram)
    plain = run("plain")
    return {"drafting": drafting, "plain": plain, "logged": logged, **seen}
