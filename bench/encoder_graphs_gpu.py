"""Encoder graphs on a real GPU: hf_bridge's own encoder code, captured, against eager.

    python bench/encoder_graphs_gpu.py --device cuda                  # real-size towers, fp32 and bf16
    python bench/encoder_graphs_gpu.py --device cuda --ttft           # + TTFT through vLLM (needs vLLM)
    python bench/encoder_graphs_gpu.py --device cpu --scale tiny      # dry pass (CI): frozen-graph stand-in

What is captured is what hf_bridge runs when vLLM's `EncoderCudaGraphManager` replays a
budget: `hf_bridge.features.encode` (the HF model's own `get_image_features`, rows per
embedding) over a static buffer of tiles. It needs only torch and transformers, so it
runs on a GPU machine where vLLM cannot be installed. Each tower is an HF model built
from a real-size vision config with random weights and a tiny text model: InternViT-300M
at 448 px, CLIP ViT-L/14 at 336 px, SigLIP-so400m at 224 and at 896 px, Fuyu's patch
projection, and Chameleon's VQ tokenizer (expected to be refused: its lookup works on
the host). For each tile count it captures once, replays on fresh tiles, compares with
eager, and times both. The manager's own side (budgets, packing, replay buffers,
post-processing) is exercised with the real manager in `tests/test_encoder_graphs.py`;
`--ttft` runs it end to end through vLLM's `cudagraph_mm_encoder` switch.

On the CPU the capture goes through hf_bridge's frozen graph, which refuses what CUDA
capture refuses; its timings say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).parent.parent))
from hf_bridge import features  # noqa: E402

TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
            head_dim=32, vocab_size=512)


@dataclass(frozen=True)
class Tower:
    name: str
    make: Callable[[bool], Any]
    """`make(tiny)` -> an HF `...ForConditionalGeneration` config."""
    tile: tuple[int, ...]
    field: str = "pixel_values"


def _internvl(tiny: bool):
    from transformers import InternVLConfig, InternVLVisionConfig, Qwen2Config

    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2) if tiny else {}
    return InternVLConfig(vision_config=InternVLVisionConfig(image_size=[448, 448], patch_size=[14, 14], **vision),
                          text_config=Qwen2Config(**{k: v for k, v in TEXT.items() if k != "head_dim"}), image_token_id=1)


def _clip(tiny: bool):
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig

    size = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2) if tiny else dict(
        hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16)
    return LlavaConfig(vision_config=CLIPVisionConfig(image_size=336, patch_size=14, **size),
                       text_config=LlamaConfig(**TEXT), image_token_id=1, vision_feature_select_strategy="default")


def _siglip(side: int):
    def make(tiny: bool):
        from transformers import GemmaConfig, PaliGemmaConfig, SiglipVisionConfig

        size = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2) if tiny else dict(
            hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16)
        return PaliGemmaConfig(vision_config=SiglipVisionConfig(image_size=side, patch_size=14, projection_dim=64, **size),
                               text_config=GemmaConfig(**TEXT), projection_dim=64, image_token_id=1)

    return make


def _fuyu(tiny: bool):
    from transformers import FuyuConfig

    text = {k: v for k, v in TEXT.items() if k not in ("head_dim", "num_key_value_heads")}
    return FuyuConfig(**text, text_config=dict(text, model_type="persimmon"), patch_size=30, image_size=300, image_token_id=1)


def _chameleon(tiny: bool):
    from transformers import ChameleonConfig, ChameleonVQVAEConfig

    from hf_bridge.zoo.specs import _CHAMELEON_IMAGE_TOKENS as image_tokens  # the zoo's VQ vocabulary names

    vocabulary = {name: 100 + i for i, name in enumerate(image_tokens)}
    return ChameleonConfig(**{k: v for k, v in TEXT.items() if k != "head_dim"}, vocabulary_map=vocabulary,
                           vq_config=ChameleonVQVAEConfig(embed_dim=32, num_embeddings=16, latent_channels=32, resolution=32,
                                                          base_channels=32, channel_multiplier=[1, 1, 1, 1],
                                                          num_res_blocks=1, attn_resolutions=[]))


TOWERS = {
    "internvit-300m-448": Tower("internvit-300m-448", _internvl, (3, 448, 448)),
    "clip-l-336": Tower("clip-l-336", _clip, (3, 336, 336)),
    "siglip-so400m-224": Tower("siglip-so400m-224", _siglip(224), (3, 224, 224)),
    "siglip-so400m-896": Tower("siglip-so400m-896", _siglip(896), (3, 896, 896)),
    "fuyu-patches": Tower("fuyu-patches", _fuyu, (30 * 30 * 3,), "image_patches"),
    "chameleon-vq": Tower("chameleon-vq", _chameleon, (3, 32, 32)),
}


def graph_api(device: str):
    """(graph class, graph context, refusal error, synchronize) for the device."""
    if device == "cuda":
        return torch.cuda.CUDAGraph, torch.cuda.graph, RuntimeError, torch.cuda.synchronize
    from hf_bridge.encoder_graphs.frozen import CaptureRefused, FrozenGraph, frozen_graph

    return FrozenGraph, frozen_graph, CaptureRefused, lambda: None


def warm_up(fn: Callable[[], Any], device: str) -> None:
    """On CUDA, run `fn` once on a side stream, as graph capture requires; the frozen
    graph needs no warm-up."""
    if device != "cuda":
        return
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)


def build(tower: Tower, device: str, dtype: torch.dtype, tiny: bool):
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(tower.make(tiny), dtype=dtype).to(device).eval()
    return model.model, model.config.get_text_config().hidden_size


def check_tower(tower: Tower, device: str, dtype: torch.dtype, tiles: list[int], repeats: int, tiny: bool) -> list[dict]:
    graph_cls, graph_ctx, refused, sync = graph_api(device)
    hf_model, hidden = build(tower, device, dtype, tiny)

    def encode(buffer):
        return features.encode(hf_model, "image", {tower.field: buffer}, hidden)

    rows = []
    for count in tiles:
        static = torch.zeros((count, *tower.tile), device=device, dtype=dtype)
        with torch.inference_mode():
            warm_up(lambda: encode(static), device)
            out = torch.empty_like(encode(static))
            graph = graph_cls()
            try:
                with graph_ctx(graph):
                    out.copy_(encode(static))
            except refused as exc:
                rows.append({"tower": tower.name, "tiles": count, "refused": str(exc).splitlines()[0][:120]})
                break
            fresh = torch.randn_like(static)
            static.copy_(fresh)
            graph.replay()
            sync()
            expected = encode(fresh)
        eager_s = timed(lambda: encode(static), sync, repeats)
        graph_s = timed(graph.replay, sync, repeats)
        rows.append({"tower": tower.name, "tiles": count, "eager_ms": eager_s * 1e3, "graph_ms": graph_s * 1e3,
                     "bitwise_equal": bool(torch.equal(out, expected)),
                     "max_abs_error": (out.float() - expected.float()).abs().max().item()})
    return rows


def timed(fn, sync, repeats: int) -> float:
    times = []
    with torch.inference_mode():
        for _ in range(repeats):
            sync()
            start = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def two_image_ttft(requests: int, **engine_kwargs) -> float:
    """Median seconds to the first token of fresh 2-image requests to the zoo's
    `internvl_bench`, through vLLM and hf_bridge (needs vLLM)."""
    from vllm import LLM, SamplingParams

    from hf_bridge.validate import parity
    from hf_bridge.zoo import build as build_zoo

    llm = LLM(model=str(build_zoo("internvl_bench")), model_impl="transformers", dtype="float32",
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
    parser.add_argument("--towers", nargs="+", choices=list(TOWERS), default=list(TOWERS))
    parser.add_argument("--dtypes", nargs="+", choices=["float32", "bfloat16"], default=["float32", "bfloat16"])
    parser.add_argument("--tiles", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--scale", choices=["real", "tiny"], default="real", help="tiny: 2-layer, 32-wide towers")
    parser.add_argument("--ttft", action="store_true", help="also time the first token through vLLM (GPU)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device here; use --device cpu --scale tiny for the dry pass")
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    print(f"hf_bridge encoder graphs on {args.device} ({args.scale} towers)")
    print(f"{'tower':<20} {'dtype':<9} {'tiles':>5} {'eager ms':>9} {'graph ms':>9} {'eager/graph':>11} {'bitwise':>8} {'max |diff|':>10}")
    for name in args.towers:
        for dtype_name in args.dtypes:
            for row in check_tower(TOWERS[name], args.device, getattr(torch, dtype_name), args.tiles, args.repeats,
                                   args.scale == "tiny"):
                head = f"{row['tower']:<20} {dtype_name:<9} {row['tiles']:>5}"
                if "refused" in row:
                    print(f"{head} capture refused: {row['refused']}")
                    continue
                print(f"{head} {row['eager_ms']:>9.2f} {row['graph_ms']:>9.2f} {row['eager_ms'] / row['graph_ms']:>11.2f} "
                      f"{str(row['bitwise_equal']):>8} {row['max_abs_error']:>10.1e}")
    if args.ttft:
        with contextlib.suppress(KeyboardInterrupt):
            off, on = ttft(False, 5), ttft(True, 5)
            print(f"TTFT 2 images: eager {off * 1e3:.1f} ms, graphs {on * 1e3:.1f} ms, ratio {off / on:.2f}")


if __name__ == "__main__":
    main()
