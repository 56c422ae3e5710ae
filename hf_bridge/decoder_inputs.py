"""What the decoder gets beside the merged embeddings, looked up where vLLM still has the ids:
per-layer token embeddings (Gemma 4, `token_inputs.py`), per-token inputs the processor
derives from the ids (Ernie 4.5 VL's expert types, `token_tables.py`), and rows the HF
forward builds for some ids otherwise than its tables (Gemma 3n's media markers,
`forward_token_rows.py`), or only beside an item (Ovis2's indicators, `rows_beside_items.py`).
"""

from __future__ import annotations

import inspect

import torch
from vllm.logger import init_logger

from . import LOGGER_NAME, errors, features
from .forward_token_rows import EMBEDS, TokenRows, apply_beside_media, asked_ids, learn_token_rows
from .hf_classes import forward_takes
from .rows_beside_items import rows_beside_items
from .step_kwargs import keep_eager
from .token_inputs import PER_LAYER_INPUTS_ARG, PerLayerTokenInputs
from .token_tables import TokenTableInputs, learn_token_tables, may_take_token_fields, token_fields

logger = init_logger(LOGGER_NAME)


class DecoderInputsMixin:
    """The HF model's per-token inputs, from the ids `embed_input_ids` sees."""

    def _refuse_prompt_embeds_where_ids_are_read(self) -> None:
        """A prompt given as embeddings has no token ids to look per-layer inputs or token
        tables up by (Gemma 4 and Gemma 3n; Ernie 4.5 VL): refused at start, not served wrong."""
        read_by_id = ["per-layer token embeddings"] if self.per_layer_token_inputs is not None else []
        if self.token_table_inputs is not None:
            read_by_id += list(self.token_table_inputs.lookups)
        if read_by_id:
            raise ValueError(errors.prompt_embeds_without_token_ids(type(self.model).__name__, read_by_id))

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

    def _checkpoint_processor(self, to_learn: str):
        """The checkpoint's HF processor as vLLM's front end loads it (cached there), or None
        where it does not load: the front end's own loading then refuses the model."""
        from vllm.transformers_utils.processor import cached_processor_from_config

        from .processing import hf_processor_class

        model_config = self.model_config
        try:
            return cached_processor_from_config(model_config, hf_processor_class(model_config.model, model_config.revision))
        except Exception as error:  # noqa: BLE001 - reported where the front end loads it
            logger.warning("hf_bridge learns no %s for %s: its processor did not load (%s: %s)",
                           to_learn, type(self.model).__name__, type(error).__name__, error)
            return None

    def _learn_token_tables(self) -> dict[str, dict[int, int]]:
        """`token_tables.py`: per-token inputs the processor derives from the ids alone, for
        the HF base model (Ernie 4.5 VL's experts chosen by modality)."""
        base = type(self.model)
        if not may_take_token_fields(list(inspect.signature(base.forward).parameters)):
            return {}
        processor = self._checkpoint_processor("per-token inputs")
        if processor is None:
            return {}
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

    @property
    def _embeds_per_token(self) -> bool:
        """Whether `embed_input_ids` sets more than the table's rows: per-layer inputs or
        token fields it records from the ids, or rows the HF forward builds otherwise."""
        return (self.per_layer_token_inputs is not None or self.token_table_inputs is not None
                or bool(self.forward_token_rows) or self.token_rows_beside_items is not None)

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
        from .processor_probe import ProcessorProbe

        model_config = self.model_config
        processor = self._checkpoint_processor("rows beside items")
        if processor is None:
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
