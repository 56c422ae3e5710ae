"""Requests/s of hf_bridge and vLLM's in-tree backend against the machine's compute limit.

Model: the zoo's `llava_bench` (CLIP at 224 px, a 512-wide 6-layer Llama text model);
each request carries one image and generates 32 tokens, float32. Printed, all measured in
this run:

1. **Throughput**, compiled mode (vLLM's default) and eager, each backend in its own
   process (the plugin registers at process start; `HF_BRIDGE_DISABLE=1` gives the
   in-tree backend), alternating, medians of `--rounds`; the ratios. `in-process` is
   compiled mode with the engine in the caller's process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`,
   as in a notebook or an offline script), which binds no threads: torch's default, one
   per core.
2. **The compute limit**: the FLOPs of one request (transformers' model under torch's
   `FlopCounterMode`: the image, the prompt, 32 decoding steps), over the fp32 matmul
   rate at the workload's shapes with each configuration's thread count (vLLM's engine
   process: the worker's; in-process: every core); requests/s at 100%.
3. **Time to first token** of a two-image request, alone on a warm engine, both backends.
4. **A profile** of where a request's time goes (in-process engine, eager and compiled):
   front end (processor, hashing: `add_request`), encoder (`embed_multimodal`), prefill
   and decode (the model's forward on steps with and without prompt tokens), logits,
   sampling, and the rest (scheduling, input preparation, detokenization); within the
   forwards, the time in vLLM's CPU matmul and attention kernels (torch profiler).

Every engine process preloads tcmalloc where installed, as vLLM's CPU guide asks
(`hf_bridge.server.preload_tcmalloc`).

    .venv/bin/python bench/throughput.py [--requests 32] [--rounds 3] [--modes compiled eager in-process]
        [--max-num-batched-tokens N]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections import defaultdict

from worker_process import report, run_worker

MODEL = "llava_bench"
NEW_TOKENS = 32
MAX_NUM_SEQS = 16
PROMPT = "user: <image>Describe the image.\nassistant:"
TWO_IMAGE_PROMPT = "user: <image><image>Compare the two images.\nassistant:"


def engine(compiled: bool, token_budget: int = 0):
    """`token_budget`: vLLM's `max_num_batched_tokens` (0: vLLM's default, 4096 offline on CPU)."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    from vllm import LLM

    from hf_bridge.zoo import build

    return LLM(model=str(build(MODEL)), model_impl="transformers", dtype="float32", max_model_len=1024,
               max_num_seqs=MAX_NUM_SEQS, limit_mm_per_prompt={"image": 2}, seed=0, enforce_eager=not compiled,
               max_num_batched_tokens=token_budget or None)


def requests(count: int, seed: int) -> list[dict]:
    from hf_bridge.validate import parity

    return [{"prompt": PROMPT, "multi_modal_data": {"image": parity.test_image(224 + 8 * (i % 4), 224 + i % 7, seed=seed + i)}}
            for i in range(count)]


def sampling():
    from vllm import SamplingParams

    return SamplingParams(max_tokens=NEW_TOKENS, min_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)


MODES = {"compiled": {"compiled": True, "in_process": False}, "eager": {"compiled": False, "in_process": False},
         "in-process": {"compiled": True, "in_process": True}}
"""Each measured configuration: vLLM's compile mode, and whether the engine runs in the
caller's process (no engine or worker process, no thread binding)."""


def throughput_worker(num_requests: int, compiled: bool, token_budget: int) -> dict:
    """Requests/s (fresh images: no cache reuse), then a two-image request's time to first token."""
    import torch
    from hf_bridge.validate import parity
    from vllm import SamplingParams

    llm = engine(compiled, token_budget)
    llm.generate(requests(4, seed=0), sampling(), use_tqdm=False)  # warm-up
    start = time.perf_counter()
    outputs = llm.generate(requests(num_requests, seed=1000), sampling(), use_tqdm=False)
    elapsed = time.perf_counter() - start
    assert all(len(o.outputs[0].token_ids) == NEW_TOKENS for o in outputs)
    ttfts = []
    for i in range(5):
        images = [parity.test_image(224, 224, seed=5000 + 2 * i), parity.test_image(232, 216, seed=5001 + 2 * i)]
        start = time.perf_counter()
        llm.generate({"prompt": TWO_IMAGE_PROMPT, "multi_modal_data": {"image": images}},
                     SamplingParams(max_tokens=1, temperature=0.0), use_tqdm=False)
        ttfts.append(time.perf_counter() - start)
    return {"requests_per_s": num_requests / elapsed, "two_image_ttft_s": statistics.median(ttfts),
            "threads": torch.get_num_threads()}  # the computing threads when in-process


KERNELS = {"_C::onednn_mm": "matmul (vLLM's oneDNN linear)", "_C::cpu_attention_with_kv_cache": "attention (vLLM's CPU kernel)"}
"""vLLM's CPU kernels a forward's time is split into (torch profiler names); the rest of a
stage is norms, rotary, activations, cache writes and dispatch."""


class Profile:
    """Seconds spent in each stage of the engine, by wrapping the methods that run them;
    each stage is also a profiler range, so `kernels` can split it by vLLM's kernels."""

    def __init__(self, llm):
        self.seconds: dict[str, float] = defaultdict(float)
        runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
        model = runner.model
        self._time(llm.llm_engine, "add_request", "front end (processor, hashing)")
        self._time(model, "embed_multimodal", "encoder")
        self._time(model, "compute_logits", "logits")
        self._time(runner.sampler, "forward", "sampling")
        forward = model.forward

        def timed_forward(input_ids=None, positions=None, *args, **kwargs):
            tokens = (positions if input_ids is None else input_ids).shape[-1]
            stage = "decode (forward)" if tokens <= MAX_NUM_SEQS else "prefill (forward)"
            with self._timing(stage):
                return forward(input_ids, positions, *args, **kwargs)

        model.forward = timed_forward

    def _time(self, owner, name: str, stage: str) -> None:
        method = getattr(owner, name)

        def timed(*args, **kwargs):
            with self._timing(stage):
                return method(*args, **kwargs)

        setattr(owner, name, timed)

    @contextlib.contextmanager
    def _timing(self, stage: str):
        import torch

        start = time.perf_counter()
        try:
            with torch.profiler.record_function(stage):
                yield
        finally:
            self.seconds[stage] += time.perf_counter() - start

    def kernels(self, profiler) -> dict[str, dict[str, float]]:
        """Seconds of each of `KERNELS` per stage, from a torch profiler that ran around the stages."""
        found: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for event in profiler.events():
            kernel = KERNELS.get(event.name)
            stage = event.cpu_parent
            while kernel and stage is not None and stage.name not in self.seconds:
                stage = stage.cpu_parent
            if kernel and stage is not None:
                found[stage.name][kernel] += event.self_cpu_time_total / 1e6
        return {stage: dict(kernels) for stage, kernels in found.items()}


def profile_worker(num_requests: int, compiled: bool, token_budget: int) -> dict:
    import torch

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the worker's model in this process
    llm = engine(compiled, token_budget)
    threads = torch.get_num_threads()
    llm.generate(requests(4, seed=0), sampling(), use_tqdm=False)
    profile = Profile(llm)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        start = time.perf_counter()
        llm.generate(requests(num_requests, seed=2000), sampling(), use_tqdm=False)
        wall = time.perf_counter() - start
    stages = dict(profile.seconds)
    kernels = profile.kernels(profiler)
    stages["rest (scheduling, inputs, detokenization)"] = wall - sum(stages.values())
    return {"wall_s": wall, "stages": stages, "kernels": kernels, "threads": threads}


def flops_worker() -> dict:
    """FLOPs of one request in transformers: the prompt with its image, then the decoding
    steps, counted by torch's FlopCounterMode (matmuls, convolutions, attention). The
    prompt step is `generate`'s first, which (like vLLM) computes logits for the last
    position only; a plain forward would count the head over every prompt position."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from hf_bridge.validate import parity
    from hf_bridge.zoo import build

    model_dir = build(MODEL)
    processor = AutoProcessor.from_pretrained(model_dir)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    inputs = processor(text=PROMPT, images=[parity.test_image(224, 224, seed=1)], return_tensors="pt")
    with torch.no_grad():
        with FlopCounterMode(display=False) as prefill:
            model.generate(**inputs, max_new_tokens=1, do_sample=False)
        with FlopCounterMode(display=False) as whole:
            model.generate(**inputs, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    text = model.config.text_config
    return {"prefill_flops": prefill.get_total_flops(), "request_flops": whole.get_total_flops(),
            "prompt_tokens": int(inputs["input_ids"].shape[1]), "hidden": text.hidden_size,
            "intermediate": text.intermediate_size}


def matmul_rate(m: int, k: int, n: int, threads: int, seconds: float = 0.5, repeats: int = 5) -> float:
    """FLOP/s of an fp32 (m, k) @ (k, n) matmul on `threads` threads: the best of `repeats`
    timings (a ceiling: a moment of interference must not lower it)."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(m, k), torch.randn(k, n)
    for _ in range(5):
        a @ b
    rates = []
    for _ in range(repeats):
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            a @ b
            count += 1
        rates.append(2 * m * k * n * count / (time.perf_counter() - start))
    return max(rates)


def worker_threads() -> int:
    """The OpenMP threads vLLM's CPU worker binds: one per core, less the core it reserves
    for the front end (`reserve_cpu_num`, 1 by default) where there is more than one."""
    cores = len(os.sched_getaffinity(0))
    return max(1, cores - 1) if cores > 1 else 1


def mode_threads(mode: str, runs: list[dict]) -> int:
    """The threads a configuration computes on: in-process, those its runs reported; else the worker's."""
    if MODES[mode]["in_process"]:
        (threads,) = {r["threads"] for r in runs}
        return threads
    return worker_threads()


def run(kind: str, *args, in_tree: bool = False, in_process: bool = False) -> dict:
    from hf_bridge.server import preload_tcmalloc

    env = preload_tcmalloc(dict(os.environ, HF_BRIDGE_DISABLE="1" if in_tree else "0"))
    if in_process:
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if kind == "profile" and not in_process:  # an in-process engine binds no threads: give it the worker's count
        env["OMP_NUM_THREADS"] = str(worker_threads())
    return run_worker(__file__, ["--worker", kind, *map(str, args)], env, f"{kind} ({'in-tree' if in_tree else 'hf_bridge'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES),
                        help="the first is the one the time to first token and the rates are given for")
    parser.add_argument("--max-num-batched-tokens", type=int, default=0, dest="token_budget",
                        help="vLLM's token budget per step, both backends (default: vLLM's, 4096 offline on CPU)")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, *rest = args.worker
        if kind == "flops":
            report(flops_worker())
        else:
            worker = throughput_worker if kind == "throughput" else profile_worker
            report(worker(int(rest[0]), MODES[rest[1]]["compiled"], int(rest[2])))
        return
    from hf_bridge.zoo import build

    build(MODEL)
    backends = ("hf_bridge", "in-tree")
    runs: dict[tuple[str, str], list[dict]] = defaultdict(list)
    modes, first = args.modes, args.modes[0]
    for mode in modes:
        for r in range(args.rounds):
            for backend in (backends if r % 2 == 0 else backends[::-1]):
                in_tree = backend == "in-tree"
                runs[mode, backend].append(run("throughput", args.requests, mode, args.token_budget, in_tree=in_tree,
                                               in_process=MODES[mode]["in_process"]))
                print(f"{mode:8s} round {r + 1}: {backend:9s} {runs[mode, backend][-1]['requests_per_s']:.3f} requests/s", flush=True)

    counted = run("flops")
    prompt, hidden, inter = counted["prompt_tokens"], counted["hidden"], counted["intermediate"]
    prefill, total = counted["prefill_flops"], counted["request_flops"]
    threads = {mode: mode_threads(mode, runs[mode, "hf_bridge"] + runs[mode, "in-tree"]) for mode in modes}
    limits: dict[int, dict[str, float]] = {}
    for count in sorted(set(threads.values()), key=lambda t: t != worker_threads()):  # the worker's first
        prefill_rate = matmul_rate(prompt, hidden, inter, count)
        decode_rate = matmul_rate(MAX_NUM_SEQS, hidden, inter, count)
        # each part of the request at the rate of its shapes: prompt-sized rows, a batch of decode rows
        limit_s = prefill / prefill_rate + (total - prefill) / decode_rate
        limits[count] = {"prefill_rate": prefill_rate, "decode_rate": decode_rate, "seconds": limit_s, "rps": 1 / limit_s}

    def median(mode: str, backend: str, key: str = "requests_per_s") -> float:
        return statistics.median(r[key] for r in runs[mode, backend])

    budget = f"max_num_batched_tokens={args.token_budget}" if args.token_budget else "vLLM's default token budget"
    print(f"\n{MODEL}, {args.requests} requests x (1 image, {NEW_TOKENS} new tokens), float32, {budget}, "
          f"medians of {args.rounds}:")
    for count, limit in limits.items():
        whose = "the worker's" if count == worker_threads() else "the in-process engine's"
        print(f"  compute limit: {total / 1e9:.2f} GFLOP per request ({prefill / 1e9:.2f} image + prompt, "
              f"{(total - prefill) / 1e9:.2f} decoding), fp32 matmul on {count} thread(s) ({whose}) at "
              f"{limit['prefill_rate'] / 1e9:.1f} GFLOP/s ({prompt}x{hidden}x{inter}) and {limit['decode_rate'] / 1e9:.1f} GFLOP/s "
              f"({MAX_NUM_SEQS}x{hidden}x{inter}) -> {limit['rps']:.2f} requests/s")
    print(f"  {'mode':11s} {'threads':>7s} {'hf_bridge':>10s} {'in-tree':>10s} {'hf/in-tree':>11s} {'hf/limit':>9s} {'in-tree/limit':>14s}")
    for mode in modes:
        ours, theirs, limit = median(mode, "hf_bridge"), median(mode, "in-tree"), limits[threads[mode]]["rps"]
        print(f"  {mode:11s} {threads[mode]:7d} {ours:10.3f} {theirs:10.3f} {ours / theirs:11.3f} {ours / limit:9.1%} {theirs / limit:14.1%}")
    ttft_ours, ttft_theirs = median(first, "hf_bridge", "two_image_ttft_s"), median(first, "in-tree", "two_image_ttft_s")
    print(f"  two-image request, time to first token ({first}, alone): hf_bridge {ttft_ours * 1e3:.1f} ms, "
          f"in-tree {ttft_theirs * 1e3:.1f} ms; in-tree / hf_bridge = {ttft_theirs / ttft_ours:.3f}")

    profiles = {mode: run("profile", args.requests, mode, args.token_budget, in_process=MODES[mode]["in_process"])
                for mode in modes}
    on = ", ".join(f"{mode} {p['threads']}" for mode, p in profiles.items())
    print(f"\nprofile, hf_bridge, {args.requests} requests, in-process engine (share of wall time; threads: {on}):")
    stages = list(profiles[first]["stages"])
    print(f"  {'stage':44s} " + " ".join(f"{mode:>14s}" for mode in modes))

    def row(label: str, seconds: list[float]) -> None:
        cells = [f"{s * 1e3 / args.requests:7.1f} ms {s / p['wall_s']:5.1%}" for s, p in zip(seconds, profiles.values())]
        print(f"  {label:44s} " + " ".join(f"{cell:>14s}" for cell in cells))

    for stage in stages:
        row(stage, [p["stages"].get(stage, 0.0) for p in profiles.values()])
        if stage.endswith("(forward)"):
            for kernel in KERNELS.values():
                row(f"  {kernel}", [p["kernels"].get(stage, {}).get(kernel, 0.0) for p in profiles.values()])
    print(f"  {'wall per request':44s} " + " ".join(f"{p['wall_s'] * 1e3 / args.requests:7.1f} ms {'':5s}" for p in profiles.values()))
    profile = profiles[first]
    limit = limits[threads[first]]
    limit_s, prefill_rate, decode_rate = limit["seconds"], limit["prefill_rate"], limit["decode_rate"]
    print(f"  on {profile['threads']} thread(s); per request 1/limit = {limit_s * 1e3:.1f} ms of matmul at the measured rates; "
          f"{first}, the forward computes at {prefill * args.requests / profile['stages']['prefill (forward)'] / 1e9:.1f} GFLOP/s "
          f"in prefill steps ({prefill_rate / 1e9:.1f} matmul) and {(total - prefill) * args.requests / profile['stages']['decode (forward)'] / 1e9:.1f} "
          f"GFLOP/s in decode steps ({decode_rate / 1e9:.1f} matmul)")


if __name__ == "__main__":
    main()
