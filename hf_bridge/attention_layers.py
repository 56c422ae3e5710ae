"""vLLM's attention layers for the HF attention modules, built as the modules call them: with
the heads a module counts, the soft cap it hands its attention function, an earlier
layer's cache where it shares one, and on a CPU the backend that attends both ways within
media items.
"""

from __future__ import annotations

from contextlib import contextmanager

from vllm.logger import init_logger
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.models.transformers.base import VLLM_ATTN_ATTR
from vllm.model_executor.models.transformers.fusers.attention import interface_call

from . import LOGGER_NAME, errors
from .attention_terms import APPLIED_SOFT_CAP_ATTR, BUILT_HEADS_ATTR, BuiltHeads, passed_soft_cap
from .bidirectional import attends_within_media_on_cpu
from .kv_sharing import KV_SHARED_LAYERS, SHARED_LAYER_FLAG, kv_sharing_sources, reading_shared_caches
from .layer_heads import LayerHeads, heads_beside_config, per_rank, with_heads
from .layer_names import attention_module_names, vllm_layer_name

logger = init_logger(LOGGER_NAME)


class AttentionLayersMixin:
    """vLLM's KV-cache layers, one per HF attention module, as that module calls attention."""

    def _create_attention_instances(self, prefix: str = ""):
        """vLLM's KV-cache layers; a decoder layer that attends over an earlier layer's keys
        and values reads that layer's cache (`kv_sharing.py`). vLLM's fast prefill for such
        layers drops prompt tokens the HF decoder computes, so it is refused there."""
        self._kv_sharing_targets = self._shared_kv_caches(prefix)
        self._own_heads = self._heads_beside_config(prefix)
        with self._soft_cap_as_passed():
            super()._create_attention_instances(prefix)
        self._mark_built_heads()

    def _mark_built_heads(self) -> None:
        """Mark each attention module with the heads its vLLM layer views a call by, for the
        call-time check (`attention_terms.py`); latent (MLA) layers take no heads of keys."""
        for name, _ in self.attention_fusers.values():
            module = self.get_submodule(name)
            layer = getattr(module, VLLM_ATTN_ATTR, None)
            if isinstance(layer, Attention):
                setattr(module, BUILT_HEADS_ATTR, BuiltHeads(layer.num_heads, layer.num_kv_heads, layer.head_size))

    def _heads_beside_config(self, prefix: str) -> dict[str, LayerHeads]:
        """Each vLLM layer name -> its heads per rank, for the layers whose attention module
        counts its own beside the config's (`layer_heads.py`); latent (MLA) layers keep vLLM's."""
        if self.model_config.use_mla:
            return {}
        modules = attention_module_names(self.attention_fusers)
        arch = self.model_config.model_arch_config
        configured = {name: LayerHeads(arch[layer].total_num_attention_heads, arch[layer].total_num_kv_heads)
                      for layer, name in modules.items()}
        own = heads_beside_config({name: self.get_submodule(name) for name in modules.values()}, configured)
        if own:
            logger.info("hf_bridge: %d of %d decoder layers' attention modules count their own heads beside the "
                        "config's (%s): vLLM's layers are built with them", len(own), len(modules),
                        ", ".join(f"{name}: {heads.num_heads} query, {heads.num_kv_heads} key/value heads"
                                  for name, heads in own.items()))
        return {vllm_layer_name(prefix, name): heads
                for name, heads in per_rank(own, self.parallel_config.tensor_parallel_size, self.config.model_type).items()}

    @contextmanager
    def _soft_cap_as_passed(self):
        """vLLM builds each layer with the config's `attn_logit_softcapping`; here, with the
        soft cap the layers' attention modules hand their attention function, which is what
        transformers applies (none for Gemma 3, whose config has the field). Each module
        is marked with it for the call-time check (`attention_terms.py`)."""
        field = "attn_logit_softcapping"
        named = hasattr(self.text_config, field)
        configured = getattr(self.text_config, field, None)
        caps = {}
        for layer, (name, _) in self.attention_fusers.items():
            module = self.get_submodule(name)
            caps[layer] = passed_soft_cap(interface_call(type(module).forward), module, configured)
            setattr(module, APPLIED_SOFT_CAP_ATTR, caps[layer])
        if len(set(caps.values())) > 1:
            raise ValueError(errors.soft_caps_differ_by_layer(caps))
        passed = next(iter(caps.values()), configured)
        if passed == configured:
            yield
            return
        logger.info("hf_bridge: the attention modules hand their attention function a soft cap of %s, the config "
                    "names %s: vLLM's layers apply the modules' one", passed, configured)
        setattr(self.text_config, field, passed)
        try:
            yield
        finally:
            if named:
                setattr(self.text_config, field, configured)
            else:
                delattr(self.text_config, field)

    def _shared_kv_caches(self, prefix: str) -> dict[str, str]:
        """Each sharing layer's vLLM layer name -> its source's, for the layers whose HF
        attention module says it shares and whose source is on this pipeline rank."""
        modules = attention_module_names(self.attention_fusers)
        targets = {
            vllm_layer_name(prefix, modules[layer]): vllm_layer_name(prefix, modules[source])
            for layer, source in kv_sharing_sources(self.text_config).items()
            if layer in modules and source in modules and getattr(self.get_submodule(modules[layer]), SHARED_LAYER_FLAG, False)
        }
        if targets and self.cache_config.kv_sharing_fast_prefill:
            raise ValueError(errors.kv_sharing_fast_prefill_unserved(type(self.model).__name__, len(targets)))
        if targets:
            logger.info("hf_bridge: %d of %d decoder layers attend over an earlier layer's keys and values (%s): they read "
                        "its KV cache and keep none of their own", len(targets), len(modules), KV_SHARED_LAYERS)
        return targets

    def _get_attn_cls(self):
        """vLLM's layer class, or on a CPU, for a model attending both ways within media
        items, the same layer on `cpu_media_attention.py`'s backend; built reading a
        shared cache where a layer shares one, and with its module's own heads where it
        counts them beside the config (`_create_attention_instances`)."""
        attn_cls = super()._get_attn_cls()
        if attn_cls is Attention and attends_within_media_on_cpu(self.model_config):
            from .cpu_media_attention import CPUMediaAttention

            attn_cls = CPUMediaAttention
        if not issubclass(attn_cls, Attention):
            return attn_cls
        build = attn_cls
        if targets := getattr(self, "_kv_sharing_targets", None):
            build = reading_shared_caches(build, targets)
        if heads := getattr(self, "_own_heads", None):
            build = with_heads(build, heads)
        return build

    def _attention_backend(self):
        """The attention backend vLLM selected for the text model's layers."""
        layer = next((m for m in self.modules() if isinstance(m, Attention)), None)
        return layer.get_attn_backend() if layer is not None else None
