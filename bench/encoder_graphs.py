"""Encoder graphs on this CPU: do they pay? Ratios measured side by side in one run.

1. Encoder latency of the zoo's `internvl_bench` tower (HF InternVL: 24 layers, 448 px
   tiles, patch 14, pixel shuffle 0.5, width 64) through hf_bridge's encoder code at 1,
   2, 4 and 8 tiles: eager vs a frozen graph (`hf_bridge.encoder_graphs.frozen`).
2. Time to first token of a 2-image request through vLLM, serving the zoo's
   `internvl_bench` with `HF_BRIDGE_CPU_ENCODER_GRAPHS=0` and `=1`, each engine in its
   own process, alternating, median of the rounds.

    .venv/bin/python bench/encoder_graphs.py [--rounds 3] [--skip-ttft]

A ratio above 1 means the graph path is faster.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from encoder_graphs_gpu import Tower, check_tower, two_image_ttft  # noqa: E402
from worker_process import report, run_worker  # noqa: E402


def _internvl_bench(tiny: bool):
    from transformers import InternVLConfig, InternVLVisionConfig, Qwen2Config

    from hf_bridge.zoo.specs import INTERNVL_BENCH_VISION

    text = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2, vocab_size=512)
    return InternVLConfig(vision_config=InternVLVisionConfig(**INTERNVL_BENCH_VISION), text_config=Qwen2Config(**text),
                          downsample_ratio=0.5, image_token_id=1)


TOWER = Tower("internvl_bench", _internvl_bench, (3, 448, 448))

TTFT_REQUESTS = 4


def ttft_worker() -> None:
    """One setting (from the environment), one process: median TTFT, printed."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    report({"ttft_s": two_image_ttft(TTFT_REQUESTS)})


def ttft(graphs: bool) -> float:
    env = dict(os.environ, HF_BRIDGE_CPU_ENCODER_GRAPHS="1" if graphs else "0")
    return run_worker(__file__, ["--ttft-worker"], env, "TTFT run")["ttft_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-ttft", action="store_true")
    parser.add_argument("--ttft-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ttft_worker:
        return ttft_worker()

    print("encoder latency, InternVL-shaped tower (24 layers, 448 px tiles, width 64), CPU")
    print(f"{'tiles':>5} {'eager ms':>10} {'graph ms':>10} {'eager/graph':>12}")
    for tiles in (1, 2, 4, 8):
        rounds = [check_tower(TOWER, "cpu", torch.float32, [tiles], args.repeats, tiny=False)[0] for _ in range(args.rounds)]
        assert all(r["bitwise_equal"] for r in rounds)
        eager = statistics.median(r["eager_ms"] for r in rounds)
        graph = statistics.median(r["graph_ms"] for r in rounds)
        print(f"{tiles:>5} {eager:>10.1f} {graph:>10.1f} {eager / graph:>12.2f}", flush=True)
    if args.skip_ttft:
        return
    results = {False: [], True: []}
    for _ in range(args.rounds):
        for graphs in (False, True):
            results[graphs].append(ttft(graphs))
    off, on = statistics.median(results[False]), statistics.median(results[True])
    print(f"TTFT, 2-image request via vLLM (internvl_bench): eager {off * 1e3:.0f} ms, "
          f"graphs {on * 1e3:.0f} ms, eager/graph {off / on:.2f}")


if __name__ == "__main__":
    main()
