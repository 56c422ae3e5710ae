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

While recording it refuses what CUDA graph capture refuses (`CaptureRefused`): reading
a tensor's value on the host (`.item()`, `.tolist()`, `bool(t)`, ...), copies to the
host (`.cpu()`, `.to("cpu")`), operators whose output shape depends on tensor values
(`nonzero`, boolean-mask indexing, `masked_select`, `unique`), and host tensors made
inside the block (`torch.tensor(...)`, factories without a `device`), checked at the
Python call (`capture_refusal`); then, at each aten operator, what operators do inside
their kernels (`operator_refusal`): host reads (`int(t)`, a tensor as a slice bound,
`torch.allclose`), torch's `dynamic_output_shape` operators (`bincount`,
`repeat_interleave` without `output_size`), boolean-mask or Python-number assignment
through an index. Each rule was measured against `torch.cuda.graph` on an H100
(`bench/capture_rules_gpu.py`). On the CPU the
host plays the device, so a `torch.device` argument is taken as the graph's device and
only naming the host (`"cpu"`, `.cpu()`) counts as copying to it.

It backs two things: the CPU stand-in for `torch.cuda.CUDAGraph`/`torch.cuda.graph` that
lets vLLM's real `EncoderCudaGraphManager` capture and replay on a machine without a
GPU (`standing_in_for_cuda_graphs`), and hf_bridge's optional CPU encoder fast path.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map


class CaptureRefused(RuntimeError):
    """What `torch.cuda.graph` capture would refuse, met while recording a frozen graph."""


HOST_READS = frozenset({"item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "__complex__"})
"""Tensor methods that read a value on the host (a device-to-host sync)."""
DATA_DEPENDENT = frozenset({"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "nonzero_static"})
"""Operators whose output shape depends on tensor values."""
HOST_DATA = frozenset({torch.tensor, torch.as_tensor, torch.from_numpy})
"""Factories that copy host data in."""
FACTORIES = frozenset({torch.zeros, torch.ones, torch.empty, torch.full, torch.arange, torch.rand, torch.randn,
                       torch.randint, torch.linspace, torch.eye})
"""Factories that make a host tensor unless given a `device`."""


def capture_refusal(func, args: tuple, kwargs: dict) -> str | None:
    """Why CUDA graph capture would refuse `func(*args, **kwargs)`, or None."""
    name = getattr(func, "__name__", "")
    is_method = getattr(func, "__qualname__", "").startswith(("TensorBase.", "Tensor."))
    if is_method and name in HOST_READS:
        return f"Tensor.{name}() reads a tensor on the host"
    if is_method and name == "cpu":
        return "Tensor.cpu() copies a tensor to the host"
    if is_method and name == "to" and any(_names_host(a) for a in (*args[1:], *kwargs.values())):
        return "Tensor.to('cpu') copies a tensor to the host"
    if name in DATA_DEPENDENT and (is_method or getattr(torch, name, None) is func):
        return f"{name} gives an output whose shape depends on tensor values"
    if func is torch.where and len(args) + len(kwargs) == 1:
        return "torch.where(condition) gives an output whose shape depends on tensor values"
    if is_method and name == "__getitem__" and _has_bool_index(args[1] if len(args) > 1 else None):
        return "boolean-mask indexing gives an output whose shape depends on tensor values"
    if func in HOST_DATA or (is_method and name == "new_tensor"):
        return f"{name} makes a tensor from host data inside the capture"
    if func in FACTORIES and kwargs.get("device") is None and not _called_from_vllm_cpu_kernel():
        return f"torch.{name} without a device makes a host tensor inside the capture"
    return None


HOST_VALUE_OPS = frozenset({"_local_scalar_dense", "item", "equal", "allclose", "is_nonzero"})
"""aten operators whose result is a Python value computed from tensor data: a host read
wherever it happens (`int(t)`, a tensor as a slice bound, `torch.allclose`, ...)."""
SIZED_BY_ARGUMENT = {"repeat_interleave": "output_size"}
"""Operators tagged `dynamic_output_shape` whose output size a given argument fixes."""


def operator_refusal(func, args: tuple, kwargs: dict, from_host) -> str | None:
    """Why CUDA graph capture would refuse the aten operator `func(*args, **kwargs)`, or
    None: the host reads and data-dependent shapes that operators do inside their own
    kernels, which `capture_refusal` cannot see at the Python call. `from_host(t)`: whether
    tensor `t` was made in the block from host data (a Python number)."""
    name = func.__name__.split(".")[0]
    if name in HOST_VALUE_OPS:
        return f"aten.{name} reads a tensor on the host"
    if name == "_linalg_check_errors":
        return "a linear-algebra operator checks its error codes on the host"
    if name == "histc" and _argument(func, args, kwargs, "min") == _argument(func, args, kwargs, "max"):
        return "torch.histc without a range reads the data's range on the host"
    if name.startswith("index_put"):
        indices = tuple(i for i in _argument(func, args, kwargs, "indices") if i is not None)
        values = _argument(func, args, kwargs, "values")
        if _has_bool_index(indices):
            if len(indices) == 1 and from_host(values) and not _argument(func, args, kwargs, "accumulate"):
                return None  # one mask and a Python number: torch fills through the mask (masked_fill)
            return "boolean-mask assignment gives a shape that depends on tensor values"
        if from_host(values):
            return "assignment through an index copies its Python value from the host"
    if torch.Tag.dynamic_output_shape in getattr(func, "tags", ()):
        sized_by = SIZED_BY_ARGUMENT.get(name)
        if sized_by is not None and _argument(func, args, kwargs, sized_by) is not None:
            return None
        if name == "index" and not _has_bool_index(tuple(_argument(func, args, kwargs, "indices"))):
            return None  # integer indices: the output takes their shape
        return f"aten.{name} gives an output whose shape depends on tensor values"
    return None


def _argument(func, args: tuple, kwargs: dict, name: str):
    for position, argument in enumerate(func._schema.arguments):
        if argument.name == name:
            if name in kwargs:
                return kwargs[name]
            return args[position] if position < len(args) else argument.default_value
    raise KeyError(f"{func} has no argument {name!r}")


def _called_from_vllm_cpu_kernel() -> bool:
    """vLLM's CPU kernels allocate their outputs without a device (the CPU is the default);
    on a GPU those kernels do not run. Model code is what the rule is for."""
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename == __file__ or frame.f_code.co_filename.startswith(_TORCH_DIR)):
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith(_VLLM_DIR)


_TORCH_DIR = os.path.dirname(torch.__file__)


def _names_host(value) -> bool:
    return isinstance(value, str) and value.split(":")[0] == "cpu"


def _has_bool_index(index) -> bool:
    indices = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices)


def _package_dir(name: str) -> str:
    import importlib.util

    spec = importlib.util.find_spec(name)
    return os.path.dirname(spec.origin) if spec and spec.origin else "\0"


_VLLM_DIR = _package_dir("vllm")


class _StrictCapture(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        problem = capture_refusal(func, args, kwargs)
        if problem is not None:
            raise CaptureRefused(f"{problem}, which CUDA graph capture refuses")
        return func(*args, **kwargs)


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
        problem = operator_refusal(func, args, kwargs, self._from_host)
        if problem is not None:
            raise CaptureRefused(f"{problem}, which CUDA graph capture refuses")
        out = func(*args, **kwargs)
        index = len(self.graph.ops)

        def reference(value):
            if isinstance(value, torch.Tensor):
                return self.made.get(id(value), value)
            return value

        self.graph.ops.append((func, tree_map(reference, args), tree_map(reference, kwargs)))
        self._remember(out, index, ())
        return out

    def _from_host(self, value) -> bool:
        made = self.made.get(id(value)) if isinstance(value, torch.Tensor) else None
        return made is not None and self.graph.ops[made.op][0] is torch.ops.aten.lift_fresh.default

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
    """Stands in for `torch.cuda.graph(graph, pool=..., stream=...)`: records into `graph`,
    refusing what CUDA capture refuses (`CaptureRefused`)."""
    recorder = _Recorder(graph)
    try:
        with _StrictCapture(), recorder:
            yield
    finally:
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
