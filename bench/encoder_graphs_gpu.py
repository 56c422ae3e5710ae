"""Encoder graphs on a real GPU: outputs against eager, and the time they save.

    python bench/encoder_graphs_gpu.py --device cuda            # check + time (needs a GPU)
    python bench/encoder_graphs_gpu.py --device cuda --ttft     # + time to first token via vLLM
    python bench/encoder_graphs_gpu.py --device cpu              # dry pass: the same code, with
                                                                # hf_bridge's frozen-graph stand-in

The encoder part needs only torch: an InternVL-shaped tower (`internvl_encoder.py`) is
captured once per tile budget (1, 2, 4, 8 tiles) in `torch.cuda.CUDAGraph`, replayed
on fresh tiles, compared with eager (`--atol`, TF32 off), and both are timed. `--ttft`
serves the zoo's `internvl_bench` through hf_bridge twice, with vLLM's own
`compilation_config={"cudagraph_mm_encoder": True}` and without, and times a 2-image
request's first token. On the CPU the capture runs through
`hf_bridge.encoder_graphs.frozen` instead of CUDA (CI runs this pass so the script
cannot rot); the CPU timings it prints say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from internvl_encoder import TILE, InternVLShapedEncoder  # noqa: E402


def graph_api(device: str):
    """(CUDAGraph class, graph context, synchronize) for the device."""
    if device == "cuda":
        return torch.cuda.CUDAGraph, torch.cuda.graph, torch.cuda.synchronize
    from hf_bridge.encoder_graphs.frozen import FrozenGraph, frozen_graph

    return FrozenGraph, frozen_graph, lambda: None


def capture(encoder, tiles: int, device: str):
    graph_cls, graph_ctx, sync = graph_api(device)
    static_in = torch.zeros(tiles, 3, TILE, TILE, device=device)
    with torch.inference_mode():
        if device == "cuda":  # warm up on a side stream, as CUDA graph capture requires
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                encoder(static_in)
            torch.cuda.current_stream().wait_stream(stream)
        static_out = torch.empty_like(encoder(static_in))
        graph = graph_cls()
        with graph_ctx(graph):
            static_out.copy_(encoder(static_in))
    sync()
    return graph, static_in, static_out


def timed(fn, sync, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def encoder_check(device: str, tile_counts: list[int], layers: int, repeats: int, atol: float) -> list[dict]:
    torch.manual_seed(0)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    encoder = InternVLShapedEncoder(layers=layers).to(device).eval()
    _, _, sync = graph_api(device)
    rows = []
    for tiles in tile_counts:
        graph, static_in, static_out = capture(encoder, tiles, device)
        fresh = torch.randn(tiles, 3, TILE, TILE, device=device)
        static_in.copy_(fresh)
        graph.replay()
        with torch.inference_mode():
            expected = encoder(fresh)
        error = (static_out - expected).abs().max().item()
        assert error <= atol, f"{tiles} tiles: graph output differs from eager by {error:.2e} > {atol:.0e}"

        def eager():
            with torch.inference_mode():
                encoder(static_in)

        def replay():
            static_in.copy_(fresh)
            graph.replay()

        eager_s, graph_s = timed(eager, sync, repeats), timed(replay, sync, repeats)
        rows.append({"tiles": tiles, "eager_ms": eager_s * 1e3, "graph_ms": graph_s * 1e3, "max_abs_error": error})
    return rows


def two_image_ttft(requests: int, **engine_kwargs) -> float:
    """Median seconds to the first token of fresh 2-image requests to the zoo's
    `internvl_bench`, on an engine built with `engine_kwargs`; the first request warms
    up (and, with graphs, captures them)."""
    from vllm import LLM, SamplingParams

    from hf_bridge.validate import parity
    from hf_bridge.zoo import build

    llm = LLM(model=str(build("internvl_bench")), model_impl="transformers", dtype="float32",
              max_model_len=4096, limit_mm_per_prompt={"image": 2}, seed=0, **engine_kwargs)
    prompt = "user: <IMG_CONTEXT><IMG_CONTEXT>Compare the two images.\nassistant:"
    params = SamplingParams(max_tokens=1, temperature=0.0)
    times = []
    for i in range(requests + 1):
        images = [parity.test_image(896, 448, seed=100 + 2 * i), parity.test_image(448, 448, seed=101 + 2 * i)]
        start = time.perf_counter()
        llm.generate([{"prompt": prompt, "multi_modal_data": {"image": images}}], params, use_tqdm=False)
        if i:
            times.append(time.perf_counter() - start)
    del llm
    return statistics.median(times)


def ttft(graphs: bool, requests: int) -> float:
    """One engine per setting: vLLM's own switch turns encoder graphs on (GPU)."""
    return two_image_ttft(requests, compilation_config={"cudagraph_mm_encoder": True} if graphs else {})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--tiles", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--atol", type=float, default=1e-4, help="float32, TF32 off: kernels match eager's")
    parser.add_argument("--ttft", action="store_true", help="also time the first token through vLLM (GPU)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device here; use --device cpu for the dry pass")
    print(f"encoder graphs on {args.device} ({args.layers} layers, {TILE} px tiles)")
    print(f"{'tiles':>5} {'eager ms':>10} {'graph ms':>10} {'eager/graph':>12} {'max |diff|':>11}")
    for row in encoder_check(args.device, args.tiles, args.layers, args.repeats, args.atol):
        print(f"{row['tiles']:>5} {row['eager_ms']:>10.2f} {row['graph_ms']:>10.2f} "
              f"{row['eager_ms'] / row['graph_ms']:>12.2f} {row['max_abs_error']:>11.1e}")
    if args.ttft:
        with contextlib.suppress(KeyboardInterrupt):
            off, on = ttft(False, 5), ttft(True, 5)
            print(f"TTFT 2 images: eager {off * 1e3:.1f} ms, graphs {on * 1e3:.1f} ms, ratio {off / on:.2f}")


if __name__ == "__main__":
    main()
