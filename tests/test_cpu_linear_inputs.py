"""Linear inputs in the layout vLLM's CPU kernels take (`cpu_linear_inputs.py`), against a
stand-in exactly as strict as oneDNN's check (the real kernel runs in Gemma 4's audio case,
`test_sweep_types.py`)."""

from __future__ import annotations

import torch

from hf_bridge.cpu_linear_inputs import contiguous_linear_inputs


class StrictLinear(torch.nn.Linear):
    """Refuses what vLLM's CPU `onednn_mm` refuses: a last dimension that is not contiguous."""

    def forward(self, x):
        if x.stride(-1) != 1:
            raise RuntimeError("Expected a.stride(-1) == 1 to be true, but got false.")
        return super().forward(x)


def test_transposed_views_reach_the_kernel_contiguous_and_give_the_same_output():
    torch.manual_seed(0)
    model = torch.nn.Sequential(StrictLinear(6, 3), torch.nn.Linear(3, 3))
    assert contiguous_linear_inputs(model, (StrictLinear,)) == 1
    view = torch.randn(2, 6, 5).transpose(1, 2)  # (2, 5, 6), last dimension strided
    assert view.stride(-1) != 1
    expected = torch.nn.functional.linear(view, model[0].weight, model[0].bias)
    assert torch.equal(model[0](view), expected)


def test_inputs_already_in_layout_pass_untouched():
    layer = torch.nn.Linear(4, 4)
    contiguous_linear_inputs(layer, (torch.nn.Linear,))
    seen = []
    layer.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    x = torch.randn(3, 4)
    layer(x)
    assert seen[0] is x


def test_a_quantized_layer_is_handed_rows_and_gives_back_the_leading_dimensions():
    """vLLM's AMX int8 kernel takes rows only; HF modules hand (batch, tokens, hidden)."""
    from hf_bridge.cpu_linear_inputs import quantized_linears_on_rows

    class Unquantized:
        pass

    class Quantized:
        pass

    class RowsOnly(torch.nn.Linear):
        def forward(self, x):
            assert x.ndim == 2, x.shape
            return super().forward(x)

    quantized, plain = RowsOnly(4, 3), torch.nn.Linear(4, 3)
    quantized.quant_method, plain.quant_method = Quantized(), Unquantized()
    model = torch.nn.Sequential(quantized, torch.nn.Linear(3, 4), plain)
    assert quantized_linears_on_rows(model, (torch.nn.Linear,), Unquantized) == 1, "quantized layers only"
    x = torch.randn(1, 5, 4)
    assert torch.equal(quantized(x), torch.nn.functional.linear(x, quantized.weight, quantized.bias))
    assert quantized(x).shape == (1, 5, 3) and quantized(x[0]).shape == (5, 3)
