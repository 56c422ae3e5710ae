"""What serving a decoder's carried state costs through hf_bridge.

Models: the zoo's LLaVA over Qwen3-Next (`hf_bridge/zoo/backbones.py`: a Gated DeltaNet
layer, then attention, 64 wide, the Gated DeltaNet as wide as the attention), and the same
recipe with both layers attending (`layer_types` set to full attention: same width and
experts).
Each request is text, 32 new tokens, float32; prefix caching off for both (it is off for
every model with carried state). Printed, all measured in this run, each figure in a fresh
process:

1. requests/s through hf_bridge, compiled mode (vLLM's default) and eager, for both
   decoders, medians of `--rounds`, and the ratio state/attention: what the state layers
   cost beside the attention layer they stand in for;
2. requests/s of transformers' `generate` on the state model, one request after another;
3. the share of an in-process engine's time spent in the state layers' forward
   (`CarriedStateLayer.run`), split into transformers' module itself and what hf_bridge
   adds around it (gathering each step's states from their slots, the one-request
   caches, writing the states back).

The models are tiny, so the step's fixed costs dominate: this is the state layers' cost at
its largest relative to the model's compute.

    .venv/bin/python bench/carried_state.py [--requests 32] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from worker_process import report, run_worker

TEXT_TYPE = "qwen3_next"
LINEAR_AS_WIDE_AS_ATTENTION = dict(linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=32,
                                   linear_value_head_dim=32)
"""The Gated DeltaNet at the attention layer's 2 heads of 32 (the shrink leaves its default 32
value heads of 128, whose 2 MB recurrent state per request would dominate)."""
DECODERS = {"state": LINEAR_AS_WIDE_AS_ATTENTION,
            "attention": {**LINEAR_AS_WIDE_AS_ATTENTION, "layer_types": ["full_attention", "full_attention"]}}
"""Each decoder measured: its settings beside the backbone's own."""
NEW_TOKENS = 32
MAX_NUM_SEQS = 16


def prompts(count: int) -> list[str]:
    """Distinct prompts of a few lengths."""
    return [f"user: Tell me about the number {i} and the colour {'red green blue'.split()[i % 3]}.\nassistant:"
            for i in range(count)]


def engine_worker(model_dir: str, num_requests: int, compiled: bool, in_process: bool) -> dict:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    if in_process:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM, SamplingParams

    from hf_bridge.state_layers import CarriedStateLayer

    seconds = {"state layers": 0.0, "HF modules": 0.0}

    def timed(function, what: str):
        def call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[what] += time.perf_counter() - start

        return call

    if in_process:
        run = CarriedStateLayer.run
        CarriedStateLayer.run = timed(run, "state layers")  # a plain function: the layer comes as its first argument
    llm = LLM(model=model_dir, model_impl="transformers", dtype="float32", max_model_len=512, max_num_seqs=MAX_NUM_SEQS,
              enable_prefix_caching=False, enforce_eager=not compiled, seed=0)
    sampling = SamplingParams(max_tokens=NEW_TOKENS, min_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
    if in_process:  # the HF module's own forward, inside each state layer
        context = llm.llm_engine.vllm_config.compilation_config.static_forward_context
        for layer in context.values():
            if isinstance(layer, CarriedStateLayer):
                layer._forward = timed(layer._forward, "HF modules")
    llm.generate(prompts(4), sampling, use_tqdm=False)  # warm-up
    seconds.update({what: 0.0 for what in seconds})
    start = time.perf_counter()
    outputs = llm.generate(prompts(num_requests), sampling, use_tqdm=False)
    elapsed = time.perf_counter() - start
    assert all(len(o.outputs[0].token_ids) == NEW_TOKENS for o in outputs)
    return {"requests_per_s": num_requests / elapsed, "state_layer_share": seconds["state layers"] / elapsed,
            "hf_module_share": seconds["HF modules"] / elapsed}


def generate_worker(model_dir: str, num_requests: int) -> dict:
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    torch.set_num_threads(1)  # as vLLM's CPU worker binds one on this two-core box
    processor = AutoProcessor.from_pretrained(model_dir)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    texts = prompts(num_requests)
    with torch.no_grad():
        model.generate(**processor(text=texts[0], return_tensors="pt"), max_new_tokens=4, do_sample=False)
        start = time.perf_counter()
        for text in texts:
            model.generate(**processor(text=text, return_tensors="pt"), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                           do_sample=False)
    return {"requests_per_s": num_requests / (time.perf_counter() - start)}


def build(scratch: Path) -> dict[str, Path]:
    from hf_bridge.zoo.backbones import build_backbone_model

    return {name: build_backbone_model(TEXT_TYPE, scratch / name, settings=settings) for name, settings in DECODERS.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, model_dir, *rest = args.worker
        if kind == "engine":
            compiled, in_process = rest
            report(engine_worker(model_dir, args.requests, compiled == "compiled", in_process == "in-process"))
        else:
            report(generate_worker(model_dir, args.requests))
        return
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    me = Path(__file__)
    with tempfile.TemporaryDirectory() as scratch:
        dirs = build(Path(scratch))
        print(f"{args.requests} text requests x {NEW_TOKENS} new tokens, float32; LLaVA over {TEXT_TYPE}, its first "
              "layer a Gated DeltaNet ('state') or attention ('attention')\n")
        print(f"{'mode':<10} {'state req/s':>12} {'attention req/s':>16} {'state/attention':>16}")
        for mode in ("compiled", "eager"):
            measured = {name: [] for name in DECODERS}
            for _ in range(args.rounds):
                for name, model_dir in dirs.items():  # alternating: drift hits both alike
                    result = run_worker(me, ["--requests", str(args.requests), "--worker", "engine", str(model_dir), mode,
                                             "own-process"], env, f"{name} {mode}")
                    measured[name].append(result["requests_per_s"])
            state, attention = (statistics.median(measured[name]) for name in DECODERS)
            print(f"{mode:<10} {state:>12.2f} {attention:>16.2f} {state / attention:>16.2f}")
        hf = run_worker(me, ["--requests", str(args.requests), "--worker", "generate", str(dirs["state"])], env, "generate")
        print(f"\ntransformers generate, sequential, state model: {hf['requests_per_s']:.2f} req/s")
        profiled = run_worker(me, ["--requests", str(args.requests), "--worker", "engine", str(dirs["state"]), "compiled",
                                   "in-process"], env, "profile")
        print(f"in-process engine (compiled), state model: {profiled['requests_per_s']:.2f} req/s, "
              f"{100 * profiled['state_layer_share']:.0f}% of the time in the state layers' forward, of it "
              f"{100 * profiled['hf_module_share']:.0f}% in transformers' module itself and "
              f"{100 * (profiled['state_layer_share'] - profiled['hf_module_share']):.0f}% in hf_bridge's "
              "handling (gathering and writing back the requests' states, one-request caches)")


if __name__ == "__main__":
    main()
