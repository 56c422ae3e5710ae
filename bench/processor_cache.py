"""vLLM's processor cache through hf_bridge: a hit against a miss, side by side in one run.

For each model, one image item goes through vLLM's multimodal processor (hf_bridge's, as
the engine's front end runs it, with the front end's processor cache): a *miss* is an
image never seen before (the HF processor runs), a *hit* the same image again (hashing,
cache lookup, prompt update only). Images are `--size` pixels (default a 1024 x 768
photo; the processors resize and tile it as they would a user's). Each backend runs in its own process (the plugin
registers at process start; `HF_BRIDGE_DISABLE=1` gives the in-tree backend); medians of
`--repeats` fresh images and as many repeats.

    .venv/bin/python bench/processor_cache.py [--models llava_bench internvl qwen2_vl idefics3] [--repeats 9] [--size 1024 768]

A ratio miss/hit above 10 is the target.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def worker(model: str, repeats: int, size: tuple[int, int]) -> None:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    from hf_bridge.inspect import build_processor, inspect_prompt, processor_cache
    from hf_bridge.validate import parity
    from hf_bridge.zoo import build

    model_dir = build(model)
    processor = build_processor(model_dir)
    cache = processor_cache(processor)
    prompt = parity.prompt_text(processor.info.get_hf_processor(), parity.Case("x", num_images=1))

    def timed(image) -> float:
        start = time.perf_counter()
        inspect_prompt(processor, prompt, {"image": image}, cache=cache)
        return time.perf_counter() - start

    timed(parity.test_image(*size, seed=999))  # warm-up
    misses, hits = [], []
    for i in range(repeats):
        image = parity.test_image(*size, seed=i)
        misses.append(timed(image))
        hits.append(timed(image))
    print("RESULT " + json.dumps({"miss_ms": statistics.median(misses) * 1e3, "hit_ms": statistics.median(hits) * 1e3}), flush=True)


def measure(model: str, repeats: int, size: tuple[int, int], in_tree: bool) -> dict:
    env = dict(os.environ, HF_BRIDGE_DISABLE="1" if in_tree else "0")
    done = subprocess.run([sys.executable, __file__, "--worker", model, "--repeats", str(repeats), "--size", *map(str, size)],
                          capture_output=True, text=True, env=env)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{model}: worker failed:\n{done.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["llava_bench", "internvl", "qwen2_vl", "idefics3"])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--size", type=int, nargs=2, default=[1024, 768], metavar=("WIDTH", "HEIGHT"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = tuple(args.size)
    if args.worker:
        return worker(args.worker, args.repeats, size)
    print(f"one {size[0]}x{size[1]} image through vLLM's multimodal processor and its processor cache (medians of {args.repeats})")
    print(f"{'model':<14} {'backend':<9} {'miss ms':>9} {'hit ms':>8} {'miss/hit':>9}")
    for model in args.models:
        for in_tree in (False, True):
            r = measure(model, args.repeats, size, in_tree)
            backend = "in-tree" if in_tree else "hf_bridge"
            print(f"{model:<14} {backend:<9} {r['miss_ms']:>9.2f} {r['hit_ms']:>8.2f} {r['miss_ms'] / r['hit_ms']:>9.1f}", flush=True)


if __name__ == "__main__":
    main()
