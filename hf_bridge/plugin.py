"""The vLLM plugin: registration and the off switch.

vLLM runs every `vllm.general_plugins` entry point in each of its processes (the
engine core and the workers included) before it resolves a model class. `register`
points the names vLLM resolves `model_impl="transformers"` to, for multimodal
checkpoints, at hf_bridge's class, and adds hf_bridge's own name.

`HF_BRIDGE_DISABLE=1` registers nothing, so vLLM's in-tree backend stays in charge;
hf_bridge never replaces vLLM's `"vllm"` attention function, only reuses it.
"""

from __future__ import annotations

import os

MODEL_CLASS = "hf_bridge.model:HFBridgeForConditionalGeneration"
OWN_ARCHITECTURE = "HFBridgeForConditionalGeneration"
"""Select hf_bridge explicitly: `hf_overrides={"architectures": [OWN_ARCHITECTURE]}`."""
OVERRIDDEN_ARCHITECTURES = (
    "TransformersMultiModalForCausalLM",
    "TransformersMultiModalMoEForCausalLM",
)


def is_disabled() -> bool:
    return os.environ.get("HF_BRIDGE_DISABLE", "").strip().lower() in {"1", "true", "yes", "on"}


def register() -> None:
    if is_disabled():
        return
    from vllm import ModelRegistry

    from .versions import check_versions

    check_versions()
    for name in (*OVERRIDDEN_ARCHITECTURES, OWN_ARCHITECTURE):
        ModelRegistry.register_model(name, MODEL_CLASS)
