"""Linear inputs in the layout vLLM's CPU kernels take (no vLLM import).

vLLM's CPU linear layers hand their input to oneDNN, which takes only a contiguous last
dimension (`a.stride(-1) == 1`), where torch's `F.linear` takes any view. HF modules
feed linears transposed views (Gemma 4's audio tower transposes around a depthwise
convolution), which raised inside the engine. On the CPU, each such input is copied
into that layout first; an input already in it passes untouched.

vLLM's native models hand a linear layer rows, (tokens, hidden); HF modules hand it
(batch, tokens, hidden). vLLM's quantized CPU kernels on a CPU with AMX tiles (its W8A8
int8 kernel) take rows only (`mat1 must be a 2D tensor`, at the first forward), so a
quantized layer is handed rows and gives back the leading dimensions it was called with.
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


def as_rows(layer: torch.nn.Module) -> None:
    """Call `layer` with its input flattened to rows, and give its output (or the first of
    the outputs it returns) the input's leading dimensions back."""
    forward = layer.forward

    def on_rows(x: torch.Tensor, *args, **kwargs):
        if x.ndim <= 2:
            return forward(x, *args, **kwargs)
        output = forward(x.reshape(-1, x.shape[-1]), *args, **kwargs)
        if isinstance(output, tuple):
            return (output[0].reshape(*x.shape[:-1], -1), *output[1:])
        return output.reshape(*x.shape[:-1], -1)

    layer.forward = on_rows


def quantized_linears_on_rows(model: torch.nn.Module, linear_types: tuple[type, ...], unquantized: type) -> int:
    """`as_rows` for every `linear_types` layer of `model` whose `quant_method` is not an
    `unquantized` one; returns how many."""
    layers = [m for m in model.modules()
              if isinstance(m, linear_types) and not isinstance(getattr(m, "quant_method", None), (unquantized, type(None)))]
    for layer in layers:
        as_rows(layer)
    return len(layers)
