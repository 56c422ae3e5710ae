"""vLLM's per-request state slots for the decoder layers that carry a state
(`carried_state.py`): one vLLM layer per such decoder layer, and the model's side of
vLLM's hybrid-model interface.

A layer that attends beside its state (Falcon-H1's) keeps vLLM's attention layer and gets
a state layer too; a layer that does neither (Nemotron-H's MLP and MoE layers) gets none.

Each `CarriedStateLayer` is a vLLM state layer (`MambaBase`) with no weights: vLLM sizes
its slots from the layout measured on the HF module once the weights are loaded, gives it
a slot per running request, and hands it the step's requests (`LinearAttentionMetadata`:
where each request's tokens are and which slot is its). The HF module stays where
transformers put it, with its weights under their names; only its forward is wrapped, so
that each call runs on the requests' states.

A model with such layers runs its decoder eagerly (the wrapped forward reads the step's
requests, which a compiled graph would read once) and without prefix caching: a prompt's
state is known at its end only, where vLLM's prefix caching for hybrid models needs it at
every block boundary.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

import torch
from vllm.config import CUDAGraphMode, VllmConfig
from vllm.distributed.utils import get_pp_indices
from vllm.forward_context import get_forward_context
from vllm.logger import init_logger
from vllm.model_executor.layers.attention import MLAAttention
from vllm.model_executor.layers.mamba.abstract import MambaBase
from vllm.model_executor.models.transformers.base import VLLM_ATTN_ATTR
from vllm.platforms import current_platform
from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum

from . import LOGGER_NAME, errors
from .attention_terms import attends_beside_its_state, layers_holding_nothing, layers_with_carried_state
from .bidirectional import KeepMediaItemsWhole
from .carried_state import OneLayerCache, StateEntry, StepSequence, cache_argument, measure_layout, run_on_slots, state_modules
from .features import decoder_layers_name
from .layer_names import vllm_layer_name
from .nested_head import bare_decoder
from .step_kwargs import keep_eager

logger = init_logger(LOGGER_NAME)

LAYOUTS: dict[tuple[str, str | None], tuple[StateEntry, ...]] = {}
"""The state layout measured in this process, per checkpoint: vLLM asks the model class for
it (`get_mamba_state_shape_from_config`) after loading the model, in the process that loaded it."""


class CarriedStateLayer(MambaBase, torch.nn.Module):
    """The slots of one decoder layer's states; runs the HF module's forward on them."""

    kv_cache: tuple[torch.Tensor, ...]

    def __init__(self, module: torch.nn.Module, layer_idx: int, text_config: Any, prefix: str, vllm_config: VllmConfig):
        torch.nn.Module.__init__(self)
        self.prefix = prefix
        self.layout: tuple[StateEntry, ...] = ()
        self.argument = cache_argument(module)
        self.cache = OneLayerCache(text_config, layer_idx)
        self.kv_cache = (torch.tensor([]),)
        self._module = [module]  # not a child: vLLM's backend makes this layer the module's child
        self._forward = module.forward
        self._signature = inspect.signature(module.forward)
        module.forward = self.run
        context = vllm_config.compilation_config.static_forward_context
        if prefix in context:
            raise ValueError(f"Duplicate layer name: {prefix}")
        context[prefix] = self

    @property
    def mamba_type(self) -> MambaAttentionBackendEnum:
        return MambaAttentionBackendEnum.LINEAR  # its metadata: each request's tokens, length and slot

    def get_state_shape(self) -> list[tuple[int, ...]]:
        return [entry.shape for entry in self.layout]

    def get_state_dtype(self) -> tuple[torch.dtype, ...]:
        return tuple(entry.dtype for entry in self.layout)

    def measure(self, width: int) -> tuple[StateEntry, ...]:
        parameter = next(self._module[0].parameters())
        self.layout = measure_layout(self._forward, self.argument, self.cache, width, parameter.device, parameter.dtype)
        return self.layout

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """The HF module's forward, each of the step's requests on its own states."""
        arguments = dict(self._signature.bind(*args, **kwargs).arguments)
        for name, parameter in self._signature.parameters.items():
            if parameter.kind is parameter.VAR_KEYWORD:
                arguments.update(arguments.pop(name, {}))
        hidden_states = arguments.pop(next(iter(self._signature.parameters)))
        arguments.pop(self.argument, None)
        metadata = get_forward_context().attn_metadata
        metadata = metadata.get(self.prefix) if isinstance(metadata, dict) else None
        if metadata is None:  # vLLM's profiling and dummy runs: no requests, no slots, no cache
            return self._forward(hidden_states, **arguments, **{self.argument: None})
        sequences = _step_sequences(metadata)
        return run_on_slots(self._forward, hidden_states, arguments, self.argument, sequences, self.kv_cache, self.layout, self.cache)


STEP_SEQUENCES_ATTR = "hf_bridge_step_sequences"
"""Where a step's requests, read on the host once, are kept on the step's metadata, which
every state layer of the step shares."""


def _step_sequences(metadata) -> list[StepSequence]:
    sequences = getattr(metadata, STEP_SEQUENCES_ATTR, None)
    if sequences is None:
        starts, lengths = metadata.query_start_loc.tolist(), metadata.seq_lens.tolist()
        slots = metadata.state_indices_tensor.tolist()
        sequences = [StepSequence(starts[i], starts[i + 1], slots[i], lengths[i] > starts[i + 1] - starts[i])
                     for i in range(metadata.num_decodes + metadata.num_prefills)]
        setattr(metadata, STEP_SEQUENCES_ATTR, sequences)
    return sequences


class _StateFuser:
    """Stands in vLLM's attention-fuser map for a layer that carries a state and does not
    attend, or does neither, so that vLLM's backend builds that layer's vLLM layer (a state
    layer, or `HoldsNothing`) with the others (`CarriedStateMixin._get_attn_cls`)."""

    @staticmethod
    def scale(module: torch.nn.Module) -> None:
        return None

    @staticmethod
    def sinks(module: torch.nn.Module) -> None:
        return None


class HoldsNothing(torch.nn.Module):
    """What vLLM's backend, which builds a layer for every decoder layer index, gets for a
    layer that neither attends nor carries a state: no cache, no weights, never called."""


class CarriedStateMixin:
    """hf_bridge's model with a vLLM state layer for each decoder layer that carries a state
    (vLLM's `IsHybrid`), attached to the HF module as vLLM's backend attaches its attention
    layers; goes first in a class's bases."""

    is_hybrid: ClassVar[bool] = True

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        text_model = self.get_language_model().model
        if keep_eager(text_model):
            logger.info("hf_bridge runs %s eagerly: its state layers read the step's requests", type(text_model).__name__)

    def _create_attention_instances(self, prefix: str = ""):
        """vLLM's layers for the decoder: its attention layers, a state layer for each layer
        that carries a state (beside its attention layer where the layer attends too), and
        none for a layer that does neither. vLLM's backend builds one layer per decoder
        layer index, through `_get_attn_cls`; a state layer beside attention is built here."""
        carried = layers_with_carried_state(self.config)
        decoder = bare_decoder(self.model)  # its layers alone: a tower's modules may have a `layer_idx` too
        decoder_name = next(name for name, module in self.named_modules() if module is decoder)
        modules = {index: (f"{decoder_name}.{name}", module)
                   for index, (name, module) in state_modules(decoder, [index for index, _ in carried]).items()}
        self._refuse_what_cannot_be_laid_out(carried, modules)
        beside_attention = {index for index in modules if index in self.attention_fusers}
        self._state_layer_modules = {vllm_layer_name(prefix, name): (index, module)
                                     for index, (name, module) in modules.items()}
        for index, (name, _) in modules.items():
            if index not in beside_attention:
                self.attention_fusers[index] = (name, _StateFuser)
        self._empty_layers = set()
        for index in self._layers_holding_nothing():
            name = f"{decoder_name}.{decoder_layers_name(decoder)}.{index}"
            self.attention_fusers[index] = (name, _StateFuser)
            self._empty_layers.add(vllm_layer_name(prefix, name))
        super()._create_attention_instances(prefix)
        for layer_prefix, (index, module) in self._state_layer_modules.items():
            if index in beside_attention:  # vLLM built this index's layer for its attention
                setattr(module, VLLM_ATTN_ATTR, self._state_layer(layer_prefix))
        self.carried_state_layers = [getattr(module, VLLM_ATTN_ATTR) for _, module in modules.values()]
        logger.info("hf_bridge: %d of %d decoder layers carry a state from step to step (%s); vLLM keeps it per request",
                    len(modules), self.text_config.num_hidden_layers, ", ".join(sorted({kind for _, kind in carried})))

    def _refuse_what_cannot_be_laid_out(self, carried: list[tuple[int, str]], modules: dict[int, Any]) -> None:
        """Refuse by name what would run without its states or its attention: a layer with no
        one module holding its states, states beside MLA, attention beside states that vLLM
        cannot find, more than one tensor-parallel rank."""
        model_type = self.config.model_type
        missing = [(index, kind) for index, kind in carried if index not in modules and index in self._layers_on_this_rank()]
        if missing:
            raise ValueError(errors.layers_with_carried_state(missing, model_type))
        if super()._get_attn_cls() is MLAAttention:  # vLLM builds MLA layers only where it is handed that class itself
            raise ValueError(errors.carried_state_beside_latent_attention(model_type))
        unattended = [(index, kind) for index, kind in carried
                      if index in modules and attends_beside_its_state(kind) and index not in self.attention_fusers]
        if unattended:
            raise ValueError(errors.attention_beside_state_not_found(unattended, model_type))
        if self.tp_group.world_size > 1:
            raise ValueError(errors.carried_state_needs_one_tensor_parallel_rank(model_type, self.tp_group.world_size))

    def _layers_holding_nothing(self) -> list[int]:
        """The layers on this rank that neither attend nor carry a state, as transformers reads the config."""
        on_rank = self._layers_on_this_rank()
        return [index for index, _ in layers_holding_nothing(self.config) if index in on_rank and index not in self.attention_fusers]

    def _layers_on_this_rank(self) -> range:
        return range(*get_pp_indices(self.text_config.num_hidden_layers, self.pp_group.rank_in_group, self.pp_group.world_size))

    def _get_attn_cls(self):
        attn_cls = super()._get_attn_cls()
        states = getattr(self, "_state_layer_modules", {})

        def build(**kwargs: Any):
            if kwargs["prefix"] in getattr(self, "_empty_layers", ()):
                return HoldsNothing()
            if kwargs["prefix"] not in states:
                return attn_cls(**kwargs)
            return self._state_layer(kwargs["prefix"])

        return build

    def _state_layer(self, prefix: str) -> CarriedStateLayer:
        """The state layer named `prefix`, for its HF module."""
        index, module = self._state_layer_modules[prefix]
        return CarriedStateLayer(module, index, self.text_config, prefix, self.vllm_config)

    def process_weights_after_loading(self) -> None:
        layouts = {layer.measure(self.text_config.hidden_size) for layer in self.carried_state_layers}
        if len(layouts) > 1:
            raise ValueError(errors.carried_states_of_several_layouts(self.config.model_type, layouts))
        if layouts:
            LAYOUTS[_checkpoint_key(self.model_config)] = layouts.pop()
        super().process_weights_after_loading()

    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config: VllmConfig):
        return tuple(entry.shape for entry in LAYOUTS[_checkpoint_key(vllm_config.model_config)])

    @classmethod
    def get_mamba_state_dtype_from_config(cls, vllm_config: VllmConfig):
        return tuple(entry.dtype for entry in LAYOUTS[_checkpoint_key(vllm_config.model_config)])

    @classmethod
    def get_mamba_state_copy_func(cls):
        raise NotImplementedError("hf_bridge serves models with carried states without prefix caching")


def _checkpoint_key(model_config) -> tuple[str, str | None]:
    return model_config.model, model_config.revision


class CarriedStateConfig(KeepMediaItemsWhole):
    """vLLM's config hook for the classes with state slots, run before vLLM's own setup for
    hybrid models: prefix caching off (a prompt's state is known at its end only), on a GPU
    no CUDA graphs, and no speculative decoding (its draft tokens would advance the states
    before they are accepted)."""

    @staticmethod
    def verify_and_update_config(vllm_config) -> None:
        KeepMediaItemsWhole.verify_and_update_config(vllm_config)
        model_type = getattr(vllm_config.model_config.hf_config, "model_type", "this model")
        if vllm_config.speculative_config is not None:
            raise ValueError(errors.carried_state_without_speculative_decoding(model_type))
        cache_config = vllm_config.cache_config
        if cache_config.enable_prefix_caching:
            logger.info("hf_bridge: prefix caching is off for %s: its layers that carry a state from step to step "
                        "know it at the end of a prompt only, not at each block boundary", model_type)
            cache_config.enable_prefix_caching = False
        compilation_config = vllm_config.compilation_config
        if not current_platform.is_cpu() and compilation_config.cudagraph_mode != CUDAGraphMode.NONE:
            # a graph would replay one step's grouping of requests, read on the host
            logger.info("hf_bridge: no CUDA graphs for %s: its layers that carry a state group each step's requests "
                        "on the host", model_type)
            compilation_config.cudagraph_mode = CUDAGraphMode.NONE
