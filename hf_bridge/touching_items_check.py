"""The front end's refusal of media items with no text between them, where the model's
M-RoPE positions cannot be laid out for them (`touching_items.py`): vLLM's worker would
raise computing them, which stops the engine.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property

import torch
from vllm.logger import init_logger
from vllm.multimodal.inputs import MultiModalKwargsItem

from . import LOGGER_NAME, errors
from .dummy_request import is_dummy_request
from .hf_classes import base_model_class
from .mrope import ROPE_INDEX_METHOD, Derivation, PlacedItem, item_fields, item_rope_inputs, mrope_positions, rope_index_arguments
from .touching_items import touching, touching_error

logger = init_logger(LOGGER_NAME)

RopeInputs = tuple[torch.Tensor, Mapping[str, object]]
"""An item's token types and the fields its positions are computed from (`mrope.item_rope_inputs`)."""


class TouchingItemsCheckMixin:
    """The multimodal processor's refusal of items that touch, on an M-RoPE model."""

    def _rope_inputs(self, modality: str, item: MultiModalKwargsItem) -> RopeInputs | None:
        """What the check needs of an item, kept beside its prompt update: vLLM's processor
        cache keeps the update in the front end, where it sends a cached item to the worker
        without its fields. None where the model computes no positions from items."""
        fields = self._rope_fields
        return None if fields is None else item_rope_inputs(modality, item, fields)

    @cached_property
    def _rope_fields(self) -> tuple[str, ...] | None:
        """The item fields the model's M-RoPE positions are computed from; None where it
        computes none from items (no M-RoPE, or no `get_rope_index`: MiniCPM-V 4.6)."""
        if not self.info.ctx.model_config.uses_mrope:
            return None
        model_class = base_model_class(self.info.get_hf_config())
        get_rope_index = getattr(model_class, ROPE_INDEX_METHOD, None)
        return None if get_rope_index is None else item_fields(get_rope_index, *self._rope_index_arguments)

    @cached_property
    def _rope_index_arguments(self) -> tuple[dict[str, str], dict[str, Derivation]]:
        """`mrope.rope_index_arguments` of the HF model's class."""
        return rope_index_arguments(base_model_class(self.info.get_hf_config()))

    @cached_property
    def _positions(self) -> Callable[[list[int], list[PlacedItem]], object] | None:
        """The positions the worker computes (`mrope.mrope_positions`), by `get_rope_index`
        of the HF model built on the meta device (no weights, nothing computed): built for
        the first prompt whose items touch. None where it cannot be built."""
        config = self.info.get_hf_config()
        model_class = base_model_class(config)
        try:
            with torch.device("meta"):
                model = model_class(copy.deepcopy(config))  # its own config: building may set fields on it
        except Exception as error:  # noqa: BLE001 - the check is skipped, as it says
            logger.warning(errors.touching_items_unchecked(model_class.__name__, error))
            return None
        get_rope_index = getattr(model, ROPE_INDEX_METHOD)
        handed, derived = self._rope_index_arguments
        return lambda input_ids, items: mrope_positions(get_rope_index, input_ids, items, handed, derived)

    def _maybe_apply_prompt_updates(self, mm_items, mm_res):
        prompt_ids, placed = super()._maybe_apply_prompt_updates(mm_items, mm_res)
        if self._rope_fields is not None and not is_dummy_request():  # vLLM's dummy prompt holds items that touch
            self._check_items_apart(prompt_ids, placed, mm_res.prompt_updates)
        return prompt_ids, placed

    def _check_items_apart(self, prompt_ids: list[int], placed: Mapping[str, Sequence], updates: Mapping[str, Sequence]) -> None:
        """Refuse a prompt whose items touch where the model's own `get_rope_index` then
        raises, and lays the items out with text between them (`touching_items.touching_error`)."""
        named, items = [], []
        for modality, infos in placed.items():
            for info in infos:
                rope = getattr(updates[modality][info.item_idx][0].content, "rope_inputs", None)
                if rope is None:
                    return
                named.append((modality, info.item_idx))
                items.append(PlacedItem(info.start_idx, *rope))
        if not touching(items) or (positions := self._positions) is None:
            return
        inside = {i for item in items for i in range(item.offset, item.offset + len(item.type_ids))}
        text = [token for i, token in enumerate(prompt_ids) if i not in inside]
        text_token = text[0] if text else self.info.get_tokenizer().eos_token_id
        if text_token is not None and (found := touching_error(positions, prompt_ids, items, text_token)) is not None:
            (first, second), error = found
            model_class = base_model_class(self.info.get_hf_config()).__name__
            raise ValueError(errors.items_touch(named[first], named[second], model_class, error))
