"""A LoRA adapter for a checkpoint's text model, and the checkpoint with it merged (a
subprocess: an in-process engine changes HF classes).

The adapter is what PEFT writes for `target_modules=TARGETS` (rank RANK, alpha ALPHA, no
rslora or DoRA): `base_model.model.<module>.lora_A/B.weight` for each of the text model's
linears so named. The merged checkpoint holds W + (alpha / rank) * B @ A in each, and the
same processor files.

    python tests/helpers/lora_adapter.py MODEL_DIR ADAPTER_DIR MERGED_DIR
"""

import json
import sys
from pathlib import Path

import torch

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
RANK = 8
ALPHA = 16
SCALE = 0.3
"""Of the random factors: large enough that the adapted model's tokens differ from the base's."""


def main():
    from safetensors.torch import save_file

    from hf_bridge.validate import parity
    from hf_bridge.zoo.variant import variant

    model_dir, adapter_dir, merged_dir = (Path(a) for a in sys.argv[1:4])
    model = parity.load_generation_model(model_dir)
    text_model = model.get_decoder()
    text_name = next(name for name, module in model.named_modules() if module is text_model)
    generator = torch.Generator().manual_seed(0)
    tensors = {}
    with torch.no_grad():
        for name, module in text_model.named_modules():
            if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in TARGETS:
                a = torch.randn(RANK, module.in_features, generator=generator) * SCALE
                b = torch.randn(module.out_features, RANK, generator=generator) * SCALE
                tensors[f"base_model.model.{text_name}.{name}.lora_A.weight"] = a
                tensors[f"base_model.model.{text_name}.{name}.lora_B.weight"] = b
                module.weight += (b @ a) * (ALPHA / RANK)
    assert tensors, f"no {TARGETS} linears in {type(text_model).__name__}"
    adapter_dir.mkdir(parents=True)
    save_file(tensors, adapter_dir / "adapter_model.safetensors")
    (adapter_dir / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": RANK, "lora_alpha": ALPHA, "target_modules": list(TARGETS),
        "bias": "none", "fan_in_fan_out": False, "use_rslora": False, "use_dora": False,
    }))
    variant(model_dir, merged_dir)  # the processor's files
    for linked in merged_dir.glob("*.safetensors"):
        linked.unlink()  # the original's: written through, it would change the original
    model.save_pretrained(merged_dir)


if __name__ == "__main__":
    main()
