"""Each item's prompt update, numbered as the processor numbers it among the request's
items (`numbering.py`): each item was processed alone, so as the first.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence

import torch
from vllm.multimodal.inputs import MultiModalKwargsItems
from vllm.multimodal.parse import MultiModalDataItems
from vllm.multimodal.processing import PromptReplacement, PromptUpdate, PromptUpdateDetails

from . import errors, numbering, placeholders
from .dummy_request import is_dummy_request
from .item_keys import EXPANSION_KEY, IS_EMBED_KEY
from .touching_items_check import RopeInputs


class NumberedUpdatesMixin:
    """The multimodal processor's prompt updates: each item's expansion as a
    `PromptReplacement` of its placeholder, numbered for the item's index."""

    def _get_prompt_updates(
        self,
        mm_items: MultiModalDataItems,
        hf_processor_mm_kwargs: Mapping[str, object],
        out_mm_kwargs: MultiModalKwargsItems,
    ) -> Sequence[PromptUpdate]:
        updates = []
        for modality, items in out_mm_kwargs.items():
            # Popped: the update is cached beside the item, the model needs neither
            expansions = [(item.pop(EXPANSION_KEY.format(modality)).data.tolist(), item.pop(IS_EMBED_KEY.format(modality)).data.clone(),
                           self._rope_inputs(modality, item)) for item in items]
            target = self.info.probes.placeholder_ids(modality)
            replacement = functools.partial(self._numbered_replacement, modality, expansions, dict(hf_processor_mm_kwargs))
            updates.append(PromptReplacement(modality=modality, target=target, replacement=replacement))
        return updates

    def _numbered_replacement(self, modality: str, expansions: Sequence[tuple[list[int], torch.Tensor, RopeInputs | None]],
                              hf_kwargs: Mapping[str, object], item_idx: int) -> PromptUpdateDetails:
        """The expansion of item `item_idx` of the items processed together, numbered as
        the processor numbers it among them (`numbering.py`): each item was processed alone."""
        full, mask, rope_inputs = expansions[item_idx]
        return NumberedDetails(full=self._numbered(modality, full, mask, hf_kwargs, item_idx),
                               is_embed=lambda _, m=mask: m, alone=full, hf_kwargs=hf_kwargs, rope_inputs=rope_inputs)

    def _recompute_cached_prompt_update(self, cached_update, new_item_idx: int):
        """vLLM resolves an update at the item's index among the cache misses it processed,
        and reuses it from its cache in later requests: numbered again for the index
        the item has in this request."""
        update = super()._recompute_cached_prompt_update(cached_update, new_item_idx)
        content = update.content
        if not isinstance(content, NumberedDetails) or cached_update.item_idx == new_item_idx:
            return update
        mask = content.is_embed(content.alone)
        full = self._numbered(update.modality, content.alone, mask, content.hf_kwargs, new_item_idx)
        return dataclasses.replace(update, content=dataclasses.replace(content, full=full))

    def _numbered(self, modality: str, alone: list[int], mask: torch.Tensor, hf_kwargs: Mapping[str, object],
                  index: int) -> list[int]:
        if is_dummy_request():  # profiling sizes only; numbering keeps sizes
            return alone
        window = self.info.probes.number_window(modality, index, hf_kwargs)
        try:
            return numbering.renumber(alone, mask.tolist(), window)
        except placeholders.PlaceholderError as exc:
            raise ValueError(errors.unnumberable_item(modality, index, exc, self.info.get_hf_processor())) from exc


@dataclasses.dataclass
class NumberedDetails(PromptUpdateDetails):
    """An item's replacement, with what numbering it again for another index needs."""

    alone: list[int] = dataclasses.field(default_factory=list)
    """The item's expansion as the processor writes it alone (numbered as the first item)."""
    hf_kwargs: Mapping[str, object] = dataclasses.field(default_factory=dict)
    """The processor kwargs the number is learnt under."""
    rope_inputs: RopeInputs | None = None
    """What the check of items that touch needs of the item (`touching_items_check.py`)."""
