"""One measurement per fresh process, for the benchmarks: the plugin registers at process
start (`HF_BRIDGE_DISABLE=1` gives the in-tree backend), and an in-process engine changes
transformers' classes. The benchmark re-runs itself as a worker, which prints its result
as one `RESULT <json>` line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PREFIX = "RESULT "


def report(result: dict) -> None:
    """The worker's side: print its result for `run_worker`."""
    print(PREFIX + json.dumps(result), flush=True)


def run_worker(script: str | Path, args: list[str], env: dict[str, str], what: str) -> dict:
    """Run `script` with `args` in a fresh process under `env`; its reported result."""
    done = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith(PREFIX):
            return json.loads(line[len(PREFIX):])
    raise RuntimeError(f"{what} failed:\n{done.stderr[-3000:]}")
