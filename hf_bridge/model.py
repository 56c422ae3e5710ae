"""The one generic model hf_bridge serves every HF vision-language model with.

`HFBridgeBase` is vLLM's in-tree multimodal Transformers backend (`MultiModalMixin`:
loading through `AutoModel.from_config`, the `"vllm"` paged-attention implementation for
the text model, vLLM's parallel layers and weight loading), with the places where that
backend diverges from transformers replaced. `HFBridgeForConditionalGeneration` puts
vLLM's `CausalMixin` head on it; `pooling.py` puts vLLM's pooling mixins on it.

- `embed_multimodal` encodes the per-item data `processing.py` produced, batching only
  items whose shapes already agree, and splits the output by each item's embedding
  count, never padding or cutting it to fit (`split.py`);
- `compute_logits` applies exactly the transform the HF model class applies after its
  `lm_head` (`head.py`), not a config field the class may never read;
- M-RoPE positions are computed from the token types the processor itself returned;
- visual features the HF model adds inside decoder layers (Qwen3-VL's deepstack) reach
  them (`side_features.py`);
- per-layer embeddings the decoder looks up by token id (Gemma 4's) are looked up where
  vLLM still has the ids (`token_inputs.py`), and so are per-token inputs the processor
  derives from the ids (Ernie 4.5 VL's expert types, `token_tables.py`) and the rows the
  HF forward builds for some ids otherwise than its tables (Gemma 3n's media markers,
  `forward_token_rows.py`), or only beside an item (Ovis2's indicators, `rows_beside_items.py`);
- decoder layers that attend over an earlier layer's keys and values read its KV cache
  (`kv_sharing.py`);
- under tensor parallelism the towers are replicated and the text model is sharded as
  its plan says (`_towers_replicated`).
"""

from __future__ import annotations

import inspect
import re
from contextlib import contextmanager
from functools import cached_property
from typing import Any

import torch
from vllm.compilation.wrapper import TorchCompileWithNoGuardsWrapper
from vllm.config.utils import getattr_iter
from vllm.logger import init_logger
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.models.interfaces import MultiModalEmbeddings
from vllm.model_executor.models.utils import PPMissingLayer, StageMissingLayer
from vllm.model_executor.models.transformers.base import VLLM_ATTN_ATTR
from vllm.model_executor.models.transformers.causal import CausalMixin
from vllm.model_executor.models.transformers.fusers.attention import interface_call
from vllm.model_executor.models.transformers.multimodal import MultiModalMixin
from vllm.multimodal import MULTIMODAL_REGISTRY
from vllm.multimodal.inputs import MultiModalFeatureSpec
from vllm.platforms import current_platform
from vllm.distributed.utils import get_pp_indices
from vllm.sequence import IntermediateTensors

from . import LOGGER_NAME, errors, features, split
from .adapters import TextModelAdaptersMixin, token_embedding_unadapted
from .attention_terms import APPLIED_SOFT_CAP_ATTR, BUILT_HEADS_ATTR, BuiltHeads, Refusals, layers_with_carried_state
from .attention_shape import in_transformers_shape
from .attention_terms import install as install_attention_term_check
from .attention_terms import layers_with_indexed_attention, passed_soft_cap, wrap_vllm_attention_functions
from .eagle3 import Eagle3HiddenStatesMixin, name_image_token_index
from .compile_twin import built_as, twin
from .encoder_graphs.cpu import CPUEncoderGraphs, cpu_graphs_requested
from .encoder_graphs.protocol import MODALITY as GRAPH_MODALITY
from .encoder_graphs.protocol import EncoderGraphsMixin
from .bidirectional import attends_within_media_on_cpu, report_bidirectional_attention
from .checkpoint_layout import transformers_layout
from .cpu_linear_inputs import contiguous_linear_inputs, quantized_linears_on_rows
from .embeds import EMBEDS_KEY
from .forward_token_rows import EMBEDS, TokenRows, apply_beside_media, asked_ids, learn_token_rows
from .rows_beside_items import rows_beside_items
from .head import HFLogitsHead
from .kept_modules import (children_beside, kept_out, layers_checked_by_type, linears_read_directly, linears_with_own_forward,
                           norms_over_another_axis, planned_children, statistics_over_sharded_units, torch_composites)
from .layer_heads import LayerHeads, heads_beside_config, per_rank, with_heads
from .layer_names import attention_module_names, vllm_layer_name
from .kv_sharing import KV_SHARED_LAYERS, SHARED_LAYER_FLAG, kv_sharing_sources, reading_shared_caches
from .nested_head import decoder_of, generation_head, run_to_hidden_states
from .moe import HFBridgeMoEMixin
from .mrope import ROPE_INDEX_METHOD, Derivation, PlacedItem, derivations, item_fields, mrope_positions, names_handed_over
from .hf_classes import (delegated_weights, forward_takes, generation_class_alone, multimodal_generation_class,
                         register_generation_class_alone, text_generation_delegate, text_model_computing_its_own_attention,
                         transformers_own_config)
from .side_features import INTERMEDIATE_KEY as SIDE_INTERMEDIATE_KEY
from .side_features import DecoderConvention, SideFeatures, configured_levels, decoder_convention
from .state_layers import CarriedStateMixin
from .per_request_rope import install_per_request_frequencies
from .step_kwargs import keep_eager
from .probes import HF_DATA_KEYS
from .processing import (
    DATA_KEY,
    ENCODER_KEY,
    NUM_EMBEDS_KEY,
    STACKS_KEY,
    TYPE_IDS_KEY,
    HFBridgeDummyInputsBuilder,
    HFBridgeMultiModalProcessor,
    HFBridgeProcessingInfo,
)
from .placeholders import MODALITY_OF_TYPE
from .token_inputs import DYNAMIC_DIM as PER_LAYER_DYNAMIC_DIM
from .token_inputs import PER_LAYER_INPUTS_ARG, PerLayerTokenInputs, per_layer_inputs_taker, reads_per_layer_token_embeddings
from .token_tables import TokenTableInputs, learn_token_tables, may_take_token_fields, token_fields
from .unexpected_weights import ignoring_unexpected_only
from .versions import log_handling

logger = init_logger(LOGGER_NAME)

UNBUILT_MODULES = (StageMissingLayer, PPMissingLayer)
"""vLLM's stand-ins for modules it does not build: a tower whose modalities the engine takes
none of (`limit_mm_per_prompt` 0, `language_model_only`), a layer of another pipeline rank."""

TEXT_MODEL_NAMES = ("language_model", "text_model")
"""Where vLLM's `get_language_model` finds the HF base model's text model."""


@MULTIMODAL_REGISTRY.register_processor(
    HFBridgeMultiModalProcessor, info=HFBridgeProcessingInfo, dummy_inputs=HFBridgeDummyInputsBuilder
)
class HFBridgeBase(EncoderGraphsMixin, TextModelAdaptersMixin, Eagle3HiddenStatesMixin, MultiModalMixin):
    """Any HF VLM through `AutoModel`, no per-architecture code: everything but what the
    runner puts on top (a generation head here, a pooler in `pooling.py`). Every subclass
    inherits hf_bridge's processor, registered here once (vLLM looks it up as a class
    attribute)."""

    def __init__(self, *, vllm_config, prefix: str = ""):
        hf_config = vllm_config.model_config.hf_config
        log_handling(hf_config)
        if (own_attention := text_model_computing_its_own_attention(hf_config)) is not None:
            raise ValueError(errors.text_model_computes_its_own_attention(hf_config.model_type, own_attention.__name__))
        install_attention_term_check(Refusals(errors.attention_terms_not_applied, errors.soft_cap_not_as_applied, errors.heads_not_as_built))
        wrap_vllm_attention_functions(in_transformers_shape)
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        report_bidirectional_attention(vllm_config.model_config, self._attention_backend())
        text_model = self.get_language_model().model
        install_per_request_frequencies(text_model if text_model is not None else self.model)
        self.side_features = None
        convention = decoder_convention(text_model) if text_model is not None else None
        if convention is not None:
            self._install_side_features(text_model, convention)
        self.per_layer_token_inputs = None
        taker = per_layer_inputs_taker(self.model, text_model)
        if reads_per_layer_token_embeddings(self.config) and taker is not None:
            self._install_per_layer_token_inputs(text_model, taker, vllm_config.scheduler_config.max_num_batched_tokens)
        self.forward_token_rows: dict[str, TokenRows] = {}
        """Learnt once vLLM has loaded and prepared the weights (`process_weights_after_loading`)."""
        self.token_rows_beside_items: TokenRows | None = None
        """Learnt with them: the input embeddings the forward builds only beside an item."""
        self.token_table_inputs = self._token_table_inputs(vllm_config)
        if vllm_config.model_config.enable_prompt_embeds:
            self._refuse_prompt_embeds_where_ids_are_read()
        if vllm_config.speculative_config is not None and vllm_config.speculative_config.use_eagle():
            name_image_token_index(self.config)
        self.init_encoder_graphs(vllm_config)
        self.cpu_encoder_graphs = None
        if cpu_graphs_requested() and self.side_features is None:
            self.cpu_encoder_graphs = CPUEncoderGraphs(vllm_config, self)

    def _refuse_prompt_embeds_where_ids_are_read(self) -> None:
        """A prompt given as embeddings has no token ids to look per-layer inputs or token
        tables up by (Gemma 4 and Gemma 3n; Ernie 4.5 VL): refused at start, not served wrong."""
        read_by_id = ["per-layer token embeddings"] if self.per_layer_token_inputs is not None else []
        if self.token_table_inputs is not None:
            read_by_id += list(self.token_table_inputs.lookups)
        if read_by_id:
            raise ValueError(errors.prompt_embeds_without_token_ids(type(self.model).__name__, read_by_id))

    def _install_side_features(self, text_model: torch.nn.Module, convention: DecoderConvention) -> None:
        """Side features (`side_features.py`); under pipeline parallelism they travel to the
        later ranks in the intermediate tensors, and each rank adds its own layers' levels."""
        owned = None
        if convention.by_layer and self.pp_group.world_size > 1:
            raise ValueError(errors.side_features_by_layer_need_one_pipeline_rank(type(self.model).__name__, self.pp_group.world_size))
        self.side_levels = configured_levels(self.config)
        if self.pp_group.world_size > 1:
            owned = range(*get_pp_indices(self.text_config.num_hidden_layers, self.pp_group.rank_in_group, self.pp_group.world_size))
            make_hidden_states = self.make_empty_intermediate_tensors
            width = self.text_config.hidden_size * self.side_levels

            def make_empty_intermediate_tensors(batch_size: int, dtype: torch.dtype, device: torch.device) -> IntermediateTensors:
                tensors = make_hidden_states(batch_size, dtype, device)
                tensors[SIDE_INTERMEDIATE_KEY] = torch.zeros(batch_size, width, dtype=dtype, device=device)
                return tensors

            self.make_empty_intermediate_tensors = make_empty_intermediate_tensors
        self.side_features = SideFeatures(self.text_config.hidden_size, owned, convention)
        self.side_features.install(text_model)

    def _install_per_layer_token_inputs(self, text_model: torch.nn.Module, taker: torch.nn.Module, max_tokens: int) -> None:
        """`token_inputs.py`; the first pipeline rank alone has the ids and input embeddings
        they are computed from, so one rank must hold every layer."""
        if self.pp_group.world_size > 1:
            raise ValueError(errors.per_layer_inputs_need_one_pipeline_rank(type(self.model).__name__, self.pp_group.world_size))
        self.per_layer_token_inputs = PerLayerTokenInputs(text_model, max_tokens)
        self.per_layer_token_inputs.install(taker)
        # handed to the compiled module itself, they would be read once, at tracing: its
        # decoder stays eager (Gemma 4's base model hands them to its compiled decoder as an argument)
        if taker is text_model and keep_eager(text_model):
            logger.info("hf_bridge runs %s eagerly: it takes its per-layer inputs from hf_bridge itself", type(text_model).__name__)

    def _learn_token_tables(self) -> dict[str, dict[int, int]]:
        """`token_tables.py`: per-token inputs the processor derives from the ids alone, for
        the HF base model (Ernie 4.5 VL's experts chosen by modality)."""
        from vllm.transformers_utils.processor import cached_processor_from_config

        from .processing import hf_processor_class

        base = type(self.model)
        if not may_take_token_fields(list(inspect.signature(base.forward).parameters)):
            return {}
        model_config = self.model_config
        processor = cached_processor_from_config(model_config, hf_processor_class(model_config.model, model_config.revision))
        fields = token_fields(processor, lambda name: forward_takes(base, name))
        try:
            tables = learn_token_tables(processor, fields) if fields else {}
        except Exception as error:  # noqa: BLE001 - the processor's own refusal of a text-only call
            logger.warning("hf_bridge could not learn %s per token id from %s (%s: %s): the decoder gets none",
                           ", ".join(fields), type(processor).__name__, type(error).__name__, error)
            tables = {}
        if tables:
            logger.info("hf_bridge hands %s %s, learnt per token id from %s", base.__name__, ", ".join(tables),
                        type(processor).__name__)
        return tables

    def _token_table_inputs(self, vllm_config) -> TokenTableInputs | None:
        """The step's table values for the HF base model; the first pipeline rank alone
        has the ids, so one rank must hold every layer."""
        tables = self._learn_token_tables()
        if not tables:
            return None
        if self.pp_group.world_size > 1:
            raise ValueError(errors.token_tables_need_one_pipeline_rank(type(self.model).__name__, list(tables), self.pp_group.world_size))
        inputs = TokenTableInputs(tables, self.text_config.vocab_size,
                                  vllm_config.scheduler_config.max_num_batched_tokens, next(self.model.parameters()).device)
        inputs.install(self.model)
        for module in self.model.modules():
            routed_by = [name for name in tables if forward_takes(type(module), name)]
            # vLLM's full-graph compile cannot trace a branch on them (Ernie 4.5 VL's
            # `if moe_mm_token_type_ids.any()`); the decorator's own switch keeps it eager
            if routed_by and keep_eager(module):
                logger.warning("hf_bridge runs %s eagerly: its forward takes %s, by which it may branch on data "
                               "(Ernie 4.5 VL routes tokens to text or vision experts)", type(module).__name__, ", ".join(routed_by))
        return inputs

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None, **kwargs):
        if inputs_embeds is None and input_ids is not None and self.pp_group.is_first_rank and self._embeds_per_token:
            # vLLM hands the ids alone where it embeds no media (an engine serving text alone)
            inputs_embeds, input_ids = self.embed_input_ids(input_ids), None
        side = self.side_features
        if side is None or self.pp_group.world_size == 1:
            return super().forward(input_ids, positions, intermediate_tensors, inputs_embeds, **kwargs)
        if not self.pp_group.is_first_rank:
            side.receive(intermediate_tensors[SIDE_INTERMEDIATE_KEY])
        num_tokens = positions.shape[-1]
        sent = side.send(num_tokens, self.side_levels, next(self.parameters()))
        output = super().forward(input_ids, positions, intermediate_tensors, inputs_embeds, **kwargs)
        if isinstance(output, IntermediateTensors):
            output[SIDE_INTERMEDIATE_KEY] = sent
        return output

    @property
    def _embeds_per_token(self) -> bool:
        """Whether `embed_input_ids` sets more than the table's rows: per-layer inputs or
        token fields it records from the ids, or rows the HF forward builds otherwise."""
        return (self.per_layer_token_inputs is not None or self.token_table_inputs is not None
                or bool(self.forward_token_rows) or self.token_rows_beside_items is not None)

    delegate_prefix: str | None = None
    """The checkpoint names' prefix of the model built, where it is one model of a whole
    model (`hf_classes.text_generation_delegate`); set in `_patch_config`."""

    def load_weights(self, weights):
        """A checkpoint in its model's original layout loads as in transformers; of a whole
        model, only the weights of the model built."""
        if self.delegate_prefix is not None:
            weights = delegated_weights(weights, self.delegate_prefix)
        converted = transformers_layout(weights, self.config, self.model, loads_as_is=self._placed_by_vllm)
        return super().load_weights(self._vllm_layout(converted))

    def process_weights_after_loading(self) -> None:
        """vLLM's model-level hook after loading, once its layers have prepared their weights
        (the HF forward runs through them here)."""
        self.forward_token_rows, self.token_rows_beside_items = self._learn_forward_token_rows()

    @torch.no_grad()
    def _learn_forward_token_rows(self) -> tuple[dict[str, TokenRows], TokenRows | None]:
        """What the HF forward hands its decoder for each token the tokenizer adds, where it
        differs from the embedding tables' rows (`forward_token_rows.py`): per field, and the
        input embeddings it builds only beside an item. The first pipeline rank alone embeds."""
        if not self.pp_group.is_first_rank or self.model.get_decoder() is self.model:
            return {}, None  # a flat model's forward is its decoder's
        from vllm.tokenizers import cached_tokenizer_from_config

        vocab_size = self.text_config.vocab_size
        asked = asked_ids(cached_tokenizer_from_config(self.model_config).added_tokens_decoder, vocab_size)
        if asked is None:
            return {}, None
        ids = torch.tensor(asked, device=next(self.model.parameters()).device)
        tables = {EMBEDS: (self.model.get_input_embeddings()(ids), torch.ones_like(ids, dtype=torch.bool))}
        if self.per_layer_token_inputs is not None:
            tables[PER_LAYER_INPUTS_ARG] = self.per_layer_token_inputs.table_rows(ids)
        try:
            handed = features.handed_to_decoder(self.model, ids[None], {})
        except Exception as error:  # noqa: BLE001 - a forward that needs more than ids: tables' rows stand
            logger.info("hf_bridge embeds every token through %s's tables: its forward cannot run on token ids alone (%s: %s)",
                        type(self.model).__name__, type(error).__name__, error)
            return {}, None
        learnt, every_token = learn_token_rows(ids, handed or {}, tables, vocab_size)
        for field in every_token:
            logger.warning("hf_bridge hands %s's decoder the tables' %s: its forward changes them for every token, which "
                           "per-token rows cannot follow", type(self.model).__name__, field)
        for field, rows in learnt.items():
            logger.info("hf_bridge takes %s for %d token id(s) from %s's forward, which builds them otherwise than its tables",
                        field, len(rows.rows), type(self.model).__name__)
        if self.per_layer_token_inputs is not None:
            self.per_layer_token_inputs.learnt = learnt.get(PER_LAYER_INPUTS_ARG)
        alone = (handed or {}).get(EMBEDS)
        alone = tables[EMBEDS][0] if alone is None else alone.reshape(tables[EMBEDS][0].shape)
        beside = None if EMBEDS in every_token else self._rows_beside_items(ids, alone, vocab_size)
        return learnt, beside

    def _rows_beside_items(self, ids: torch.Tensor, alone: torch.Tensor, vocab_size: int) -> TokenRows | None:
        """Rows the HF forward builds for `ids` beside an item otherwise than with the ids
        alone (`alone`, its rows for them), `rows_beside_items.py`."""
        from vllm.transformers_utils.processor import cached_processor_from_config

        from .processing import hf_processor_class
        from .probes import ProcessorProbe

        model_config = self.model_config
        try:
            processor = cached_processor_from_config(model_config, hf_processor_class(model_config.model, model_config.revision))
        except Exception as error:  # noqa: BLE001 - the front end's own loading reports it
            logger.info("hf_bridge asks %s's forward with token ids alone: its processor did not load (%s: %s)",
                        type(self.model).__name__, type(error).__name__, error)
            return None
        tokenizer = getattr(processor, "tokenizer", None)
        if tokenizer is None:
            return None
        probe = ProcessorProbe(processor, tokenizer, self.config, call=lambda data, kw: processor(**data, **kw, return_tensors="pt"),
                               default_kwargs=getattr(model_config.multimodal_config, "mm_processor_kwargs", None) or {})
        rows, skipped = rows_beside_items(self.model, probe, ids, alone, vocab_size)
        for modality, why in skipped.items():
            logger.info("hf_bridge embeds %s's tokens beside %s items through its tables: its forward could not be asked "
                        "with them beside one (%s)", type(self.model).__name__, modality, why)
        if rows is not None:
            logger.info("hf_bridge takes %s for %d token id(s) from %s's forward beside an item, which builds them otherwise "
                        "there than with the ids alone", EMBEDS, len(rows.rows), type(self.model).__name__)
        return rows

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

    # -- multimodal embeddings ---------------------------------------------------------

    def embed_multimodal(self, **kwargs: object) -> MultiModalEmbeddings:
        graphs = self.cpu_encoder_graphs
        given_rows = DATA_KEY.format(GRAPH_MODALITY, EMBEDS_KEY.format(GRAPH_MODALITY)) in kwargs
        with token_embedding_unadapted(self.model, self.vllm_config.lora_config):
            if graphs is not None and NUM_EMBEDS_KEY.format(GRAPH_MODALITY) in kwargs and graphs.eligible and not given_rows:
                return graphs.execute(kwargs)
            return self.embed_multimodal_eagerly(kwargs)

    def embed_multimodal_eagerly(self, kwargs: dict[str, object]) -> MultiModalEmbeddings:
        modality = next((m for m in HF_DATA_KEYS if NUM_EMBEDS_KEY.format(m) in kwargs), None)
        if modality is None:
            return []
        counts = [int(c) for c in split.unbatched(kwargs.pop(NUM_EMBEDS_KEY.format(modality)))]
        stacks = all(bool(s) for s in split.unbatched(kwargs.pop(STACKS_KEY.format(modality))))
        encoder_types = {int(t) for t in split.unbatched(kwargs.pop(ENCODER_KEY.format(modality)))}
        (encoder,) = {MODALITY_OF_TYPE[t] for t in encoder_types}
        # Only the item data carries the modality prefix; hf_bridge's own fields do not
        prefix = DATA_KEY.format(modality, "")
        stacked = {k.removeprefix(prefix): v for k, v in kwargs.items() if k.startswith(prefix) and isinstance(v, torch.Tensor)}
        data = {k.removeprefix(prefix): split.unbatched(v) for k, v in kwargs.items() if k.startswith(prefix)}
        items = [{k: values[i] for k, values in data.items()} for i in range(len(counts))]
        encoder = features.encoding_modality(self.model, encoder, modality, data)
        signatures = [
            split.item_signature({k: tuple(v.shape) if isinstance(v, torch.Tensor) else repr(v) for k, v in item.items()})
            for item in items
        ]
        embeddings: list[torch.Tensor | None] = [None] * len(items)
        given_rows = EMBEDS_KEY.format(modality)
        if items and given_rows in items[0]:  # sent as embeddings (`embeds.py`): no encoder
            dtype = next(self.parameters()).dtype  # lm_head is missing on a pipeline's earlier ranks
            return [item[given_rows].to(dtype) for item in items]
        groups = split.batch_groups(signatures) if stacks else [[i] for i in range(len(items))]
        for group in groups:
            every_item = group == list(range(len(items)))  # in order: vLLM's stacked tensors already hold them
            fields = {k: _joined(stacked[k]) if every_item and k in stacked else features.join_items([items[i][k] for i in group])
                      for k in items[group[0]]}
            rows = self._encode(encoder, fields, sum(counts[i] for i in group))
            sizes = split.split_rows(rows.shape[0], [counts[i] for i in group])
            for i, emb in zip(group, torch.split(rows, sizes)):
                embeddings[i] = emb
        return embeddings  # type: ignore[return-value]

    def _encode(self, modality: str, fields: dict[str, Any], num_embeds: int | None = None) -> torch.Tensor:
        """The HF model's own `get_<modality>_features`, or the rows its forward places where
        it has none (`num_embeds` of them), one row per embedding (`features.py`)."""
        return features.encode(self.model, modality, fields, self.text_config.hidden_size, self.side_features, num_embeds)

    def embed_input_ids(self, input_ids, multimodal_embeddings=None, *, is_multimodal=None):
        if self.per_layer_token_inputs is not None:
            self.per_layer_token_inputs.record(input_ids, is_multimodal)
        if self.token_table_inputs is not None:
            self.token_table_inputs.record(input_ids)
        if self.side_features is not None:
            multimodal_embeddings = self.side_features.split(multimodal_embeddings, is_multimodal, input_ids.shape[0])
        embeds = super().embed_input_ids(input_ids, multimodal_embeddings, is_multimodal=is_multimodal)
        learnt = self.forward_token_rows.get(EMBEDS)
        if learnt is not None:
            embeds = learnt.apply(input_ids, embeds, keep=is_multimodal)
        if self.token_rows_beside_items is not None and is_multimodal is not None:
            embeds = apply_beside_media(self.token_rows_beside_items, input_ids, embeds, is_multimodal)
        return embeds

    # -- M-RoPE --------------------------------------------------------------------------

    def get_mrope_input_positions(
        self, input_tokens: list[int], mm_features: list[MultiModalFeatureSpec]
    ) -> tuple[torch.Tensor, int]:
        get_rope_index = getattr(self.model, ROPE_INDEX_METHOD, None)
        handed, derived = self._rope_index_arguments
        fields = item_fields(get_rope_index, handed, derived) if get_rope_index is not None else ()
        items = []
        for feature in mm_features:
            data = feature.data or {}
            values = {key: field.data for key in fields if (field := data.get(DATA_KEY.format(feature.modality, key))) is not None}
            items.append(PlacedItem(feature.mm_position.offset, data[TYPE_IDS_KEY.format(feature.modality)].data, values))
        return mrope_positions(get_rope_index, input_tokens, items, handed, derived)

    @cached_property
    def _rope_index_arguments(self) -> tuple[dict[str, str], dict[str, Derivation]]:
        """What the HF model's forward hands `get_rope_index` under other names than the
        processor's fields (`mrope.names_handed_over`), and which of those it computes from
        the fields (`mrope.derivations`)."""
        get_rope_index = getattr(self.model, ROPE_INDEX_METHOD, None)
        if get_rope_index is None:
            return {}, {}
        handed = names_handed_over(type(self.model), get_rope_index)
        return handed, derivations(type(self.model), handed.values())


class HFBridgeForConditionalGeneration(HFBridgeBase, CausalMixin):
    """Generation: vLLM's `lm_head`, then the transform the HF class applies after it."""

    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        if self.pp_group.is_last_rank:
            self.hf_head = HFLogitsHead.from_config(self.config)
            # The HF head decides scaling and soft-capping, so vLLM's processor must not
            self.logits_processor = LogitsProcessor(self.text_config.vocab_size)

    def _get_tie_word_embeddings(self) -> bool:
        """Tie lm_head to the input embeddings exactly when transformers does.

        transformers 5 reads `tie_word_embeddings` from the generation class's own
        config only (`PreTrainedModel.tie_weights`); vLLM's backend ties when the text
        config says so too. A checkpoint built from Qwen3-VL-MoE's defaults has `False`
        at the top and `True` in its text config: tied, every logit is wrong.
        """
        return bool(getattr(self.config, "tie_word_embeddings", False))

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        logits = self.logits_processor(self.lm_head, hidden_states, self.lm_head.bias)
        if logits is None:
            return None
        return self.hf_head(logits)


class HFBridgeMoEForConditionalGeneration(HFBridgeMoEMixin, HFBridgeForConditionalGeneration):
    """hf_bridge with the experts on vLLM's fused-MoE layer (`moe.py`), composed as vLLM
    composes its own `TransformersMultiModalMoEForCausalLM`."""


class HFBridgeHybridForConditionalGeneration(CarriedStateMixin, HFBridgeForConditionalGeneration):
    """hf_bridge for a model whose decoder layers carry a state from step to step
    (`state_layers.py`), in vLLM's per-request state slots."""


class HFBridgeHybridMoEForConditionalGeneration(CarriedStateMixin, HFBridgeMoEForConditionalGeneration):
    """The same, with the experts on vLLM's fused-MoE layer."""


def _name_sizes_as_torch(linear: LinearBase) -> None:
    """`in_features` and `out_features`, as `nn.Linear` names them, on vLLM's layer that
    replaced one: HF code reads them (MiniCPM-V 4.6's merger reshapes by `in_features`).
    This rank's sizes, which are what the layer takes and returns."""
    linear.in_features = getattr(linear, "input_size_per_partition", linear.input_size)
    linear.out_features = getattr(linear, "output_size_per_partition", linear.output_size)


def _joined(stacked: torch.Tensor) -> torch.Tensor:
    """`features.join_items` of the items vLLM stacked into `stacked`, as a view where it can be (no copy)."""
    return stacked if stacked.ndim == 1 else stacked.flatten(0, 1)
