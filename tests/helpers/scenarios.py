"""Run an `engine_scenarios.py` scenario in a process of its own, by default in vLLM's default
(multiprocess) engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HELPER = Path(__file__).parent / "engine_scenarios.py"


def run_scenario(name: str, model_dir, timeout: int = 600, multiprocess: bool = True, **env) -> dict:
    """step -> its RESULT entry; `"log"` holds the scenario's whole output. `multiprocess=False`
    runs the engine in the scenario's own process (it starts in seconds, not half a minute)."""
    environment = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="1" if multiprocess else "0", **env)
    done = subprocess.run(
        [sys.executable, str(HELPER), name, str(model_dir)], capture_output=True, text=True, env=environment, timeout=timeout
    )
    results: dict = {}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            entry = json.loads(line[len("RESULT ") :])
            results[entry["step"]] = entry
    assert results, f"scenario {name} produced no result:\n{done.stderr[-3000:]}"
    results["log"] = done.stdout + done.stderr
    return results
