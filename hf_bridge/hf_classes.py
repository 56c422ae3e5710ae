"""What a config's HF base model class takes, read from transformers (no vLLM import)."""

from __future__ import annotations

import inspect


def base_model_class(config) -> type | None:
    """The class `AutoModel` builds for `config`, or None where transformers has none by
    that name (a remote-code model)."""
    import transformers
    from transformers.models.auto import modeling_auto

    name = modeling_auto.MODEL_MAPPING_NAMES.get(getattr(config, "model_type", ""))
    return getattr(transformers, name, None) if isinstance(name, str) else None


def forward_takes(cls: type | None, argument: str) -> bool:
    """Whether `cls.forward` names `argument` (one that `**kwargs` would swallow does not count)."""
    return cls is not None and argument in inspect.signature(cls.forward).parameters
