"""What CUDA graph capture refuses, measured on a GPU, against hf_bridge's frozen stand-in.

    python bench/capture_rules_gpu.py --device cuda     # each case under torch.cuda.graph, one process each
    python bench/capture_rules_gpu.py --device cpu      # the stand-in's verdicts beside the recorded GPU ones (CI)

hf_bridge offers vLLM a vision tower for encoder graphs only when a trial capture in its
frozen graph (`hf_bridge/encoder_graphs/frozen.py`) succeeds, and vLLM does not catch
capture errors: a stand-in that lets through what CUDA refuses crashes a GPU engine. Each
case below is a small forward of the kind a vision tower might contain. On `cuda` the
script captures each in `torch.cuda.graph` (after a side-stream warm-up, as capture
requires), replays on fresh input and compares with eager; on `cpu` it records each in
the frozen graph. `CASES` holds the verdicts measured on an H100 (torch 2.11 + CUDA 13,
2026-11-24) and what the stand-in says. The script exits 1 where the stand-in accepts a
case CUDA refuses; where it refuses one CUDA accepts (`STRICTER`), a tower only keeps
eager encoding.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent.parent))
sys.path.insert(0, str(Path(__file__).parent))
from encoder_graphs_gpu import graph_api, warm_up  # noqa: E402  (capture as the tower check captures)

REFUSED, CAPTURED = "refused", "captured"
CUDA_PROCESSES = 8


@dataclass(frozen=True)
class Case:
    forward: Callable[[torch.Tensor], torch.Tensor]
    cuda: str
    """REFUSED or CAPTURED: torch.cuda.graph's verdict, measured on an H100."""
    stand_in: str | None
    """The frozen graph's refusal (a part of its message), or None where it captures."""


def _assigned(x: torch.Tensor, write: Callable[[torch.Tensor], None]) -> torch.Tensor:
    y = x.clone()
    write(y)
    return y


HOST_TABLE = torch.arange(16)
"""Chameleon's VQ-to-BPE lookup: a table on the host, indexed by codes copied there."""

CASES: dict[str, Case] = {
    # reading a value on the host
    "item": Case(lambda x: x * x.abs().max().item(), REFUSED, "Tensor.item() reads a tensor on the host"),
    "python_bool": Case(lambda x: x if x.sum() > 0 else -x, REFUSED, "Tensor.__bool__() reads a tensor on the host"),
    "python_int": Case(lambda x: x * int(x.argmax()), REFUSED, "Tensor.__int__() reads a tensor on the host"),
    "tolist": Case(lambda x: x[:, : len([v for v in x[0].tolist() if v > 0]) + 1], REFUSED,
                   "Tensor.tolist() reads a tensor on the host"),
    "tensor_as_slice_bound": Case(lambda x: x[:, : x.argmax() % 3 + 1], REFUSED,
                                  "aten._local_scalar_dense reads a tensor on the host"),
    "allclose": Case(lambda x: x if torch.allclose(x, x + 1) else -x, REFUSED, "aten.allclose reads a tensor on the host"),
    "equal": Case(lambda x: x if torch.equal(x, x + 1) else -x, REFUSED, "aten.equal reads a tensor on the host"),
    "cholesky_error_check": Case(lambda x: torch.linalg.cholesky(x @ x.T + 4 * torch.eye(2, device=x.device)), REFUSED,
                                 "a linear-algebra operator checks its error codes on the host"),
    "histc_without_range": Case(lambda x: torch.histc(x, bins=4), REFUSED,
                                "torch.histc without a range reads the data's range on the host"),
    "one_hot_without_classes": Case(lambda x: F.one_hot(x.argmax(-1)).float(), REFUSED,
                                    "aten._local_scalar_dense reads a tensor on the host"),
    # copies between host and device
    "to_cpu": Case(lambda x: HOST_TABLE[x.argmax(-1).to("cpu")].float(), REFUSED,
                   "Tensor.to('cpu') copies a tensor to the host"),
    "cpu_method": Case(lambda x: x.cpu() + 1, REFUSED, "Tensor.cpu() copies a tensor to the host"),
    "tensor_from_data": Case(lambda x: x + torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device), REFUSED,
                             "tensor makes a tensor from host data inside the capture"),
    "tensor_from_data_0d": Case(lambda x: x * torch.tensor(2.0, device=x.device), REFUSED,
                                "tensor makes a tensor from host data inside the capture"),
    "new_tensor": Case(lambda x: x + x.new_tensor([1.0, 2.0, 3.0, 4.0]), REFUSED,
                       "new_tensor makes a tensor from host data inside the capture"),
    "as_tensor_numpy": Case(lambda x: x + torch.as_tensor(np.arange(4, dtype=np.float32), device=x.device), REFUSED,
                            "as_tensor makes a tensor from host data inside the capture"),
    "factory_then_to": Case(lambda x: x + torch.arange(4).to(x.device), REFUSED,
                            "torch.arange without a device makes a host tensor inside the capture"),
    "factory_then_to_non_blocking": Case(lambda x: x + torch.arange(4).to(x.device, non_blocking=True), REFUSED,
                                         "torch.arange without a device makes a host tensor inside the capture"),
    "index_assign_python_number": Case(
        lambda x: _assigned(x, lambda y: y.__setitem__((slice(None), torch.arange(2, device=y.device)), 0.0)),
        REFUSED, "assignment through an index copies its Python value from the host"),
    # output shapes that depend on values
    "nonzero": Case(lambda x: x[torch.nonzero(x > 0, as_tuple=True)], REFUSED,
                    "nonzero gives an output whose shape depends on tensor values"),
    "where_condition_only": Case(lambda x: x[torch.where(x > 0)], REFUSED,
                                 "torch.where(condition) gives an output whose shape depends on tensor values"),
    "boolean_mask_index": Case(lambda x: x[x > 0], REFUSED,
                               "boolean-mask indexing gives an output whose shape depends on tensor values"),
    "masked_select": Case(lambda x: torch.masked_select(x, x > 0), REFUSED,
                          "masked_select gives an output whose shape depends on tensor values"),
    "unique": Case(lambda x: torch.unique(x.argmax(-1)).float(), REFUSED,
                   "unique gives an output whose shape depends on tensor values"),
    "repeat_interleave_by_tensor": Case(
        lambda x: torch.repeat_interleave(x, torch.full((2,), 2, device=x.device), dim=0), REFUSED,
        "aten.repeat_interleave gives an output whose shape depends on tensor values"),
    "bincount": Case(lambda x: torch.bincount(x.argmax(-1)).float(), REFUSED,
                     "aten.bincount gives an output whose shape depends on tensor values"),
    "boolean_mask_assign_tensor": Case(
        lambda x: _assigned(x, lambda y: y.__setitem__(y > 0, torch.zeros((), device=y.device))), REFUSED,
        "boolean-mask assignment gives a shape that depends on tensor values"),
    "index_put_boolean_mask": Case(
        lambda x: _assigned(x, lambda y: y.index_put_((y > 0,), torch.zeros((), device=y.device))), REFUSED,
        "boolean-mask assignment gives a shape that depends on tensor values"),
    # captured by CUDA
    "boolean_mask_assign_python_number": Case(lambda x: _assigned(x, lambda y: y.__setitem__(y > 0, 0.0)), CAPTURED, None),
    "boolean_row_mask_assign_python_number": Case(
        lambda x: _assigned(x, lambda y: y.__setitem__(y[:, 0] > 0, 0.0)), CAPTURED, None),
    "repeat_interleave_with_output_size": Case(
        lambda x: torch.repeat_interleave(x, torch.full((2,), 2, device=x.device), dim=0, output_size=4), CAPTURED, None),
    "repeat_interleave_by_int": Case(lambda x: torch.repeat_interleave(x, 2, dim=0), CAPTURED, None),
    "integer_index": Case(lambda x: x[:, torch.arange(2, device=x.device)], CAPTURED, None),
    "factory_with_device": Case(lambda x: x + torch.arange(4, device=x.device), CAPTURED, None),
    "masked_fill": Case(lambda x: x.masked_fill(x > 0, 0.0), CAPTURED, None),
    "masked_scatter": Case(lambda x: x.masked_scatter(x > 0, torch.ones_like(x)), CAPTURED, None),
    "where_three_arguments": Case(lambda x: torch.where(x > 0, x, 0.0), CAPTURED, None),
    "any_as_tensor": Case(lambda x: x * torch.any(x > 0), CAPTURED, None),
    "sort_topk": Case(lambda x: torch.sort(x, -1).values + torch.topk(x, 2).values.sum(), CAPTURED, None),
    "cumsum_searchsorted": Case(
        lambda x: torch.searchsorted(torch.cumsum(x.abs().flatten(), 0), x.abs().flatten()).float(), CAPTURED, None),
    "isin": Case(lambda x: torch.isin(x.argmax(-1), torch.arange(2, device=x.device)).float(), CAPTURED, None),
    "interpolate": Case(lambda x: F.interpolate(x[None, None], scale_factor=2.0)[0, 0], CAPTURED, None),
    "sdpa_boolean_mask": Case(
        lambda x: F.scaled_dot_product_attention(x[None, None], x[None, None], x[None, None],
                                                 attn_mask=torch.ones(2, 2, dtype=torch.bool, device=x.device))[0, 0],
        CAPTURED, None),
    # captured by CUDA, refused by the stand-in (STRICTER)
    "host_scalar_tensor_operand": Case(lambda x: x * torch.tensor(2.0), CAPTURED,
                                       "tensor makes a tensor from host data inside the capture"),
    "one_hot_with_classes": Case(lambda x: F.one_hot(x.argmax(-1), num_classes=4).float(), CAPTURED,
                                 "aten._local_scalar_dense reads a tensor on the host"),
}

STRICTER = {name for name, case in CASES.items() if case.cuda == CAPTURED and case.stand_in is not None}
"""Cases the stand-in refuses though CUDA captures them: a CPU tensor made from a Python
number is a kernel argument on a GPU, and `one_hot`'s range check reads values on the
CPU only."""


def verdict(name: str, device: str) -> dict:
    """Eager, capture and replay of one case on `device` ("cuda": torch.cuda.graph;
    "cpu": hf_bridge's frozen graph): {"verdict": REFUSED/CAPTURED, "why" or "replay"}."""
    forward = CASES[name].forward
    inputs = [torch.randn(2, 4, generator=torch.Generator().manual_seed(seed)).to(device) for seed in (0, 1)]
    static = inputs[0].clone()
    graph_cls, graph_ctx, _, sync = graph_api(device)
    warm_up(lambda: forward(static), device)
    sync()
    out = torch.empty_like(forward(static))
    graph = graph_cls()
    try:
        with graph_ctx(graph):
            out.copy_(forward(static))
    except Exception as exc:  # noqa: BLE001 - the capture's refusal is the measurement
        return {"verdict": REFUSED, "why": f"{type(exc).__name__}: {str(exc).splitlines()[0][:110]}"}
    static.copy_(inputs[1])
    graph.replay()
    expected = forward(inputs[1])
    return {"verdict": CAPTURED, "replay": "equal to eager" if torch.equal(out, expected) else "DIFFERS from eager"}


def cuda_verdict(name: str) -> dict:
    """One process per case: a refused capture can leave the CUDA context unusable."""
    done = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return {"verdict": "crashed", "why": done.stderr.strip().splitlines()[-1][:110]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # one CUDA case, in a process of its own
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(verdict(args.case, "cuda")))
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device here; --device cpu prints the stand-in beside the recorded GPU verdicts")
    source = "measured now" if args.device == "cuda" else "recorded (H100)"
    print(f"CUDA graph capture ({source}) against hf_bridge's frozen stand-in, {len(CASES)} cases")
    print(f"{'case':<40} {'CUDA':<9} {'stand-in':<9} CUDA's reason or replay / the stand-in's")
    slipped, drifted = [], []
    if args.device == "cuda":  # a process per case, eight at a time (one at a time ran past 4 minutes)
        with ThreadPoolExecutor(CUDA_PROCESSES) as pool:
            measured = dict(zip(CASES, pool.map(cuda_verdict, CASES)))
    for name, case in CASES.items():
        cuda = measured[name] if args.device == "cuda" else {"verdict": case.cuda}
        ours = verdict(name, "cpu")
        if cuda["verdict"] == REFUSED and ours["verdict"] != REFUSED:
            slipped.append(name)
        if cuda["verdict"] != case.cuda:
            drifted.append(name)
        detail = cuda.get("why") or cuda.get("replay") or ""
        print(f"{name:<40} {cuda['verdict']:<9} {ours['verdict']:<9} {detail} / {ours.get('why') or ours.get('replay')}")
    print(f"stand-in refuses every case CUDA refuses: {not slipped}" + (f" (slipped: {', '.join(slipped)})" if slipped else ""))
    print(f"stricter than CUDA: {', '.join(sorted(STRICTER))}")
    if drifted:
        print(f"CUDA's verdict differs from the recorded one: {', '.join(drifted)}")
    return 1 if slipped or drifted else 0


if __name__ == "__main__":
    sys.exit(main())
