"""The benchmark scripts run (the GPU checks as their CPU dry passes), so they cannot rot.

The GPU dry passes take seconds and run with the suite. The CPU benchmarks take minutes
each (the throughput one over five); they are marked `bench`, which the suite leaves out
(`addopts` in pyproject.toml), and run on their own: `.venv/bin/python -m pytest -m bench`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parent.parent / "bench"


def test_gpu_encoder_graph_script_dry_pass_on_cpu():
    """hf_bridge's encoder code over every tower, captured in the strict stand-in: equal to
    eager bit for bit, and Chameleon's host-side VQ lookup refused as CUDA refuses it."""
    done = subprocess.run(
        [sys.executable, str(BENCH / "encoder_graphs_gpu.py"), "--device", "cpu", "--scale", "tiny",
         "--tiles", "1", "2", "--repeats", "1", "--dtypes", "float32"],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.split()[1:2] == ["float32"]]
    captured = {(r[0], r[2]): r for r in rows if "refused:" not in r}
    towers = {"internvit-300m-448", "clip-l-336", "siglip-so400m-224", "siglip-so400m-896", "fuyu-patches"}
    assert set(captured) == {(t, n) for t in towers for n in ("1", "2")}
    assert all(r[-2] == "True" and float(r[-1]) == 0.0 for r in captured.values())  # bitwise equal to eager
    (chameleon,) = [" ".join(r) for r in rows if r[0] == "chameleon-vq"]
    assert "capture refused: Tensor.to('cpu') copies a tensor to the host" in chameleon


def test_capture_rules_script_dry_pass_on_cpu():
    """The stand-in's verdict on every case beside the H100's recorded one: none it lets through."""
    done = subprocess.run([sys.executable, str(BENCH / "capture_rules_gpu.py"), "--device", "cpu"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "stand-in refuses every case CUDA refuses: True" in done.stdout
    rows = [line.split()[:3] for line in done.stdout.splitlines()[2:] if line.split()[1:2] in (["refused"], ["captured"])]
    assert len(rows) == 45 and sum(cuda == "refused" for _, cuda, _ in rows) == 28


@pytest.mark.bench
def test_processor_cache_benchmark_runs():
    """bench/processor_cache.py's table, one repeat on the tiny Qwen2-VL at the zoo's and
    at transformers' default sizes, both backends, each with a served (JPEG bytes), a PIL
    and a PIL-with-uuid row (each timing checked against the cache's own hit count), and
    the served images' decode line."""
    done = subprocess.run([sys.executable, str(BENCH / "processor_cache.py"), "--models", "qwen2_vl", "--repeats", "1",
                           "--size", "448", "336", "--sizes", "zoo", "default"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("qwen2_vl ")]
    assert [r[1:4] for r in rows] == [[s, b, i] for s in ("zoo", "default") for b in ("hf_bridge", "in-tree")
                                      for i in ("served", "PIL", "PIL+uuid")], done.stdout
    assert all(float(r[4]) > 0 and float(r[5]) > 0 for r in rows), rows
    assert re.search(r"served images: JPEG \(quality 90\) of [0-9]+ KiB, decoded .* in [0-9.]+ ms", done.stdout), done.stdout


@pytest.mark.bench
def test_vllm_mm_processor_benchmark_runs_on_both_backends():
    """vLLM's own `bench mm-processor` (random-mm) through bench/mm_processor.py: every
    stage it reports has a figure for hf_bridge and for the in-tree backend."""
    rows = _backend_rows("mm_processor.py", "--models", "llava", "--num-prompts", "3", "--size", "64", "96", "--rounds", "1")
    assert all(len(r) == 8 and all(float(x) >= 0 for x in r[2:]) for r in rows), rows


def _backend_rows(script: str, *args: str) -> list[list[str]]:
    """The table rows a benchmark prints for the tiny LLaVA: hf_bridge's, then the in-tree backend's."""
    done = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("llava ")]
    assert [r[1] for r in rows] == ["hf_bridge", "in-tree"], done.stdout[-2000:]
    return rows


@pytest.mark.bench
def test_throughput_benchmark_prints_the_limit_the_ratios_and_the_profile():
    """bench/throughput.py, eager and in-process, one round of 4 requests: every figure it prints is there."""
    done = subprocess.run([sys.executable, str(BENCH / "throughput.py"), "--modes", "eager", "in-process", "--rounds", "1", "--requests", "4"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    limit = re.search(r"GFLOP per request .* on 1 thread\(s\) \(the worker's\) .* -> ([0-9.]+) requests/s", out)
    assert limit and float(limit.group(1)) > 0, out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("  eager ", "  in-process "))}
    for row in rows.values():  # the table's rows: mode, threads, both backends, their ratio and shares of the limit
        assert len(row) == 7 and int(row[1]) >= 1 and float(row[2]) > 0 and float(row[3]) > 0 and row[5].endswith("%"), row
    # vLLM's worker binds a core less than there are; in-process, the engine computes on torch's own
    # threads, and its share is of a limit measured on as many
    cores, threads = len(os.sched_getaffinity(0)), int(rows["in-process"][1])
    assert int(rows["eager"][1]) == max(1, cores - 1), rows
    if threads != int(rows["eager"][1]):
        assert re.search(rf"on {threads} thread\(s\) \(the in-process engine's\) .* -> [0-9.]+ requests/s", out), out
    assert re.search(r"time to first token \(eager, alone\): hf_bridge [0-9.]+ ms, in-tree [0-9.]+ ms", out), out
    stages = ("front end", "encoder", "prefill (forward)", "decode (forward)", "logits", "sampling", "rest")
    assert all(any(line.strip().startswith(stage) for line in out.splitlines()) for stage in stages), out
    # within the prefill forward, vLLM's matmul and attention kernels took time
    kernels = re.search(r"prefill \(forward\).*\n\s+matmul \(vLLM's oneDNN linear\)\s+([0-9.]+) ms.*\n"
                        r"\s+attention \(vLLM's CPU kernel\)\s+([0-9.]+) ms", out)
    assert kernels and float(kernels.group(1)) > 0 and float(kernels.group(2)) > 0, out


@pytest.mark.bench
def test_carried_state_benchmark_prints_both_decoders_transformers_and_the_share():
    """bench/carried_state.py, one round of 2 requests: both modes' rows, transformers' rate, the share."""
    done = subprocess.run([sys.executable, str(BENCH / "carried_state.py"), "--rounds", "1", "--requests", "2"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for mode in ("compiled", "eager"):
        row = next(line.split() for line in out.splitlines() if line.startswith(mode))
        assert len(row) == 4 and all(float(x) > 0 for x in row[1:]), row
    assert re.search(r"transformers generate, sequential, state model: [0-9.]+ req/s", out), out
    share = re.search(r"in-process engine \(compiled\), state model: [0-9.]+ req/s, ([0-9]+)% of the time in the state "
                      r"layers' forward, of it ([0-9]+)% in transformers' module itself and (-?[0-9]+)% in hf_bridge's", out)
    assert share and 0 < int(share.group(1)) < 100 and 0 < int(share.group(2)) <= int(share.group(1)), out


@pytest.mark.bench
def test_startup_benchmark_prints_each_stage_for_both_backends():
    """bench/startup.py, one round of the tiny LLaVA, eager: import, engine, first request and
    their total, each with both backends' seconds and the ratio."""
    done = subprocess.run([sys.executable, str(BENCH / "startup.py"), "--models", "llava", "--modes", "eager",
                           "--rounds", "1"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("llava ")]
    assert [r[23:37].strip() for r in rows] == ["import", "engine", "first request", "total"], done.stdout
    assert all(float(x) > 0 for r in rows for x in r[37:].split()), rows
