"""The wrapper's module handling (needs vLLM, no engine)."""


def test_only_torch_composites_are_kept_from_layer_replacement():
    """nn.MultiheadAttention is hidden from vLLM's replacement; plain layers are not."""
    import torch

    from hf_bridge.model import _torch_composites

    root = torch.nn.Module()
    root.proj = torch.nn.Linear(4, 4)
    root.pool = torch.nn.MultiheadAttention(4, 2)
    root.stack = torch.nn.Sequential(torch.nn.Linear(4, 4))
    root.norm = torch.nn.LayerNorm(4)
    assert [name for _, name, _ in _torch_composites(root)] == ["pool"]
