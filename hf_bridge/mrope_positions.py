"""M-RoPE positions of a prompt, from the HF model's own `get_rope_index` and the token types
the processor returned (`mrope.py`), handed what the HF forward hands it.
"""

from __future__ import annotations

from functools import cached_property

import torch
from vllm.multimodal.inputs import MultiModalFeatureSpec

from .mrope import ROPE_INDEX_METHOD, Derivation, PlacedItem, item_fields, item_rope_inputs, mrope_positions, rope_index_arguments


class MRoPEPositionsMixin:
    """`get_mrope_input_positions` through the HF model's `get_rope_index`."""

    def get_mrope_input_positions(
        self, input_tokens: list[int], mm_features: list[MultiModalFeatureSpec]
    ) -> tuple[torch.Tensor, int]:
        get_rope_index = getattr(self.model, ROPE_INDEX_METHOD, None)
        handed, derived = self._rope_index_arguments
        fields = item_fields(get_rope_index, handed, derived) if get_rope_index is not None else ()
        items = []
        for feature in mm_features:
            type_ids, values = item_rope_inputs(feature.modality, feature.data or {}, fields)
            items.append(PlacedItem(feature.mm_position.offset, type_ids, values))
        return mrope_positions(get_rope_index, input_tokens, items, handed, derived)

    @cached_property
    def _rope_index_arguments(self) -> tuple[dict[str, str], dict[str, Derivation]]:
        """`mrope.rope_index_arguments` of the HF model's class."""
        return rope_index_arguments(type(self.model))
