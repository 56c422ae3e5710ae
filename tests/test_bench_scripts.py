"""The GPU check script's CPU dry pass, so it cannot rot where no GPU is lent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parent.parent / "bench"


def test_gpu_encoder_graph_script_dry_pass_on_cpu():
    done = subprocess.run(
        [sys.executable, str(BENCH / "encoder_graphs_gpu.py"), "--device", "cpu", "--tiles", "1", "2",
         "--layers", "2", "--repeats", "1", "--atol", "0"],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [r[0] for r in rows] == ["1", "2"]
    assert all(float(r[-1]) == 0.0 for r in rows)  # graph output equals eager exactly
