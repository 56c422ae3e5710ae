"""Checkpoint names to the model vLLM built: a checkpoint in its original layout loads as
in transformers, a whole model's as the one model built, and an ignore pattern drops only
what is no weight of the model.
"""

from __future__ import annotations

import re

import torch
from vllm.model_executor.models.utils import PPMissingLayer, StageMissingLayer

from .checkpoint_layout import transformers_layout
from .hf_classes import delegated_weights
from .unexpected_weights import ignoring_unexpected_only


UNBUILT_MODULES = (StageMissingLayer, PPMissingLayer)
"""vLLM's stand-ins for modules it does not build: a tower whose modalities the engine takes
none of (`limit_mm_per_prompt` 0, `language_model_only`), a layer of another pipeline rank."""


class WeightNamesMixin:
    """Loading: which checkpoint names are weights here, and under which names."""

    def load_weights(self, weights):
        """A checkpoint in its model's original layout loads as in transformers; of a whole
        model, only the weights of the model built."""
        if self.delegate_prefix is not None:
            weights = delegated_weights(weights, self.delegate_prefix)
        converted = transformers_layout(weights, self.config, self.model, loads_as_is=self._placed_by_vllm)
        return super().load_weights(self._vllm_layout(converted))

    def _placed_by_vllm(self, name: str) -> bool:
        """Whether vLLM's own name mapping takes checkpoint name `name` somewhere it loads
        (`_names_a_weight`), or drops it on purpose."""
        mapped = self.hf_to_vllm_mapper.apply_list([name])
        return not mapped or self._names_a_weight(mapped[0])

    def _names_a_weight(self, vllm_name: str) -> bool:
        """Whether `vllm_name` is a parameter or persistent buffer here (the weights
        transformers expects), of a module that loads its own weights (fused experts,
        stacked projections), or of a module left unbuilt, whose weights vLLM's loader skips
        (a tower whose modalities the engine takes none of, a layer of another pipeline rank)."""
        module: torch.nn.Module = self
        for part in vllm_name.split("."):
            if isinstance(module, UNBUILT_MODULES):
                return True
            if module is not self and callable(getattr(module, "load_weights", None)):
                return True
            if part in module._parameters or (part in module._buffers and part not in module._non_persistent_buffers_set):
                return True
            child = module._modules.get(part)
            if child is None:
                return False
            module = child
        return False

    def _create_hf_to_vllm_mapper(self):
        """vLLM's mapper, with two differences. The model's ignore patterns drop a name only
        where it is no weight of the model (`unexpected_weights.py`). A generation class built
        alone names its checkpoint's weights from itself, `self.model`, whatever its children
        are called: vLLM's rules read a leading `model.` as the base model's, which the class's
        own decoder child also is (Qwen2.5-Omni's thinker keeps its text model as `model` beside
        its towers and head)."""
        super()._create_hf_to_vllm_mapper()
        if self._built_alone:
            mapper = self.hf_to_vllm_mapper
            mapper.orig_to_new_regex = {re.compile(r"^(.+)"): r"model.\1", **mapper.orig_to_new_regex}
        self.hf_to_vllm_mapper = ignoring_unexpected_only(
            self.hf_to_vllm_mapper, self.model._keys_to_ignore_on_load_unexpected, self._names_a_weight)

    def _vllm_layout(self, weights):
        """Where vLLM's replacement layers store a tensor differently from the HF module."""
        return weights
