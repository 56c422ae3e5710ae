"""vLLM's processor cache through hf_bridge: a hit against a miss, side by side in one run.

For each model, one image item goes through vLLM's multimodal processor (hf_bridge's, as
the engine's front end runs it, with the front end's processor cache): a *miss* is an
image never seen before (the HF processor runs), a *hit* the same image again (hashing,
cache lookup, prompt update only). Images are `--size` pixels (default a 1024 x 768
photo; the processors resize and tile it as they would a user's), given two ways:

- **served**: JPEG bytes decoded by vLLM's own `ImageMediaIO`, as the OpenAI server
  decodes an `image_url`; vLLM hashes the encoded bytes it keeps beside the image. The
  decode happens once per request before the processor, hit or miss, and is printed
  on its own line, outside both figures.
- **PIL**: a `PIL.Image` as `LLM.generate` takes it offline; vLLM hashes its pixels.
- **PIL+uuid**: the same, with the caller's own identifier for it (`multi_modal_uuids`
  offline, `uuid` beside an `image_url`), which vLLM keys its caches by instead of
  hashing the pixels.

The zoo's processors are shrunk for the tests (Qwen2-VL's to 112 x 112 pixels), which
makes a miss cheaper than any real checkpoint's. `--sizes default` runs each model
with its image processor's size fields (`SIZE_FIELDS`) at transformers' defaults, the
sizes real checkpoints are configured near (Qwen2-VL: up to 1280 28-pixel patches;
Idefics3: 364-pixel tiles; InternVL: up to 12 tiles of 384), in a copy of the checkpoint.

Each backend runs in its own process (the plugin registers at process start;
`HF_BRIDGE_DISABLE=1` gives the in-tree backend), with tcmalloc preloaded where
installed, as the server runs (`hf_bridge.server.preload_tcmalloc`); medians of
`--repeats` fresh images and as many repeats.

    .venv/bin/python bench/processor_cache.py [--models llava_bench internvl qwen2_vl idefics3] [--repeats 15]
        [--size 1024 768] [--sizes zoo default]

A ratio miss/hit of at least 10 is the target.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from worker_process import report, run_worker

INPUTS = ("served", "PIL", "PIL+uuid")
JPEG_QUALITY = 90
SIZES = ("zoo", "default")
SIZE_FIELDS = ("size", "crop_size", "max_image_size", "max_patches", "min_pixels", "max_pixels")
"""The image-processor fields that set how many pixels (tiles, patches) an image becomes."""


def jpeg_bytes(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=JPEG_QUALITY)
    return buffer.getvalue()


def at_default_sizes(model_dir: Path, into: Path) -> Path:
    """A copy of `model_dir` (weights linked) whose image processor has `SIZE_FIELDS` at
    its class's defaults; the rest of the processor stays the zoo's."""
    from transformers import AutoProcessor

    from hf_bridge.zoo.variant import variant

    defaults = type(AutoProcessor.from_pretrained(model_dir).image_processor)()
    sizes = {name: getattr(defaults, name) for name in SIZE_FIELDS if hasattr(defaults, name)}
    return variant(model_dir, into, image_processor=json.loads(json.dumps(sizes, default=dict)))


def worker(model: str, repeats: int, size: tuple[int, int], sizes: str) -> None:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    from vllm.multimodal.media.image import ImageMediaIO

    from hf_bridge.inspect import build_processor, processor_cache
    from hf_bridge.validate import parity
    from hf_bridge.zoo import build

    model_dir = build(model)
    if sizes == "default":
        scratch = tempfile.TemporaryDirectory()  # removed when this worker exits
        model_dir = at_default_sizes(model_dir, Path(scratch.name) / model)
    processor = build_processor(model_dir)
    cache = processor_cache(processor)
    cache.make_stats(delta=True)
    prompt = parity.prompt_text(processor.info.get_hf_processor(), parity.Case("x", num_images=1))
    media_io = ImageMediaIO(image_mode="RGB")  # the server's decoder for image_url items

    def timed(image, uuids, hit: bool) -> float:
        """What the engine's front end runs for a request: parse its items, then apply;
        checked against the cache's own count to be the `hit` or miss it is timed as."""
        start = time.perf_counter()
        processor(prompt, processor.info.parse_mm_data({"image": image}), uuids, hf_processor_mm_kwargs={}, cache=cache)
        elapsed = time.perf_counter() - start
        counted = cache.make_stats(delta=True)
        if (counted.hits, counted.total) != (int(hit), 1):
            raise RuntimeError(f"timed as a {'hit' if hit else 'miss'}, the processor cache counted {counted}")
        return elapsed

    def served(seed: int):
        data = jpeg_bytes(parity.test_image(*size, seed=seed))
        start = time.perf_counter()
        image = media_io.load_bytes(data)
        return image, None, {"decode_ms": (time.perf_counter() - start) * 1e3, "jpeg_kb": len(data) / 1024}

    def offline(seed: int):
        return parity.test_image(*size, seed=seed), None, {}

    def offline_with_uuid(seed: int):
        return parity.test_image(*size, seed=seed), {"image": [f"photo-{seed}"]}, {}

    result = {}
    for name, make in zip(INPUTS, (served, offline, offline_with_uuid)):
        timed(*make(10_000 + INPUTS.index(name))[:2], hit=False)  # warm-up
        misses, hits, extras = [], [], []
        for i in range(repeats):
            image, uuids, extra = make(1_000 * INPUTS.index(name) + i)
            misses.append(timed(image, uuids, hit=False))
            hits.append(timed(image, uuids, hit=True))
            extras.append(extra)
        result[name] = {"miss_ms": statistics.median(misses) * 1e3, "hit_ms": statistics.median(hits) * 1e3,
                        **{key: statistics.median(e[key] for e in extras) for key in extras[0]}}
    report(result)


def measure(model: str, repeats: int, size: tuple[int, int], sizes: str, in_tree: bool) -> dict:
    from hf_bridge.server import preload_tcmalloc

    env = preload_tcmalloc(dict(os.environ, HF_BRIDGE_DISABLE="1" if in_tree else "0"))
    args = ["--worker", model, "--repeats", str(repeats), "--size", *map(str, size), "--sizes", sizes]
    return run_worker(__file__, args, env, f"{model}: worker")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["llava_bench", "internvl", "qwen2_vl", "idefics3"])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--size", type=int, nargs=2, default=[1024, 768], metavar=("WIDTH", "HEIGHT"))
    parser.add_argument("--sizes", nargs="+", choices=SIZES, default=list(SIZES),
                        help="the image processor's sizes: the zoo's (shrunk) and/or transformers' defaults")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = tuple(args.size)
    if args.worker:
        return worker(args.worker, args.repeats, size, args.sizes[0])
    print(f"one {size[0]}x{size[1]} image through vLLM's multimodal processor and its processor cache (medians of {args.repeats})")
    print(f"{'model':<14} {'sizes':<8} {'backend':<9} {'input':<8} {'miss ms':>9} {'hit ms':>8} {'miss/hit':>9}")
    decodes = []
    for sizes in args.sizes:
        for model in args.models:
            for in_tree in (False, True):
                result = measure(model, args.repeats, size, sizes, in_tree)
                backend = "in-tree" if in_tree else "hf_bridge"
                for name in INPUTS:
                    r = result[name]
                    print(f"{model:<14} {sizes:<8} {backend:<9} {name:<8} {r['miss_ms']:>9.2f} {r['hit_ms']:>8.2f} "
                          f"{r['miss_ms'] / r['hit_ms']:>9.1f}", flush=True)
                decodes.append(result["served"])
    print(f"served images: JPEG (quality {JPEG_QUALITY}) of {statistics.median(d['jpeg_kb'] for d in decodes):.0f} KiB, "
          f"decoded by vLLM's ImageMediaIO in {statistics.median(d['decode_ms'] for d in decodes):.2f} ms before the processor, "
          "hit or miss (not in the figures above)")


if __name__ == "__main__":
    main()
