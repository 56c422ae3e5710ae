"""vLLM's replacement of the HF model's layers, minus the modules it would break
(`kept_modules.py`), with the towers whole on every tensor-parallel rank.
"""

from __future__ import annotations

import torch
from vllm.config.utils import getattr_iter
from vllm.logger import init_logger
from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
from vllm.platforms import current_platform

from . import LOGGER_NAME
from .cpu_linear_inputs import contiguous_linear_inputs, quantized_linears_on_rows
from .kept_modules import (children_beside, kept_out, layers_checked_by_type, linears_read_directly, linears_with_own_forward,
                           norms_over_another_axis, planned_children, statistics_over_sharded_units, torch_composites)
from .model_building import TEXT_MODEL_NAMES
from .nested_head import generation_head, run_to_hidden_states

logger = init_logger(LOGGER_NAME)


class LayerReplacementMixin:
    """vLLM's parallel layers in place of the HF model's, where they compute the same."""

    def recursive_replace(self):
        """vLLM's layer replacement, minus the modules it would break (`kept_modules.py`):
        torch's own composites (`nn.MultiheadAttention` reads its child's weight directly),
        linear layers whose forward does more than the linear map (Llama 4's router) or
        whose weights another forward reads (Jamba's Mamba mixer), and
        norms over another axis than the last (timm's `RmsNorm2d`).
        On the CPU, vLLM's layers get their inputs in the layout its kernels take
        (`cpu_linear_inputs.py`). A text model with a generation head of its own runs to
        its hidden states first (`nested_head.py`), so its head is not replaced either."""
        text_model = getattr_iter(self.model, TEXT_MODEL_NAMES, None)
        generating = self.model if self._flat_generation_class else text_model
        head_name = generation_head(generating)
        if head_name is not None:
            logger.info("hf_bridge runs %s to its hidden states: vLLM's head computes the logits", type(generating).__name__)
            run_to_hidden_states(generating, head_name, read_as_logits=self._built_alone and generating is not self.model)
        plan = self.model.tp_plan or {}
        kept = [*torch_composites(self.model), *linears_with_own_forward(self.model, plan.keys()),
                *linears_read_directly(self.model), *norms_over_another_axis(self.model),
                *layers_checked_by_type(self.model), *self._towers_replicated(plan, text_model, generating, head_name)]
        if self.tp_group.world_size > 1:
            kept += statistics_over_sharded_units(self.model, plan)
        with kept_out(kept):
            super().recursive_replace()
        for module in self.model.modules():
            if isinstance(module, LinearBase):
                _name_sizes_as_torch(module)
        if current_platform.is_cpu():
            contiguous_linear_inputs(self.model, (LinearBase,))
            quantized_linears_on_rows(self.model, (LinearBase,), UnquantizedLinearMethod)

    def _towers_replicated(self, plan: dict[str, str], text_model: torch.nn.Module | None,
                           generating: torch.nn.Module | None, head_name: str | None) -> list:
        """Under tensor parallelism, the HF model's children beside its text model (towers,
        projectors), kept as transformers wrote them and whole on every rank, while its text
        model is sharded as planned. vLLM would shard a tower as its plan says, which breaks
        what its attention expects (Ernie 4.5 VL's splits its fused `qkv` column-wise, then
        reshapes it to all its heads), and fuse any attention's q, k and v into head-sharded
        layers, which a tower that reshapes by its full head count splits wrongly (Qwen3-ASR's
        audio encoder: `shape '[-1, 32]' is invalid`). A tower's rows are few beside the
        decoder's. In a flat model, whose decoder layers sit beside its towers, the text parts
        are the children its plan shards and its input embeddings (Phi-4-multimodal's towers
        sit in `embed_tokens_extend`); without a plan, nothing tells them apart."""
        if self.tp_group.world_size == 1:
            return []
        if text_model is not None:
            text_parts = [text_model]
        else:
            text_parts = planned_children(self.model, plan.keys())
            if not text_parts:
                return []
            text_parts.append(self.model.get_input_embeddings())
        towers = list(children_beside(self.model, text_parts, [head_name] if generating is self.model else []))
        if towers:
            logger.info("hf_bridge replicates %s's %s across tensor-parallel ranks, as transformers wrote them",
                        type(self.model).__name__, ", ".join(name for _, name, _ in towers))
        return towers


def _name_sizes_as_torch(linear: LinearBase) -> None:
    """`in_features` and `out_features`, as `nn.Linear` names them, on vLLM's layer that
    replaced one: HF code reads them (MiniCPM-V 4.6's merger reshapes by `in_features`).
    This rank's sizes, which are what the layer takes and returns."""
    linear.in_features = getattr(linear, "input_size_per_partition", linear.input_size)
    linear.out_features = getattr(linear, "output_size_per_partition", linear.output_size)
