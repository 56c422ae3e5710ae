"""What a config's HF classes are and take, read from transformers (no vLLM import)."""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import types
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

REMOTE_CODE_PACKAGE = "transformers_modules"
"""Where transformers imports a checkpoint's own code from, once the user trusts it."""
TRUSTED_CODE_MARK = "_hf_bridge_trusts_own_code"
"""Set on a config whose checkpoint's code the engine was told to trust (vLLM's
`trust_remote_code`) although the config is transformers' own class, which records no trust."""
SUB_CONFIG_SUFFIX = "_config"
"""transformers' name for a sub-model's config: `thinker_config` configures `thinker`."""
GENERATION_AUTO_CLASSES = ("AutoModelForImageTextToText", "AutoModelForMultimodalLM", "AutoModelForVision2Seq", "AutoModelForCausalLM")
"""The `auto_map` keys a checkpoint's own generation class may sit under, in the order
hf_bridge prefers them (`AutoModelForVision2Seq` is transformers 4's name, still on the hub)."""


def base_model_class(config) -> type | None:
    """The class `AutoModel` builds for `config`: the checkpoint's own (remote code), else
    transformers' by model type, else its only class (`generation_class_alone`), or None
    where there is none."""
    import transformers
    from transformers.models.auto import modeling_auto

    own = remote_code_class(config, "AutoModel")
    if own is not None:
        return own
    name = modeling_auto.MODEL_MAPPING_NAMES.get(getattr(config, "model_type", ""))
    return getattr(transformers, name, None) if isinstance(name, str) else generation_class_alone(config)


def takes_attention_functions(cls: type) -> bool:
    """Whether transformers can hand `cls` another attention function, vLLM's `"vllm"`
    included: it declares the attention backend, or its attention modules call the
    attention interface (transformers' own test, which vLLM's registry applies to the
    class a checkpoint names)."""
    return bool(cls.is_backend_compatible() or cls._can_set_attn_implementation())


def text_model_computing_its_own_attention(config) -> type | None:
    """The class of `config`'s text model where it is a model of its own that computes
    its attention itself (Falcon, BLOOM, GPT-J, MPT...), which vLLM's registry does not
    look into: it checks the class the checkpoint names (LLaVA's). None otherwise."""
    text = config.get_text_config()
    cls = base_model_class(text) if text is not config else None
    return cls if cls is not None and not takes_attention_functions(cls) else None


def generation_class_alone(config) -> type | None:
    """transformers' generation class for a model type that has no base model class, or
    None: Nemotron-H-Omni's one class holds its towers and a whole generation model as its
    language model, head included, so `AutoModel` has nothing to build
    (`register_generation_class_alone`)."""
    from transformers.models.auto import modeling_auto

    model_type = getattr(config, "model_type", "")
    if model_type in modeling_auto.MODEL_MAPPING_NAMES or remote_code_class(config, "AutoModel") is not None:
        return None
    return multimodal_generation_class(model_type)


def register_generation_class_alone(config) -> type | None:
    """Let `AutoModel` build `generation_class_alone(config)` in this process, as vLLM's
    Transformers backend builds every model through `AutoModel.from_config`; the class,
    or None where `AutoModel` has one already. Its language model then runs to its hidden
    states (`nested_head.py`), so the class's own forward returns them."""
    cls = generation_class_alone(config)
    if cls is not None:
        from transformers import AutoModel

        AutoModel.register(type(config), cls, exist_ok=True)
    return cls


class TextGenerationDelegate(NamedTuple):
    """The model a whole model generates its text with (`text_generation_delegate`)."""

    attribute: str
    """Its name in the whole model, and the prefix of its checkpoint weights."""
    config: Any


def text_generation_delegate(config) -> TextGenerationDelegate | None:
    """Where a model type's generation class has no forward of its own and hands text
    generation to one of its models (Qwen2.5-Omni's and Qwen3-Omni-MoE's `thinker` writes
    the text, which their `talker` speaks): that model, read from the config. It is the one
    sub-config whose model type has a multimodal generation class, and the whole model
    builds it under the sub-config's name (`thinker_config` builds `thinker`). None for any
    other config."""
    import torch

    cls = multimodal_generation_class(getattr(config, "model_type", None))
    if cls is None or cls.forward is not torch.nn.Module.forward:
        return None
    generating = [name for name in getattr(config, "sub_configs", {})
                  if multimodal_generation_class(getattr(getattr(config, name, None), "model_type", None)) is not None]
    if len(generating) != 1 or not generating[0].endswith(SUB_CONFIG_SUFFIX):
        return None
    return TextGenerationDelegate(generating[0].removesuffix(SUB_CONFIG_SUFFIX), getattr(config, generating[0]))


def transformers_architecture(architecture: str, config) -> str:
    """`architecture`, or where transformers has no class of that name and the checkpoint
    brings no code of its own, its model type's multimodal generation class, the class
    transformers loads it as (Qwen2.5-Omni's checkpoints name `Qwen2_5OmniModel`, which
    transformers 5 does not have)."""
    import transformers

    if hasattr(transformers, architecture) or (getattr(config, "auto_map", None) or {}):
        return architecture
    cls = multimodal_generation_class(getattr(config, "model_type", None))
    return architecture if cls is None else cls.__name__


def generating_config(config):
    """The config of the model that generates the text: `config`'s
    `text_generation_delegate`'s, else `config` itself."""
    delegate = text_generation_delegate(config)
    return config if delegate is None else delegate.config


def delegated_weights(weights: Iterable[tuple[str, Any]], prefix: str) -> Iterator[tuple[str, Any]]:
    """A whole model's checkpoint weights under `prefix` (its `text_generation_delegate`'s
    attribute and a dot), named as that model alone names them; the other models' are left
    out, as vLLM serves none of them (Qwen2.5-Omni's talker and token2wav speak the text)."""
    for name, tensor in weights:
        if name.startswith(prefix):
            yield name[len(prefix):], tensor


def multimodal_generation_class(model_type: str | None):
    """The multimodal class a transformers user generates with for `model_type`:
    image-text-to-text, else multimodal LM (audio-language models), else a decoder-only
    class with a media entry that transformers lists as sequence-to-sequence only (Audio
    Flamingo 3's, `AutoModelForSeq2SeqLM`), or None."""
    import transformers
    from transformers.models.auto import modeling_auto

    for mapping in (
        modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
        modeling_auto.MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES,
    ):
        name = mapping.get(model_type)
        if isinstance(name, str) and hasattr(transformers, name):
            return getattr(transformers, name)
    name = modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    cls = getattr(transformers, name, None) if isinstance(name, str) else None
    if cls is not None and _has_media_entry(cls) and not _is_encoder_decoder(model_type):
        return cls
    return None


def _has_media_entry(cls: type) -> bool:
    from .features import features_entry_name
    from .probes import MODALITIES

    return any(features_entry_name(cls, modality) is not None for modality in MODALITIES)


@functools.cache
def _is_encoder_decoder(model_type: str) -> bool:
    """Whether the model type's default config is an encoder-decoder (Whisper's,
    T5's), which vLLM's Transformers backend does not serve."""
    from transformers import CONFIG_MAPPING

    try:
        return bool(getattr(CONFIG_MAPPING[model_type](), "is_encoder_decoder", False))
    except Exception:  # noqa: BLE001 - a config with no defaults: not taken, as before
        return True


def mark_trusted_code(config) -> None:
    """Record on `config` that the user trusts its checkpoint's code: vLLM's
    `AutoModel.from_config(..., trust_remote_code=True)` then builds the classes its
    `auto_map` names, whatever the config's own class."""
    setattr(config, TRUSTED_CODE_MARK, True)


def trusts_own_code(config) -> bool:
    """Whether the user trusted `config`'s checkpoint code: by loading a config class of
    its own (`trust_remote_code`), or as `mark_trusted_code` records."""
    return type(config).__module__.startswith(REMOTE_CODE_PACKAGE) or bool(getattr(config, TRUSTED_CODE_MARK, False))


def remote_code_class(config, auto_class: str) -> type | None:
    """The checkpoint's own class for transformers' `auto_class`, imported from the code
    beside it as transformers' auto classes import it, or None where `auto_map` names none.

    Only where the user trusted that code (`trusts_own_code`): transformers' auto classes
    then build the checkpoint's classes, as vLLM's `AutoModel.from_config` does."""
    reference = (getattr(config, "auto_map", None) or {}).get(auto_class)
    if not reference or not trusts_own_code(config):
        return None
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    # "other/repo--module.Class" names code in another repository, at its own revision
    repository, _, class_reference = reference.rpartition("--")
    revision = None if repository else getattr(config, "_commit_hash", None)
    return get_class_from_dynamic_module(class_reference, repository or config.name_or_path, revision=revision)


def remote_generation_class(config) -> type | None:
    """The checkpoint's own generation class (`remote_code_class`), or None."""
    for auto_class in GENERATION_AUTO_CLASSES:
        own = remote_code_class(config, auto_class)
        if own is not None:
            return own
    return None


def transformers_config_class(model_type: str) -> type | None:
    """transformers' own config class for `model_type`, whatever has been registered under
    that name since: vLLM registers its own classes into `AutoConfig` when it loads such a
    checkpoint (Cosmos3-Edge's), so `AutoConfig` in that process builds vLLM's."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    name = CONFIG_MAPPING_NAMES.get(model_type)
    return getattr(transformers, name, None) if isinstance(name, str) else None


def transformers_own_config_at(config, checkpoint, **from_pretrained):
    """`config` as transformers' own class reads it from `checkpoint`, where it is of a class
    vLLM registered under its model type (`transformers_config_class`); None where it is
    transformers' own class, the checkpoint's own trusted code, or of a model type
    transformers does not ship."""
    own_class = transformers_config_class(getattr(config, "model_type", ""))
    if own_class is None or type(config) is own_class or trusts_own_code(config):
        return None
    return own_class.from_pretrained(checkpoint, **from_pretrained)


def transformers_own_config(config, model_config):
    """The checkpoint's config as transformers itself loads it, where vLLM loaded it as a
    class of its own: vLLM registers its own config class for some model types transformers
    also ships (Qwen3-ASR, MiniMax-M3-VL, Cosmos3-Edge), which transformers' `AutoModel`
    does not know or builds without fields its modules read. Read from the checkpoint with
    vLLM's `model_config` (path, revision) and the user's `hf_overrides`, as vLLM applies
    them. None where `config` is transformers' own class, the checkpoint's own trusted
    code, or of a model type transformers does not ship."""
    import transformers

    own = transformers_own_config_at(config, model_config.hf_config_path or model_config.model,
                                     revision=model_config.revision, token=getattr(model_config, "hf_token", None))
    if own is None:
        return None
    overrides = model_config.hf_overrides
    if callable(overrides):
        return overrides(own)
    for key, value in (overrides or {}).items():
        nested = getattr(own, key, None)
        if isinstance(nested, transformers.PreTrainedConfig) and isinstance(value, dict):
            nested.update(value)
        else:
            setattr(own, key, value)
    return own


def config_built_from(model_config):
    """The config hf_bridge builds the HF model from (`model_building.ModelBuildingMixin._patch_config`):
    transformers' own where vLLM loaded the checkpoint's as a class of its own and
    transformers' class reads it, else vLLM's; of a whole model that hands text generation
    to one of its models, that model's (`text_generation_delegate`). What the model holds
    (layers with a state, experts) is judged on it."""
    try:
        own = transformers_own_config(model_config.hf_config, model_config)
    except Exception:  # noqa: BLE001 - the model keeps vLLM's class, and says so when it builds
        own = None
    return generating_config(model_config.hf_config if own is None else own)


def forward_reads(cls: type | None, argument: str) -> bool:
    """Whether `cls.forward` takes `argument` and its body reads it (Gemma 3n's base model
    takes `token_type_ids`, as Gemma 3's does, and never reads them). Where its source cannot
    be read, taking it counts."""
    if not forward_takes(cls, argument):
        return False
    tree = method_tree(cls)
    if tree is None:
        return True
    return any(isinstance(node, ast.Name) and node.id == argument and isinstance(node.ctx, ast.Load) for node in ast.walk(tree))


def forward_passes(cls: type | None, argument: str) -> bool:
    """Whether `cls.forward` hands `argument` on by keyword (Gemma 3n's base model passes
    its text model `per_layer_inputs=`; LLaVA's passes none). Where its source cannot be
    read, it does not."""
    tree = method_tree(cls) if cls is not None else None
    return tree is not None and any(isinstance(node, ast.keyword) and node.arg == argument for node in ast.walk(tree))


def method_source(cls: type, name: str = "forward") -> str | None:
    """The source of `cls`'s method `name`, unwrapped from its decorators and dedented;
    None where there is none to read (no such method, a builtin, code without a file)."""
    function = getattr(cls, name, None)
    if not callable(function):
        return None
    try:
        return textwrap.dedent(inspect.getsource(inspect.unwrap(function)))
    except (OSError, TypeError):
        return None


def code_names(cls: type, name: str) -> frozenset[str]:
    """The attribute and global names `cls`'s method `name` (unwrapped) refers to, its nested
    functions' included: a method that calls `self.x(...)` names `x`. Read from its code
    object, so no source file is read: a class's methods, the inherited ones included, are
    hundreds, and reading each one's source (`method_source`) took 150 ms."""
    function = inspect.unwrap(getattr(cls, name, None))
    stack, names = [getattr(function, "__code__", None)], set()
    while stack:
        code = stack.pop()
        if code is not None:
            names.update(code.co_names)
            stack.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
    return frozenset(names)


def method_tree(cls: type, name: str = "forward") -> ast.AST | None:
    """`method_source` parsed; None where there is none, or it does not parse alone."""
    source = method_source(cls, name)
    try:
        return ast.parse(source) if source is not None else None
    except SyntaxError:
        return None


def forward_takes(cls: type | None, argument: str) -> bool:
    """Whether `cls.forward` names `argument` (one that `**kwargs` would swallow does not count)."""
    return cls is not None and argument in inspect.signature(cls.forward).parameters
