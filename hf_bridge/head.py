"""The logits transform an HF model class applies after its `lm_head`, reused as-is.

vLLM's in-tree backend scales logits by `text_config.logit_scale` whenever the field
exists, but whether a model *uses* it is decided by its HF class (Cohere's causal LM
does; a VLM built on Cohere's text model may not). Rather than guess from config
fields, hf_bridge runs the HF class's own `forward` with its base model replaced by a
stub that hands back the logits vLLM computed and its `lm_head` replaced by identity:
whatever the class does after `lm_head` (scaling, soft-capping, nothing) is applied.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutputWithPast

from .hf_classes import multimodal_generation_class, remote_generation_class


class _AnyOutput(BaseModelOutputWithPast):
    """A base-model output on which every field but the hidden state reads as `None`
    (heads copy `image_hidden_states`, `rope_deltas`, ... into their own outputs)."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return None


class _Passthrough(nn.Module):
    """Stands in for the base model: returns `inputs_embeds` as the last hidden state.

    It keeps the base model's plain attributes (no modules, no tensors): heads may read
    them, as Chameleon's reads `vocabulary_mapping` to mask image tokens out of logits.
    """

    def __init__(self, base: nn.Module):
        super().__init__()
        for name, value in vars(base).items():
            if not name.startswith("_") and not isinstance(value, (nn.Module, torch.Tensor)):
                setattr(self, name, value)

    def forward(self, *args, inputs_embeds=None, **kwargs):
        return _AnyOutput(last_hidden_state=inputs_embeds)


class HFLogitsHead(nn.Module):
    """Applies the HF class's post-`lm_head` transform to full-vocabulary logits."""

    def __init__(self, top: nn.Module | None, vocab_size: int = 17):
        super().__init__()
        self._top = [top]  # a list keeps it out of the module tree (no weights to load)
        self.is_identity = top is None or self._probe_is_identity(vocab_size)

    @classmethod
    def from_config(cls, config) -> "HFLogitsHead":
        top_cls = generation_class(config)
        if top_cls is None:
            return cls(None)
        with torch.device("meta"):
            top = top_cls(config)
        prefix = top.base_model_prefix or "model"
        if not isinstance(getattr(top, prefix, None), nn.Module) or top.get_output_embeddings() is None:
            return cls(None)
        setattr(top, prefix, _Passthrough(getattr(top, prefix)))
        top.set_output_embeddings(nn.Identity())
        for name, module in list(top.named_children()):
            if name != prefix and not isinstance(module, nn.Identity):
                setattr(top, name, nn.Identity())
        return cls(top.eval(), config.get_text_config().vocab_size)

    @torch.no_grad()
    def _probe_is_identity(self, vocab_size: int) -> bool:
        # full-vocabulary width: a head may index the vocabulary (masking token ids)
        x = torch.randn(3, vocab_size, generator=torch.Generator().manual_seed(0)) * 40
        return torch.equal(self._apply(x.clone()), x)  # a head may write in place

    def _apply(self, logits: torch.Tensor) -> torch.Tensor:
        out = self._top[0](inputs_embeds=logits[None], use_cache=False, return_dict=True)
        return out.logits[0].to(logits.dtype)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits if self.is_identity else self._apply(logits)


def generation_class(config):
    """The HF class a transformers user generates with for `config`.

    The checkpoint's own (remote code), else looked up by model type (the auto mappings),
    not by `config.architectures`, which `hf_overrides` may have pointed at hf_bridge's
    own name.
    """
    import transformers
    from transformers.models.auto import modeling_auto

    own = remote_generation_class(config)
    if own is not None:
        return own
    model_type = getattr(config, "model_type", None)
    found = multimodal_generation_class(model_type)
    if found is not None:
        return found
    name = modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    if isinstance(name, str) and hasattr(transformers, name):
        return getattr(transformers, name)
    for name in getattr(config, "architectures", None) or []:
        if hasattr(transformers, name):
            return getattr(transformers, name)
    return None
