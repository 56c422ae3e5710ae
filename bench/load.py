"""The OpenAI-compatible server under load: hf_bridge and vLLM's in-tree backend, one after the other.

Each round sends `--requests` chat requests at once: one image, two images of different
sizes, a video, or text only (a quarter each, the video's share given to two images when
the model takes no video); a quarter of the media items repeat an earlier item of the
round (the processor cache hits); half of the requests stream. Every round brings new
images, so the caches keep filling and evicting (`--mm-processor-cache-gb`, default sized
so that one round fills it). One warm-up round of the same mix (its own items) comes
first and is not measured: the allocators reach their working set there (README). After the rounds the first and last rounds' requests
run again one at a time, and each output must equal its concurrent one.

Prints, per backend: requests/s, p50/p99 time to first token (streaming requests), output
mismatches, and the server's resident memory (server plus engine core) after each round.

    .venv/bin/python bench/load.py [--model qwen2_vl] [--requests 256] [--rounds 5]
                                   [--backends hf_bridge in-tree] [--json results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

NEW_TOKENS = 16
REPEAT_SHARE = 4
"""One media item in REPEAT_SHARE repeats an earlier item of the same round."""
IMAGE_SIZES = [(224, 224), (320, 240), (160, 288), (448, 336), (256, 192), (200, 360)]
VIDEO_FRAMES = 4
KINDS = ("one_image", "two_images", "video", "text")
CACHE_HITS = "vllm:mm_cache_hits_total"
"""vLLM's processor-cache hit counter, read off the server's /metrics around each round."""


@dataclass
class LoadRequest:
    index: int
    kind: str
    stream: bool
    content: list[dict]
    repeated_items: int = 0

    @property
    def messages(self) -> list[dict]:
        return [{"role": "user", "content": self.content}]


@dataclass
class Outcome:
    text: str
    finish_reason: str
    ttft_s: float | None
    latency_s: float
    error: str = ""


@dataclass
class RoundResult:
    outcomes: list[Outcome]
    wall_s: float
    resident_bytes: int
    requests: list[LoadRequest] = field(repr=False, default_factory=list)
    cache_hits: float = 0.0

    @property
    def requests_per_s(self) -> float:
        return len(self.outcomes) / self.wall_s

    def ttft_quantiles(self) -> tuple[float, float]:
        ttfts = sorted(o.ttft_s for o in self.outcomes if o.ttft_s is not None)
        return statistics.median(ttfts), ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))]


def build_round(round_index: int, num_requests: int, has_video: bool) -> list[LoadRequest]:
    """The requests of one round: new items (seeded by the round), a quarter of them repeats."""
    from hf_bridge.server import image_data_url, video_data_url
    from hf_bridge.validate import parity

    seed = 10_000 * (round_index + 1)
    issued: list[dict] = []
    counter = 0

    def item(make) -> tuple[dict, bool]:
        nonlocal counter
        counter += 1
        if issued and counter % REPEAT_SHARE == 0:
            return issued[(counter * 7) % len(issued)], True
        part = make(seed + counter)
        issued.append(part)
        return part, False

    def image_part(s: int) -> dict:
        width, height = IMAGE_SIZES[s % len(IMAGE_SIZES)]
        return {"type": "image_url", "image_url": {"url": image_data_url(parity.test_image(width, height, seed=s))}}

    def video_part(s: int) -> dict:
        return {"type": "video_url", "video_url": {"url": video_data_url(parity.test_video(VIDEO_FRAMES, 112, 112, seed=s))}}

    requests = []
    for i in range(num_requests):
        kind = KINDS[i % len(KINDS)]
        if kind == "video" and not has_video:
            kind = "two_images"
        count = {"one_image": 1, "two_images": 2, "video": 1, "text": 0}[kind]
        made = [item(video_part if kind == "video" else image_part) for _ in range(count)]
        # two images of one request are kept distinct (and of different sizes)
        if kind == "two_images" and made[0][0] is made[1][0]:
            made[1] = (image_part(seed + 5_000 + i), False)
        text = {"type": "text", "text": f"Request {i} of round {round_index}: what do you see?"}
        requests.append(LoadRequest(index=i, kind=kind, stream=(i // len(KINDS)) % 2 == 1,
                                    content=[part for part, _ in made] + [text],
                                    repeated_items=sum(repeated for _, repeated in made)))
    return requests


async def send(client, model: str, request: LoadRequest) -> Outcome:
    params = dict(model=model, messages=request.messages, temperature=0.0, max_tokens=NEW_TOKENS,
                  extra_body={"min_tokens": NEW_TOKENS, "ignore_eos": True})
    start = time.perf_counter()
    try:
        if not request.stream:
            reply = await client.chat.completions.create(**params)
            choice = reply.choices[0]
            return Outcome(choice.message.content, choice.finish_reason, None, time.perf_counter() - start)
        pieces, ttft, finish = [], None, ""
        async for chunk in await client.chat.completions.create(stream=True, **params):
            for choice in chunk.choices:
                if choice.delta.content:
                    ttft = ttft if ttft is not None else time.perf_counter() - start
                    pieces.append(choice.delta.content)
                finish = choice.finish_reason or finish
        return Outcome("".join(pieces), finish, ttft, time.perf_counter() - start)
    except Exception as error:  # reported per request: a failed request must show, not stop the round
        return Outcome("", "", None, time.perf_counter() - start, error=f"{type(error).__name__}: {error}")


async def run_requests(base_url: str, model: str, requests: list[LoadRequest], concurrent: bool) -> tuple[list[Outcome], float]:
    import httpx
    from openai import AsyncOpenAI

    limits = httpx.Limits(max_connections=len(requests) + 8, max_keepalive_connections=len(requests) + 8)
    async with AsyncOpenAI(base_url=base_url, api_key="unused", timeout=1800,
                           http_client=httpx.AsyncClient(limits=limits, timeout=1800)) as client:
        start = time.perf_counter()
        if concurrent:
            outcomes = await asyncio.gather(*(send(client, model, r) for r in requests))
        else:
            outcomes = [await send(client, model, r) for r in requests]
        return list(outcomes), time.perf_counter() - start


def problem(outcome: Outcome) -> str:
    """Why a request did not complete as asked (all its tokens, ended by the length limit)."""
    if outcome.error:
        return outcome.error
    if outcome.finish_reason != "length":
        return f"finished {outcome.finish_reason!r}, not after its {NEW_TOKENS} tokens"
    return ""


def served_model(model_dir: Path) -> str:
    return model_dir.name


def mismatches(concurrent: list[Outcome], solo: list[Outcome], requests: list[LoadRequest]) -> list[str]:
    return [f"request {r.index} ({r.kind}, {'stream' if r.stream else 'whole'}): {c.text!r} concurrent, {s.text!r} alone"
            for r, c, s in zip(requests, concurrent, solo) if (c.text, c.finish_reason) != (s.text, s.finish_reason)]


def run_backend(backend: str, model_dir: Path, num_requests: int, rounds: int, cache_gb: float,
                has_video: bool, compiled: bool, log=print) -> dict:
    from hf_bridge.server import OpenAIServer

    limits = {"image": 2, "video": 1} if has_video else {"image": 2}
    args = ["--dtype", "float32", "--max-model-len", "4096", "--seed", "0",
            "--limit-mm-per-prompt", json.dumps(limits), "--served-model-name", served_model(model_dir),
            "--mm-processor-cache-gb", str(cache_gb)]
    if not compiled:
        args.append("--enforce-eager")
    env = {"HF_BRIDGE_DISABLE": "1" if backend == "in-tree" else "0", "VLLM_LOGGING_LEVEL": "WARNING"}
    results: list[RoundResult] = []
    with OpenAIServer(model_dir, *args, env=env) as server:
        warm_up = build_round(rounds, num_requests, has_video)  # its own items, never measured
        before = server.resident_bytes()
        asyncio.run(run_requests(server.base_url, served_model(model_dir), warm_up, concurrent=True))
        time.sleep(1.0)
        log(f"{backend:9s} warm-up round: resident {before / 2**20:.0f} -> {server.resident_bytes() / 2**20:.0f} MiB")
        for r in range(rounds):
            requests = build_round(r, num_requests, has_video)
            hits = server.metric(CACHE_HITS)
            outcomes, wall = asyncio.run(run_requests(server.base_url, served_model(model_dir), requests, concurrent=True))
            time.sleep(1.0)  # let the engine settle before reading memory
            by_process = server.resident_by_process()
            results.append(RoundResult(outcomes, wall, sum(by_process.values()), requests, server.metric(CACHE_HITS) - hits))
            p50, p99 = results[-1].ttft_quantiles()
            failed = sum(1 for o in outcomes if o.error)
            log(f"{backend:9s} round {r + 1}: {results[-1].requests_per_s:6.2f} requests/s, TTFT p50 {p50 * 1e3:7.0f} ms "
                f"p99 {p99 * 1e3:7.0f} ms, {failed} failed, {results[-1].cache_hits:.0f} cache hits, resident {results[-1].resident_bytes / 2**20:7.0f} MiB "
                f"({', '.join(f'{k} {v / 2**20:.0f}' for k, v in by_process.items())})")
        checked = [results[0]] + ([results[-1]] if rounds > 1 else [])
        found: list[str] = []
        for result in checked:
            solo, _ = asyncio.run(run_requests(server.base_url, served_model(model_dir), result.requests, concurrent=False))
            found += mismatches(result.outcomes, solo, result.requests)
            found += [f"request {r.index} alone failed: {o.error}" for r, o in zip(result.requests, solo) if o.error]
    errors = [f"round {i + 1} request {o_index}: {problem(o)}" for i, res in enumerate(results)
              for o_index, o in enumerate(res.outcomes) if problem(o)]
    p50s, p99s = zip(*(res.ttft_quantiles() for res in results))
    return {
        "backend": backend,
        "requests_per_round": num_requests,
        "requests_per_s": [res.requests_per_s for res in results],
        "ttft_p50_s": list(p50s),
        "ttft_p99_s": list(p99s),
        "resident_bytes": [res.resident_bytes for res in results],
        "errors": errors,
        "solo_checked": sum(len(res.requests) for res in checked),
        "solo_mismatches": found,
        "repeated_items": [sum(r.repeated_items for r in res.requests) for res in results],
        "cache_hits": [res.cache_hits for res in results],
        "media_items": [sum(1 for r in res.requests for part in r.content if part["type"] != "text") for res in results],
        "kinds": {kind: sum(1 for r in results[0].requests if r.kind == kind) for kind in KINDS},
        "streaming": sum(r.stream for r in results[0].requests),
    }


def summary(result: dict) -> str:
    rss = result["resident_bytes"]
    growth = rss[-1] / rss[0] - 1
    return (f"{result['backend']:9s} {statistics.median(result['requests_per_s']):7.2f} req/s  "
            f"TTFT p50 {statistics.median(result['ttft_p50_s']) * 1e3:6.0f} ms  p99 {statistics.median(result['ttft_p99_s']) * 1e3:6.0f} ms  "
            f"errors {len(result['errors'])}  mismatches {len(result['solo_mismatches'])}/{result['solo_checked']}  "
            f"resident {rss[0] / 2**20:.0f} -> {rss[-1] / 2**20:.0f} MiB ({growth:+.1%})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2_vl", help="a zoo name (default qwen2_vl: image and video)")
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backends", nargs="+", default=["hf_bridge", "in-tree"], choices=["hf_bridge", "in-tree"])
    parser.add_argument("--mm-processor-cache-gb", type=float, default=0.05,
                        help="small enough that the first round fills it (then it evicts)")
    parser.add_argument("--eager", action="store_true", help="--enforce-eager (default: vLLM's compiled mode)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()

    from hf_bridge.zoo import build
    from hf_bridge.zoo.specs import SPECS

    model_dir = build(args.model)
    has_video = SPECS[args.model].has_video
    results = [run_backend(b, model_dir, args.requests, args.rounds, args.mm_processor_cache_gb, has_video, not args.eager)
               for b in args.backends]
    first = results[0]
    print(f"\n{args.model}, {args.requests} concurrent requests x {args.rounds} rounds ({first['kinds']}, "
          f"{first['streaming']} streaming, {first['repeated_items'][0]} of {first['media_items'][0]} media items repeated), "
          f"{NEW_TOKENS} new tokens, {'eager' if args.eager else 'compiled'}; medians over rounds:")
    for result in results:
        print("  " + summary(result))
    if len(results) == 2:
        ours, theirs = (statistics.median(r["requests_per_s"]) for r in results)
        print(f"  ratio {results[0]['backend']} / {results[1]['backend']} requests/s = {ours / theirs:.3f}")
    for result in results:
        for line in (result["errors"] + result["solo_mismatches"])[:10]:
            print(f"  {result['backend']}: {line}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
