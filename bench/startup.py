"""How long an engine takes to start through hf_bridge and through vLLM's in-tree backend,
side by side in one run.

What a notebook or an offline script waits for, in a fresh process each time (the plugin
registers at process start; `HF_BRIDGE_DISABLE=1` gives the in-tree backend), the two
backends alternating, medians of `--rounds`:

- **import**: `import vllm` (with the plugin's entry point, where installed), torch and
  transformers already imported;
- **engine**: `LLM(...)` until it returns, in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`,
  as the notebooks and `hf-bridge validate` start it), eager or compiled (`--modes`):
  config, processor, the model built and loaded, hf_bridge's probes of its processor and
  model, vLLM's profiling run and KV cache;
- **first request**: one image, 8 new tokens, on the new engine.

Models: the zoo's (`--models`; the checkpoint is built before the timed processes start).
hf_bridge's modules are compiled to bytecode first, as installing a package does: a
machine that sets `PYTHONDONTWRITEBYTECODE` (this project's does) otherwise compiles an
editable install's modules from source at every start, about 60 ms that no user pays.

    .venv/bin/python bench/startup.py [--models llava_bench qwen2_vl] [--modes eager compiled] [--rounds 3]
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import time

from worker_process import report, run_worker

STAGES = ("import", "engine", "first request")


def worker(model: str, compiled: bool) -> None:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from hf_bridge.validate import parity
    from hf_bridge.zoo import build

    model_dir = build(model)  # built (cached) by the parent: a lookup here
    seconds = {}
    start = time.perf_counter()
    from vllm import LLM, SamplingParams

    seconds["import"] = time.perf_counter() - start
    start = time.perf_counter()
    llm = LLM(model=str(model_dir), model_impl="transformers", dtype="float32", max_model_len=2048, max_num_seqs=4,
              limit_mm_per_prompt={"image": 1}, seed=0, enforce_eager=not compiled)
    seconds["engine"] = time.perf_counter() - start
    from transformers import AutoProcessor

    case = parity.Case("one_image", num_images=1)
    prompt = parity.prompt_text(AutoProcessor.from_pretrained(model_dir), case)
    image = parity.test_image(96, 64, seed=0)
    start = time.perf_counter()
    llm.generate([{"prompt": prompt, "multi_modal_data": {"image": image}}], SamplingParams(max_tokens=8),
                 use_tqdm=False)
    seconds["first request"] = time.perf_counter() - start
    report(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["llava_bench", "qwen2_vl"])
    parser.add_argument("--modes", nargs="+", choices=("eager", "compiled"), default=["eager", "compiled"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker[0], args.worker[1] == "compiled")
    import hf_bridge
    from hf_bridge.zoo import build

    compileall.compile_dir(os.path.dirname(hf_bridge.__file__), quiet=1)
    print(f"engine start-up, in-process, float32, medians of {args.rounds} fresh processes per backend (seconds)")
    print(f"{'model':<12} {'mode':<9} {'stage':<14} {'hf_bridge':>10} {'in-tree':>9} {'hf/in-tree':>11}")
    for model in args.models:
        build(model)
        for mode in args.modes:
            runs = {False: [], True: []}
            for round_ in range(args.rounds):
                for in_tree in ((False, True) if round_ % 2 == 0 else (True, False)):
                    env = dict(os.environ, HF_BRIDGE_DISABLE="1" if in_tree else "0")
                    runs[in_tree].append(run_worker(__file__, ["--worker", model, mode], env, f"{model} {mode}"))
            for stage in (*STAGES, "total"):
                hf, intree = (statistics.median(sum(r.values()) if stage == "total" else r[stage] for r in runs[t])
                              for t in (False, True))
                print(f"{model:<12} {mode:<9} {stage:<14} {hf:>10.2f} {intree:>9.2f} {hf / intree:>11.3f}", flush=True)


if __name__ == "__main__":
    main()
