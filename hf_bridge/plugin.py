"""The vLLM plugin: registration and the off switch.

vLLM runs every `vllm.general_plugins` entry point in each of its processes (the
engine core and the workers included) before it resolves a model class. `register`
points the names vLLM resolves `model_impl="transformers"` to, for multimodal
checkpoints, at hf_bridge's class, and adds hf_bridge's own name.

A checkpoint whose config is flat (no `vision_config`) but whose processor takes media,
such as Chameleon's, resolves to vLLM's text-only `TransformersForCausalLM`; vLLM has
no hook for that choice, so `register` wraps the registry's resolution of the
Transformers backend class on its instance, and routes exactly those checkpoints to
hf_bridge. Text-only checkpoints keep vLLM's own class.

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


TEXT_ONLY_ARCHITECTURES = ("TransformersForCausalLM", "TransformersMoEForCausalLM")
PROCESSOR_FILES = ("preprocessor_config.json", "video_preprocessor_config.json", "processor_config.json")
"""A checkpoint with one of these has a processor for media, not only a tokenizer."""


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
    _route_flat_multimodal_configs(ModelRegistry)


def _route_flat_multimodal_configs(registry) -> None:
    resolve = registry._try_resolve_transformers
    if getattr(resolve, "hf_bridge", False):  # plugins load once per process, but be safe
        return

    def resolve_transformers(architecture, model_config):
        arch = resolve(architecture, model_config)
        if arch in TEXT_ONLY_ARCHITECTURES and has_media_processor(model_config.model, model_config.revision):
            return OWN_ARCHITECTURE
        return arch

    resolve_transformers.hf_bridge = True  # type: ignore[attr-defined]
    registry._try_resolve_transformers = resolve_transformers


def has_media_processor(model: str, revision: str | None = None) -> bool:
    from vllm.transformers_utils.repo_utils import file_or_path_exists

    return any(file_or_path_exists(model, name, revision) for name in PROCESSOR_FILES)
