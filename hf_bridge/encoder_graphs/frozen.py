"""A frozen graph: what a CUDA graph is, recorded without CUDA.

`torch.cuda.graph(g)` records the kernels run inside its block, with the addresses of
the tensors they read and write; `g.replay()` re-launches exactly those kernels on
whatever those tensors then hold. Python does not run again at replay: control flow
and shapes are frozen at capture time.

`FrozenGraph` does the same one level up, with the aten operators that would launch
those kernels: inside `frozen_graph(g)` a `TorchDispatchMode` records every operator
with its arguments. Tensors that exist before the block (static input buffers, weights,
the output buffer) are held by reference, as a CUDA graph holds their addresses;
tensors made inside the block are replaced by the results of the recorded operators
at replay. So replay reads the buffers' current contents, writes the output buffer in
place, and never re-runs the Python that made the recording.

It backs two things: the CPU stand-in for `torch.cuda.CUDAGraph`/`torch.cuda.graph` that
lets vLLM's real `EncoderCudaGraphManager` capture and replay on a machine without a
GPU (`standing_in_for_cuda_graphs`), and hf_bridge's optional CPU encoder fast path.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map


@dataclass
class _Made:
    """A reference to the `index`-th recorded operator's output (a tensor made in the block)."""

    op: int
    path: tuple[int, ...]


class FrozenGraph:
    """Stands in for `torch.cuda.CUDAGraph`: `replay()` re-runs the recording."""

    def __init__(self, *args, **kwargs):
        self.ops: list[tuple[Any, Any, Any]] = []
        self._frees: list[list[int]] | None = None

    def replay(self) -> None:
        if not self.ops:
            raise RuntimeError("replay of a FrozenGraph that recorded nothing")
        if self._frees is None:
            self._frees = self._last_uses()
        results: list[Any] = [None] * len(self.ops)

        def resolve(value):
            if isinstance(value, _Made):
                out = results[value.op]
                for i in value.path:
                    out = out[i]
                return out
            return value

        with torch.inference_mode():  # a graph replays kernels: no autograd, like CUDA's
            for index, (func, args, kwargs) in enumerate(self.ops):
                results[index] = func(*tree_map(resolve, args), **tree_map(resolve, kwargs))
                for done in self._frees[index]:  # as a graph's memory pool reuses blocks
                    results[done] = None

    def _last_uses(self) -> list[list[int]]:
        """For each op, the earlier results it is the last reader of."""
        last: dict[int, int] = {}
        for index, (_, args, kwargs) in enumerate(self.ops):
            for value in _references(args) + _references(kwargs):
                last[value.op] = index
        frees: list[list[int]] = [[] for _ in self.ops]
        for made, index in last.items():
            frees[index].append(made)
        return frees

    @property
    def num_ops(self) -> int:
        return len(self.ops)


def _references(tree) -> list[_Made]:
    found: list[_Made] = []
    tree_map(lambda v: found.append(v) if isinstance(v, _Made) else None, tree)
    return found


class _Recorder(TorchDispatchMode):
    def __init__(self, graph: FrozenGraph):
        super().__init__()
        self.graph = graph
        self.made: dict[int, _Made] = {}  # id of a tensor made in the block -> where it came from
        self.keep: list[torch.Tensor] = []  # keeps those tensors alive, so ids stay unique

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        index = len(self.graph.ops)

        def reference(value):
            if isinstance(value, torch.Tensor):
                return self.made.get(id(value), value)
            return value

        self.graph.ops.append((func, tree_map(reference, args), tree_map(reference, kwargs)))
        self._remember(out, index, ())
        return out

    def _remember(self, value, index: int, path: tuple[int, ...]) -> None:
        if isinstance(value, torch.Tensor):
            # an in-place op returns its (pre-existing) argument: keep referring to it directly
            if id(value) not in self.made:
                self.made[id(value)] = _Made(index, path)
                self.keep.append(value)
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                self._remember(v, index, (*path, i))


@contextlib.contextmanager
def frozen_graph(graph: FrozenGraph, pool: Any = None, stream: Any = None):
    """Stands in for `torch.cuda.graph(graph, pool=..., stream=...)`: records into `graph`."""
    recorder = _Recorder(graph)
    with recorder:
        yield
    recorder.keep.clear()


@contextlib.contextmanager
def standing_in_for_cuda_graphs():
    """Within the block, `torch.cuda.CUDAGraph` and `torch.cuda.graph` are frozen graphs.

    Only those two names change: vLLM's manager and transformers' model run as they are.
    """
    saved = torch.cuda.CUDAGraph, torch.cuda.graph
    torch.cuda.CUDAGraph, torch.cuda.graph = FrozenGraph, frozen_graph  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        torch.cuda.CUDAGraph, torch.cuda.graph = saved  # type: ignore[misc]
