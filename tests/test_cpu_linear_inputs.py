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
