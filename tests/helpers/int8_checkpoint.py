"""A checkpoint's copy quantized as llm-compressor writes W8A8 int8 (compressed-tensors):
each decoder-layer linear's weight as int8 with one float scale per output channel,
activations quantized per token at run time; towers and the head left in float. vLLM's
CPU build runs it with its int8 kernels."""

from __future__ import annotations

from pathlib import Path

TOWER_WORDS = ("vision", "visual")
QUANTIZATION_CONFIG = {
    "quant_method": "compressed-tensors", "format": "int-quantized", "quantization_status": "compressed",
    "config_groups": {"group_0": {
        "targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel", "dynamic": False},
        "input_activations": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True},
    }},
    "ignore": ["lm_head", "re:.*vision.*", "re:.*visual.*", "re:.*multi_modal_projector.*"],
}


def quantized(name: str, tensor) -> bool:
    return name.endswith("proj.weight") and tensor.ndim == 2 and ".layers." in name and not any(w in name for w in TOWER_WORDS)


def w8a8_copy(model_dir: Path, into: Path) -> tuple[Path, int]:
    """(`into`, the number of linears quantized)."""
    import torch
    from safetensors.torch import load_file, save_file

    from hf_bridge.zoo.variant import variant

    weights = model_dir / "model.safetensors"
    variant(model_dir, into, config={"quantization_config": QUANTIZATION_CONFIG})
    (into / weights.name).unlink()  # the original's, linked: written through, it would change the original
    tensors = {}
    for name, tensor in load_file(weights).items():
        if quantized(name, tensor):
            scale = tensor.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127
            tensors[name] = torch.round(tensor / scale).clamp(-127, 127).to(torch.int8)
            tensors[name.removesuffix("weight") + "weight_scale"] = scale.float()
        else:
            tensors[name] = tensor
    save_file(tensors, into / weights.name)
    return into, sum(name.endswith("weight_scale") for name in tensors)
