"""Requests/s of hf_bridge vs vLLM's in-tree Transformers backend, side by side in one run.

Model: the zoo's `llava_bench` (CLIP at 224 px, a 512-wide 6-layer Llama text model);
each request carries one image and generates 32 tokens. Each backend runs in its own
process (the plugin registers at process start; `HF_BRIDGE_DISABLE=1` gives the in-tree
backend), alternating, and the median of the rounds is reported.

    .venv/bin/python bench/throughput.py [--requests 32] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

NEW_TOKENS = 32


def worker(num_requests: int) -> None:
    """One backend, one process: warm up, then time `num_requests` requests."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    from vllm import LLM, SamplingParams

    from hf_bridge.validate import parity
    from hf_bridge.zoo import build

    model_dir = build("llava_bench")
    llm = LLM(model=str(model_dir), model_impl="transformers", dtype="float32", max_model_len=1024,
              max_num_seqs=16, limit_mm_per_prompt={"image": 1}, seed=0)
    prompt = "user: <image>Describe the image.\nassistant:"
    images = [parity.test_image(224 + 8 * (i % 4), 224, seed=i) for i in range(num_requests)]
    requests = [{"prompt": prompt, "multi_modal_data": {"image": image}} for image in images]
    params = SamplingParams(max_tokens=NEW_TOKENS, min_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
    llm.generate(requests[:4], params, use_tqdm=False)  # warm-up (different images: no cache reuse below)
    fresh = [{"prompt": prompt, "multi_modal_data": {"image": parity.test_image(230, 224 + i, seed=1000 + i)}}
             for i in range(num_requests)]
    start = time.perf_counter()
    outputs = llm.generate(fresh, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    assert all(len(o.outputs[0].token_ids) == NEW_TOKENS for o in outputs)
    print("RESULT " + json.dumps({"requests_per_s": num_requests / elapsed, "seconds": elapsed}), flush=True)


def run(backend: str, num_requests: int) -> float:
    env = dict(os.environ, HF_BRIDGE_DISABLE="1" if backend == "in-tree" else "0")
    done = subprocess.run([sys.executable, __file__, "--worker", str(num_requests)], env=env,
                          capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])["requests_per_s"]
    raise RuntimeError(f"{backend} run failed:\n{done.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    from hf_bridge.zoo import build

    build("llava_bench")
    results: dict[str, list[float]] = {"hf_bridge": [], "in-tree": []}
    for r in range(args.rounds):
        for backend in (("hf_bridge", "in-tree") if r % 2 == 0 else ("in-tree", "hf_bridge")):
            results[backend].append(run(backend, args.requests))
            print(f"round {r + 1}: {backend:9s} {results[backend][-1]:.3f} requests/s", flush=True)
    ours, theirs = (statistics.median(results[b]) for b in ("hf_bridge", "in-tree"))
    print(f"\nllava_bench, {args.requests} requests x (1 image, {NEW_TOKENS} new tokens), median of {args.rounds}:")
    print(f"  hf_bridge        {ours:.3f} requests/s")
    print(f"  in-tree backend  {theirs:.3f} requests/s")
    print(f"  ratio hf_bridge / in-tree = {ours / theirs:.3f}")


if __name__ == "__main__":
    main()
