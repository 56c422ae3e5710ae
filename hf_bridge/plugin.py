"""The vLLM plugin: registration and the off switch.

vLLM runs every `vllm.general_plugins` entry point in each of its processes (the
engine core and the workers included) before it resolves a model class. `register`
points the names vLLM resolves `model_impl="transformers"` to, for multimodal
checkpoints, at hf_bridge's classes (generation, and pooling: `pooling.py`), and adds
hf_bridge's own names.

A checkpoint whose config is flat (no `vision_config`) but whose processor takes media,
such as Chameleon's, resolves to vLLM's text-only `TransformersForCausalLM`; vLLM has
no hook for that choice, so `register` wraps the registry's resolution of the
Transformers backend class on its instance, and routes exactly those checkpoints to
hf_bridge. Text-only checkpoints keep vLLM's own class.

Whether hf_bridge can place a checkpoint's items is decided there too, once, at engine
start (`unplaceable`): a checkpoint whose processor hf_bridge cannot probe for any
modality is served by vLLM's in-tree backend class, exactly as without hf_bridge, and
the reason is logged. Installing hf_bridge never takes a model away.

`register` also keeps an in-process engine's successor alive when the old one is freed
after it (`engine_lifetime.py`), keeps each engine at the OpenMP thread count the
process's first engine had (`engine_threads.py`), keeps an engine serving after Ctrl-C
stops a call (`interrupted_calls.py`), gives prompts without media the tokens the HF
processor adds to every prompt (`text_only_prompts.py`), and lets a CPU engine start in
a process that imported numba (`kernel_rebind_scan.py`).

`HF_BRIDGE_DISABLE=1` registers nothing, so vLLM's in-tree backend stays in charge.
hf_bridge never replaces vLLM's `"vllm"` attention function: its model wraps it with one
check, that no attention term is dropped (`attention_terms.py`), and hands the answer on
in transformers' shape (`attention_shape.py`).
"""

from __future__ import annotations

import os

OWN_ARCHITECTURE = "HFBridgeForConditionalGeneration"
"""Select hf_bridge explicitly: `hf_overrides={"architectures": [OWN_ARCHITECTURE]}`."""
OWN_MOE_ARCHITECTURE = "HFBridgeMoEForConditionalGeneration"
"""hf_bridge with vLLM's fused-MoE layers for the experts (`MoEMixin`)."""
OWN_CLASSES = {
    OWN_ARCHITECTURE: "hf_bridge.model:HFBridgeForConditionalGeneration",
    OWN_MOE_ARCHITECTURE: "hf_bridge.model:HFBridgeMoEForConditionalGeneration",
    "HFBridgeEmbeddingModel": "hf_bridge.pooling:HFBridgeEmbeddingModel",
    "HFBridgeMoEEmbeddingModel": "hf_bridge.pooling:HFBridgeMoEEmbeddingModel",
    "HFBridgeForSequenceClassification": "hf_bridge.pooling:HFBridgeForSequenceClassification",
}
"""hf_bridge's architecture names, and the class each loads (with `CARRYING_STATE`'s)."""
CARRYING_STATE = {
    OWN_ARCHITECTURE: "HFBridgeHybridForConditionalGeneration",
    OWN_MOE_ARCHITECTURE: "HFBridgeHybridMoEForConditionalGeneration",
    "HFBridgeEmbeddingModel": "HFBridgeHybridEmbeddingModel",
    "HFBridgeMoEEmbeddingModel": "HFBridgeHybridMoEEmbeddingModel",
    "HFBridgeForSequenceClassification": "HFBridgeHybridForSequenceClassification",
}
"""hf_bridge's class with vLLM state slots (`state_layers.py`), for a model whose decoder
layers carry a state from step to step; each in the module of the class it extends."""
OWN_CLASSES |= {hybrid: OWN_CLASSES[own].rsplit(":", 1)[0] + ":" + hybrid for own, hybrid in CARRYING_STATE.items()}
OVERRIDDEN_ARCHITECTURES = {
    "TransformersMultiModalForCausalLM": OWN_ARCHITECTURE,
    "TransformersMultiModalMoEForCausalLM": OWN_MOE_ARCHITECTURE,
    "TransformersMultiModalEmbeddingModel": "HFBridgeEmbeddingModel",
    "TransformersMultiModalForSequenceClassification": "HFBridgeForSequenceClassification",
}
"""vLLM's multimodal Transformers-backend names, and hf_bridge's class for each."""
UNSERVED_ARCHITECTURES = {
    "TransformersMultiModalMoEEmbeddingModel": "HFBridgeMoEEmbeddingModel",
}
"""Names vLLM resolves an MoE VLM's embedding checkpoint to but has no class for: without
hf_bridge it then serves its native model, `model_impl="transformers"` notwithstanding.
(transformers 5.19 has no `...ForSequenceClassification` class for a multimodal MoE
config, so there is no MoE classifier to serve.)"""
DENSE_ARCHITECTURES = {
    OWN_MOE_ARCHITECTURE: OWN_ARCHITECTURE,
    "HFBridgeMoEEmbeddingModel": "HFBridgeEmbeddingModel",
    CARRYING_STATE[OWN_MOE_ARCHITECTURE]: CARRYING_STATE[OWN_ARCHITECTURE],
    CARRYING_STATE["HFBridgeMoEEmbeddingModel"]: CARRYING_STATE["HFBridgeEmbeddingModel"],
}
"""hf_bridge's class without vLLM's fused-MoE layers, for each of its MoE classes."""
TEXT_ONLY_ARCHITECTURES = {
    "TransformersForCausalLM": OWN_ARCHITECTURE,
    "TransformersMoEForCausalLM": OWN_MOE_ARCHITECTURE,
    "TransformersEmbeddingModel": "HFBridgeEmbeddingModel",
    "TransformersMoEEmbeddingModel": "HFBridgeMoEEmbeddingModel",
}
"""What vLLM resolves a flat config to, and hf_bridge's class for one that takes media."""
IN_TREE_CLASSES = "vllm.model_executor.models.transformers:{}"
IN_TREE_FALLBACK = "HFBridgeInTree{}"
"""vLLM's own multimodal classes stay reachable under these names: checkpoints whose
items hf_bridge cannot place are routed to them."""
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
    for name, own in OVERRIDDEN_ARCHITECTURES.items():
        ModelRegistry.register_model(name, OWN_CLASSES[own])
        ModelRegistry.register_model(IN_TREE_FALLBACK.format(name), IN_TREE_CLASSES.format(name))
    for own, cls in OWN_CLASSES.items():
        ModelRegistry.register_model(own, cls)
    _route_transformers_backend(ModelRegistry)
    _register_config_updates()
    from . import engine_lifetime, engine_threads, interrupted_calls, kernel_rebind_scan, text_only_prompts

    engine_lifetime.install()
    engine_threads.install()
    interrupted_calls.install()
    text_only_prompts.install()
    kernel_rebind_scan.install()


def _route_transformers_backend(registry) -> None:
    """Wrap the registry's resolution of Transformers-backend classes (vLLM has no hook)."""
    resolve = registry._try_resolve_transformers
    if getattr(resolve, "hf_bridge", False):  # plugins load once per process, but be safe
        return

    def resolve_transformers(architecture, model_config):
        if architecture in OWN_CLASSES:  # asked again for the class it resolved to (vLLM's hybrid-model setup)
            return architecture
        from .hf_classes import transformers_architecture

        loaded_as = transformers_architecture(architecture, model_config.hf_config)
        if loaded_as != architecture and model_config.runner == "auto" and _runner_by_name(architecture) == "pooling":
            from .errors import renamed_architecture_read_as_pooling

            raise ValueError(renamed_architecture_read_as_pooling(architecture, loaded_as))
        return route(resolve(loaded_as, model_config), model_config)

    resolve_transformers.hf_bridge = True  # type: ignore[attr-defined]
    registry._try_resolve_transformers = resolve_transformers


def _runner_by_name(architecture: str) -> str | None:
    """The runner vLLM gives `architecture` by its name's suffix (`...Model`: pooling)."""
    from vllm.config.model import try_match_architecture_defaults

    defaults = try_match_architecture_defaults(architecture)
    return defaults[1][0] if defaults else None


def _register_config_updates() -> None:
    """vLLM's per-architecture config hook, for hf_bridge's names (`KeepMediaItemsWhole`,
    `CarriedStateConfig`), each followed by `per_request_rope.keep_frequencies_per_request`
    and `cpu_mla_backend.reference_mla_for_float32`."""
    from vllm.model_executor.models.config import MODELS_CONFIG_MAP

    from .bidirectional import KeepMediaItemsWhole
    from .cpu_mla_backend import reference_mla_for_float32
    from .per_request_rope import keep_frequencies_per_request
    from .state_layers import CarriedStateConfig

    def then_own_updates(hook):
        class Hook(hook):
            @staticmethod
            def verify_and_update_config(vllm_config) -> None:
                hook.verify_and_update_config(vllm_config)
                keep_frequencies_per_request(vllm_config)
                reference_mla_for_float32(vllm_config)

        Hook.__name__ = Hook.__qualname__ = hook.__name__
        return Hook

    hooks = {hook: then_own_updates(hook) for hook in (KeepMediaItemsWhole, CarriedStateConfig)}
    for own in OWN_CLASSES:
        MODELS_CONFIG_MAP.setdefault(own, hooks[CarriedStateConfig if own in CARRYING_STATE.values() else KeepMediaItemsWhole])


def route(arch: str | None, model_config) -> str | None:
    """hf_bridge's class for what vLLM resolved, or vLLM's own where hf_bridge cannot place items."""
    if arch in OVERRIDDEN_ARCHITECTURES:
        own, in_tree = OVERRIDDEN_ARCHITECTURES[arch], IN_TREE_FALLBACK.format(arch)
    elif arch in UNSERVED_ARCHITECTURES:
        own, in_tree = UNSERVED_ARCHITECTURES[arch], arch
    elif arch in TEXT_ONLY_ARCHITECTURES and has_media_processor(model_config.model, model_config.revision):
        own, in_tree = TEXT_ONLY_ARCHITECTURES[arch], arch
    else:
        return arch
    if model_config.trust_remote_code:
        from .hf_classes import mark_trusted_code

        mark_trusted_code(model_config.hf_config)
    failures = unplaceable(model_config)
    if failures is None:
        from .bidirectional import mark_bidirectional

        mark_bidirectional(model_config.hf_config)
        from .hf_classes import config_built_from

        built_from = config_built_from(model_config)
        return dense_where_transformers_counts_no_experts(carrying_state_where_layers_do(own, built_from), model_config, built_from)
    from vllm.logger import init_logger

    from . import LOGGER_NAME
    from .errors import routed_to_in_tree

    init_logger(LOGGER_NAME).warning_once(routed_to_in_tree(failures, in_tree))
    return in_tree


def unplaceable(model_config) -> dict[str, str] | None:
    """None if hf_bridge can place the checkpoint's items for at least one modality,
    else why not, per modality (the processor's own errors). Probed once per checkpoint
    and process, with the processor's default kwargs."""
    key = (model_config.model, model_config.revision)
    if key not in _PLACEMENT:
        _PLACEMENT[key] = _probe_placement(model_config)
    return _PLACEMENT[key]


def carrying_state_where_layers_do(own: str, built_from) -> str:
    """hf_bridge's class with state slots where some decoder layers of the config the model
    is built from (`hf_classes.config_built_from`) carry a state from step to step
    (`state_layers.py`)."""
    from .attention_terms import layers_with_carried_state

    if own not in CARRYING_STATE or not layers_with_carried_state(built_from):
        return own
    return CARRYING_STATE[own]


def dense_where_transformers_counts_no_experts(own: str, model_config, built_from) -> str:
    """hf_bridge's dense class where vLLM counted experts in its own config class but the
    config hf_bridge builds the HF model from (`built_from`, transformers' own) has none:
    vLLM's class for Cosmos3-Edge is a Nemotron-H config, whose default counts 8 experts."""
    dense = DENSE_ARCHITECTURES.get(own)
    if dense is None or built_from is model_config.hf_config:
        return own
    from vllm.transformers_utils.model_arch_config_convertor import ModelArchConfigConvertorBase

    text_config = built_from.get_text_config()
    if ModelArchConfigConvertorBase(text_config, text_config).get_num_experts():
        return own
    from vllm.logger import init_logger

    from . import LOGGER_NAME

    init_logger(LOGGER_NAME).info_once(
        "hf_bridge serves %s without fused experts: vLLM's %s counts %d, transformers' %s (which hf_bridge builds) none",
        model_config.hf_config.model_type, type(model_config.hf_config).__name__, model_config.get_num_experts(),
        type(built_from).__name__)
    return dense


_PLACEMENT: dict[tuple[str, str | None], dict[str, str] | None] = {}


def _probe_placement(model_config) -> dict[str, str] | None:
    from vllm.transformers_utils.processor import cached_get_processor

    from .hf_classes import config_built_from
    from .processing import hf_processor_class
    from .processor_probe import ProcessorProbe

    try:
        # vLLM's processing loads the same processor with these very arguments first
        # (`cached_get_processor_without_dynamic_kwargs`): its cache then answers, so
        # routing adds no read of the checkpoint's processor and tokenizer
        processor = cached_get_processor(
            model_config.model, revision=model_config.revision, trust_remote_code=model_config.trust_remote_code,
            processor_cls=hf_processor_class(model_config.model, model_config.revision),
        )
    except Exception as exc:  # noqa: BLE001 - vLLM's own backend reports this itself
        return {"processor": f"{type(exc).__name__}: {exc}"}
    tokenizer = getattr(processor, "tokenizer", None)
    if tokenizer is None:
        return {"processor": f"{type(processor).__name__} has no tokenizer"}
    call = lambda data, kw: processor(**data, **kw, return_tensors="pt")  # noqa: E731
    probe = ProcessorProbe(processor, tokenizer, config_built_from(model_config), call=call)
    if probe.placeable():
        return None
    return probe.failures or {"processor": f"{type(processor).__name__} has no image, video or audio processor"}


def has_media_processor(model: str, revision: str | None = None) -> bool:
    from vllm.transformers_utils.repo_utils import file_or_path_exists

    return any(file_or_path_exists(model, name, revision) for name in PROCESSOR_FILES)
