"""Building the HF model: the config it is built from (transformers' own class, one model
of a whole model), the compile twins vLLM marks instead of transformers' classes, towers
of unserved modalities left unbuilt where transformers allows, and the text model vLLM's
wrapper points at.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import cached_property

import torch
from vllm.compilation.wrapper import TorchCompileWithNoGuardsWrapper
from vllm.config.utils import getattr_iter
from vllm.logger import init_logger

from . import LOGGER_NAME, errors
from .attention_terms import layers_with_carried_state, layers_with_indexed_attention
from .compile_twin import built_as, twin
from .hf_classes import (forward_takes, generation_class_alone, multimodal_generation_class, register_generation_class_alone,
                         text_generation_delegate, transformers_own_config)
from .nested_head import decoder_of, generation_head
from .token_inputs import DYNAMIC_DIM as PER_LAYER_DYNAMIC_DIM
from .token_inputs import PER_LAYER_INPUTS_ARG

logger = init_logger(LOGGER_NAME)


TEXT_MODEL_NAMES = ("language_model", "text_model")
"""Where vLLM's `get_language_model` finds the HF base model's text model."""


class ModelBuildingMixin:
    """The HF model as vLLM's backend builds it, with transformers' classes left as they are."""

    delegate_prefix: str | None = None
    """The checkpoint names' prefix of the model built, where it is one model of a whole
    model (`hf_classes.text_generation_delegate`); set in `_patch_config`."""

    def _patch_config(self):
        """The HF model is built from the config transformers loads, where vLLM loaded the
        checkpoint's as a class of its own (`hf_classes.transformers_own_config`)."""
        try:
            own = transformers_own_config(self.config, self.model_config)
        except Exception as error:  # noqa: BLE001 - vLLM's class stays, as in the in-tree backend
            logger.warning("hf_bridge keeps vLLM's %s: transformers' own config class cannot read this checkpoint (%s: %s)",
                           type(self.config).__name__, type(error).__name__, error)
            own = None
        if own is not None:
            logger.info("hf_bridge builds %s from transformers' %s (vLLM loaded the config as %s.%s)",
                        self.config.model_type, type(own).__name__, type(self.config).__module__, type(self.config).__name__)
            self.config, self.text_config = own, own.get_text_config()
        if (delegate := text_generation_delegate(self.config)) is not None:
            logger.info("hf_bridge builds %s's %s, which writes its text (%s has no forward of its own); the other "
                        "models' weights are left out", self.config.model_type, delegate.attribute,
                        multimodal_generation_class(self.config.model_type).__name__)
            self.config, self.text_config = delegate.config, delegate.config.get_text_config()
            self.delegate_prefix = f"{delegate.attribute}."
            # as a checkpoint of that model alone names it (vLLM's experts read the name)
            self.config.architectures = self.config.architectures or [multimodal_generation_class(self.config.model_type).__name__]
        if (alone := register_generation_class_alone(self.config)) is not None:
            logger.info("hf_bridge builds %s, transformers' one class for %s (it has no base model class)",
                        alone.__name__, self.config.model_type)
        # judged on the config the model is built from, before anything is built
        if indexed := layers_with_indexed_attention(self.config):
            raise ValueError(errors.indexed_attention(indexed, self.config.model_type))
        if (carried := layers_with_carried_state(self.config)) and not getattr(type(self), "is_hybrid", False):
            raise ValueError(errors.carried_state_without_slots(carried, self.config.model_type, type(self).__name__))
        flat = self.text_config is self.config
        towers = [getattr(self.config, key) for key in self.config.sub_configs if flat and getattr(self.config, key, None) is not None]
        kept = [tower._attn_implementation for tower in towers]
        super()._patch_config()
        # vLLM sets "vllm" on the text config, which transformers passes down to its sub-configs:
        # a flat config's towers (Phi-4-multimodal's) keep theirs, as a nested config's do
        for tower, implementation in zip(towers, kept):
            tower._attn_implementation = implementation

    @cached_property
    def _pre_trained_model_classes(self):
        """vLLM's, with the cause kept when the throwaway `AutoModel` cannot be built: an
        AttributeError raised inside a property reaches `nn.Module.__getattr__`, which
        reports the property itself missing (vLLM's config class for Qwen3-ASR has no
        `audio_config`, yet the error named `_pre_trained_model_classes`)."""
        try:
            return super()._pre_trained_model_classes
        except AttributeError as error:
            raise RuntimeError(f"transformers' AutoModel cannot build this {type(self.config).__name__}: {error}") from error

    @cached_property
    def _compile_twins(self) -> dict[type, type]:
        """Each HF class vLLM marks for torch.compile, and the twin marked instead."""
        return {}

    def _decorate_cls_for_torch_compile(self, cls, **kwargs):
        """vLLM's decorator on a twin of `cls`, not on `cls`: decorated in place,
        transformers' own class fails in every plain HF model of the process
        (`compile_twin.py`). Unless vLLM's in-tree backend has already decorated `cls`
        itself in this process: a twin would wrap its wrapper, and vLLM's decorator
        leaves a class it has marked as it is. A decoder that takes per-layer token
        embeddings gets their token dimension marked dynamic, as vLLM marks the embeddings'."""
        dims = kwargs.get("dynamic_arg_dims")
        if dims is not None and forward_takes(cls, PER_LAYER_INPUTS_ARG):
            kwargs["dynamic_arg_dims"] = {**dims, PER_LAYER_INPUTS_ARG: PER_LAYER_DYNAMIC_DIM}
        if TorchCompileWithNoGuardsWrapper not in cls.__bases__ and cls not in self._compile_twins:
            self._compile_twins[cls] = twin(cls)
        super()._decorate_cls_for_torch_compile(cls=self._compile_twins.get(cls, cls), **kwargs)

    @contextmanager
    def _mark_model_components(self, vllm_config):
        """vLLM's hook around building `self.model`: the engine's instances are built as twins.
        The towers of modalities the engine takes none of stay unbuilt, as vLLM leaves them,
        unless transformers cannot build the model without them: then they are built."""
        if self._builds_without_unserved_towers(vllm_config):
            marks = super()._mark_model_components(vllm_config)
        else:
            marks = self._mark_language_model(vllm_config, targets=self._pre_trained_model_classes.decoder)
        with built_as(self._compile_twins), marks:
            yield

    def _builds_without_unserved_towers(self, vllm_config) -> bool:
        """Whether transformers builds the model with the towers vLLM leaves unbuilt, for
        modalities whose limit is 0 (`language_model_only`): a model's `__init__` may read
        them (Granite 4 Vision's `self.dtype`, from its parameters, with none built yet).
        Tried on the meta device, under vLLM's own marks, where a modality it finds a
        tower for has a limit of 0."""
        mm_config = vllm_config.model_config.get_multimodal_config()
        if all(mm_config.get_limit_per_prompt(modality) for modality in self._pre_trained_model_classes.encoders):
            return True
        from transformers import AutoModel
        from vllm.model_executor.models.transformers.utils import init_on_device_without_buffers

        try:
            with super()._mark_model_components(vllm_config), init_on_device_without_buffers("meta"):
                AutoModel.from_config(**self._from_config_kwargs)
        except Exception as error:  # noqa: BLE001 - transformers' own code, whatever it raises
            logger.warning("hf_bridge builds %s's towers although this engine takes none of their modalities: "
                           "transformers cannot build the model without them (%r)", type(self.config).__name__, error)
            return False
        return True

    def get_language_model(self) -> torch.nn.Module:
        """The in-tree wrapper, for flat models too: Chameleon's text layers sit in the
        base model itself, with no `language_model` to point at; a generation class built
        alone with its decoder and head beside its towers points at its decoder (Qwen3-Omni's
        thinker: the decoder takes the side features)."""
        language_model = super().get_language_model()
        if language_model.model is None:
            # a plain attribute: `model` is a class attribute there, which nn.Module's
            # __setattr__ would register beside instead of replacing
            object.__setattr__(language_model, "model", decoder_of(self.model) if self._flat_generation_class else self.model)
        return language_model

    @cached_property
    def _built_alone(self) -> bool:
        """Whether the HF model is a generation class built alone (`hf_classes.generation_class_alone`)."""
        return type(self.model) is generation_class_alone(self.config)

    @cached_property
    def _flat_generation_class(self) -> bool:
        """Whether it is one that holds its decoder and head itself, beside its towers, with
        no text model inside (Qwen2.5-Omni's thinker; Nemotron-H-Omni's holds a whole
        generation model as its `language_model`)."""
        return self._built_alone and getattr_iter(self.model, TEXT_MODEL_NAMES, None) is None and generation_head(self.model) is not None
