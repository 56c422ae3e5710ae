"""The one generic model hf_bridge serves every HF vision-language model with.

`HFBridgeBase` is vLLM's in-tree multimodal Transformers backend (`MultiModalMixin`:
loading through `AutoModel.from_config`, the `"vllm"` paged-attention implementation for
the text model, vLLM's parallel layers and weight loading), with the places where that
backend diverges from transformers replaced, one concern per mixin:

- `model_building.py`: the config the HF model is built from, compile twins, unserved towers;
- `attention_layers.py`: vLLM's attention layers built as each HF module calls attention
  (its heads, its soft cap, an earlier layer's cache it shares);
- `layer_replacement.py`: vLLM's layers in place of the HF model's, minus those it would
  break; the towers whole under tensor parallelism;
- `weight_names.py`: which checkpoint names are weights, and where they load;
- `mm_embedding.py`: each item's rows, split by its embedding count, never padded or cut;
- `decoder_inputs.py`: what the decoder takes beside the embeddings, looked up by token id;
- `mrope_positions.py`: M-RoPE positions from the HF model's own `get_rope_index`.

Here: visual features the HF model adds inside decoder layers (Qwen3-VL's deepstack,
`side_features.py`), across pipeline ranks. `HFBridgeForConditionalGeneration` puts vLLM's
`CausalMixin` head on it, with the transform the HF class applies after its `lm_head`
(`head.py`); `pooling.py` puts vLLM's pooling mixins on it.
"""

from __future__ import annotations

import torch
from vllm.distributed.utils import get_pp_indices
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.models.transformers.causal import CausalMixin
from vllm.model_executor.models.transformers.multimodal import MultiModalMixin
from vllm.multimodal import MULTIMODAL_REGISTRY
from vllm.sequence import IntermediateTensors

from . import errors
from .adapters import TextModelAdaptersMixin
from .attention_layers import AttentionLayersMixin
from .attention_shape import in_transformers_shape
from .attention_terms import Refusals, wrap_vllm_attention_functions
from .attention_terms import install as install_attention_term_check
from .bidirectional import report_bidirectional_attention
from .decoder_inputs import DecoderInputsMixin
from .eagle3 import Eagle3HiddenStatesMixin, name_image_token_index
from .encoder_graphs.cpu import CPUEncoderGraphs, cpu_graphs_requested
from .encoder_graphs.protocol import EncoderGraphsMixin
from .forward_token_rows import TokenRows
from .head import HFLogitsHead
from .hf_classes import text_model_computing_its_own_attention
from .layer_replacement import LayerReplacementMixin
from .mm_embedding import MultiModalEmbeddingMixin
from .model_building import ModelBuildingMixin
from .moe import HFBridgeMoEMixin
from .mrope_positions import MRoPEPositionsMixin
from .per_request_rope import install_per_request_frequencies
from .processing import HFBridgeDummyInputsBuilder, HFBridgeMultiModalProcessor, HFBridgeProcessingInfo
from .side_features import INTERMEDIATE_KEY as SIDE_INTERMEDIATE_KEY
from .side_features import DecoderConvention, SideFeatures, configured_levels, decoder_convention
from .state_layers import CarriedStateMixin
from .token_inputs import per_layer_inputs_taker, reads_per_layer_token_embeddings
from .versions import log_handling
from .weight_names import WeightNamesMixin


@MULTIMODAL_REGISTRY.register_processor(
    HFBridgeMultiModalProcessor, info=HFBridgeProcessingInfo, dummy_inputs=HFBridgeDummyInputsBuilder
)
class HFBridgeBase(DecoderInputsMixin, WeightNamesMixin, ModelBuildingMixin, AttentionLayersMixin, LayerReplacementMixin,
                   MultiModalEmbeddingMixin, MRoPEPositionsMixin, EncoderGraphsMixin, TextModelAdaptersMixin,
                   Eagle3HiddenStatesMixin, MultiModalMixin):
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
