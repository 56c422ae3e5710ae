"""The OpenAI-compatible server under load (`bench/load.py`): 256 concurrent requests, five rounds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

LOAD = Path(__file__).parent.parent / "bench" / "load.py"
REQUESTS = 256
ROUNDS = 5


@pytest.mark.slow
def test_server_serves_256_concurrent_requests_as_it_serves_each_alone(tmp_path):
    """Images of different sizes, two-image requests, videos, text; a quarter of the items
    repeated; half streaming (qwen2_vl, eager so the server starts in seconds)."""
    out = tmp_path / "load.json"
    done = subprocess.run([sys.executable, str(LOAD), "--backends", "hf_bridge", "--eager", "--requests", str(REQUESTS),
                           "--rounds", str(ROUNDS), "--json", str(out)], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (result,) = json.loads(out.read_text())
    print(done.stdout[-1500:])

    assert result["kinds"] == {"one_image": 64, "two_images": 64, "video": 64, "text": 64}
    assert result["streaming"] == REQUESTS // 2
    assert all(repeated == result["media_items"][0] // 4 for repeated in result["repeated_items"])
    # the repeats hit vLLM's processor cache (its own counter)
    assert all(hits >= repeated for hits, repeated in zip(result["cache_hits"], result["repeated_items"]))
    # every request of every round completed, with its 16 tokens
    assert result["errors"] == []
    assert len(result["requests_per_s"]) == ROUNDS
    # every output of the first and last rounds equals the same request run alone
    assert result["solo_checked"] == 2 * REQUESTS
    assert result["solo_mismatches"] == []
    # no leak: memory after the fifth round within 10% of after the first
    first, *_, last = result["resident_bytes"]
    assert last <= 1.10 * first, [f"{b / 2**20:.0f} MiB" for b in result["resident_bytes"]]
