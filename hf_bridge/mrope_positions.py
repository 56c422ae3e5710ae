"""M-RoPE positions of a prompt, from the HF model's own `get_rope_index` and the token types
the processor returned (`mrope.py`), handed what the HF forward hands it.
"""

from __future__ import annotations

from functools import cached_property

import torch
from vllm.multimodal.inputs import MultiModalFeatureSpec

from .mrope import ROPE_INDEX_METHOD, Derivation, PlacedItem, derivations, item_fields, mrope_positions, names_handed_over
from .processing import DATA_KEY, TYPE_IDS_KEY


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
