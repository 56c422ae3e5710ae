"""One model at pipeline_parallel_size=2 (vLLM's multiprocess executor, compiled mode):
prints one JSON line per case with its problems against transformers (empty: parity).

    python tests/helpers/pipeline_parallel.py MODEL_DIR SIDE CASE[,CASE...] [ENGINE_KWARGS_JSON]

ENGINE_KWARGS_JSON adds engine arguments: a multi-node launch's (`nnodes`, `master_port`...).
"""

import json
import os
import sys

# compiled mode: in eager mode vLLM 0.32's CPU runner skips the warm-up that allocates
# the later ranks' intermediate-tensor buffers (README, "Pipeline parallel")
ENGINE_KWARGS = dict(model_impl="transformers", dtype="float32", max_model_len=2048, seed=0, pipeline_parallel_size=2,
                     distributed_executor_backend="mp", limit_mm_per_prompt={"image": 2, "video": 1})
"""The engine every rank builds; a headless second node (`headless_node.py`) builds it too."""


def main():
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from transformers import AutoProcessor
    from vllm import LLM

    from hf_bridge.validate import parity
    from hf_bridge.validate.reference import references

    model_dir, side, names = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    engine_kwargs = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    cases = [parity.standard_cases(side)[name] for name in names]
    refs = references(model_dir, cases)
    llm = LLM(model=model_dir, **dict(ENGINE_KWARGS, **engine_kwargs))
    processor = AutoProcessor.from_pretrained(model_dir)
    for case, reference in zip(cases, refs):
        got = parity.vllm_result(llm, processor, case)
        print("CASE " + json.dumps({"case": case.name, "problems": parity.compare(reference, got)}), flush=True)


if __name__ == "__main__":
    main()
