"""Linear inputs in the layout vLLM's CPU kernels take (no vLLM import).

vLLM's CPU linear layers hand their input to oneDNN, which takes only a contiguous last
dimension (`a.stride(-1) == 1`), where torch's `F.linear` takes any view. HF modules
feed linears transposed views (Gemma 4's audio tower transposes around a depthwise
convolution), which raised inside the engine. On the CPU, each such input is copied
into that layout first; an input already in it passes untouched.
"""

from __future__ import annotations

import torch


def _last_dim_contiguous(module: torch.nn.Module, args: tuple) -> tuple | None:
    x = args[0] if args else None
    if isinstance(x, torch.Tensor) and x.ndim and x.stride(-1) != 1:
        return (x.contiguous(), *args[1:])
    return None


def contiguous_linear_inputs(model: torch.nn.Module, linear_types: tuple[type, ...]) -> int:
    """Hook every `linear_types` layer of `model`; returns how many were hooked."""
    layers = [m for m in model.modules() if isinstance(m, linear_types)]
    for layer in layers:
        layer.register_forward_pre_hook(_last_dim_contiguous)
    return len(layers)
