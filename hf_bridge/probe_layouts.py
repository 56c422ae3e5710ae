"""How a processor lays out items beside each other, learnt from blank items: whether it
stacks items along rows, the pixel sides it gives every item, and where it numbers an
item among others (`numbering.py`): no vLLM import.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import numbering, pixel_sides, placeholders
from .probes import FIXED_SIDES_PROBE, PROBE_SENTINEL, kwargs_key


class ItemLayoutMixin:
    """`ProcessorProbe`'s layouts of items beside each other, learnt once per modality and kwargs."""

    def stacks_items_along_rows(self, modality: str) -> bool:
        """Whether the processor lays two items out, processed together, as their one-item
        outputs concatenated along the first dimension, key by key: the layout hf_bridge
        joins items of one shape in for one encoder call (`split.batch_groups`). MiniCPM-V
        packs its images along the last dimension instead, so its items are encoded one
        at a time. A processor that refuses two items gives no layout to keep: True."""
        if modality not in self._stacks_along_rows:
            self._stacks_along_rows[modality] = self._learn_stacking(modality)
        return self._stacks_along_rows[modality]

    def _learn_stacking(self, modality: str) -> bool:
        import torch

        from .split import item_data_keys

        text = self.item_text(modality)
        try:
            alone = self.call_one_item(text, self.blank(modality), self.default_kwargs)
            together = self.call_one_item(text * 2, self.blank(modality, 2), self.default_kwargs)
        except Exception:  # noqa: BLE001 - one item per prompt (Fuyu): nothing to join
            return True
        for key in item_data_keys(list(alone.keys())):
            one, two = alone[key], together.get(key)
            if isinstance(one, torch.Tensor) and one.ndim and not _joined_as_stacked(two, torch.cat([one, one])):
                return False
        return True

    def fixed_pixel_sides(self, modality: str, hf_kwargs: Mapping[str, object]) -> dict[str, pixel_sides.Sides]:
        """The pixel sides the processor gives every item of `modality` under `hf_kwargs`,
        by key (`pixel_sides.py`): learnt once per kwargs from its usual blank item and
        larger ones, wide and tall; none where it takes fewer than two of them."""
        key = (modality, kwargs_key(hf_kwargs))
        if key not in self._fixed_sides:
            self._fixed_sides[key] = self._learn_fixed_sides(modality, hf_kwargs)
        return self._fixed_sides[key]

    def _learn_fixed_sides(self, modality: str, hf_kwargs: Mapping[str, object]) -> dict[str, pixel_sides.Sides]:
        if modality not in ("image", "video"):
            return {}
        shape = self.blank_shape(modality)
        sizes = [(shape.width, shape.height),
                 (max(FIXED_SIDES_PROBE[0], 2 * shape.width), max(FIXED_SIDES_PROBE[1], shape.height)),
                 (max(FIXED_SIDES_PROBE[1], shape.width), max(FIXED_SIDES_PROBE[0], 2 * shape.height))]
        outputs = []
        for width, height in sizes:
            try:
                out, _ = self.probe(modality, self.blank(modality, width=width, height=height, hf_kwargs=hf_kwargs), hf_kwargs)
            except Exception:  # noqa: BLE001 - a processor may refuse a size: the others tell
                continue
            outputs.append(pixel_sides.tensor_shapes(out))
            if not pixel_sides.fixed_sides(outputs):  # no tensor laid out as images (flat patches), or sides that follow
                return {}
        return pixel_sides.fixed_sides(outputs) if len(outputs) > 1 else {}

    def number_window(self, modality: str, index: int, hf_kwargs: Mapping[str, object]) -> numbering.NumberWindow | None:
        """Where the processor writes the index of the item at `index` into its expansion
        (`numbering.py`); None where it writes none. Learnt from blank items processed
        together, once per index; a processor that leaves the second item unnumbered is
        taken to number none."""
        if index == 0 or modality in self.writes_prompt or self.frame(modality).inserts_item:
            return None
        key = kwargs_key(hf_kwargs)
        if index > 1 and self._number_window(modality, 1, hf_kwargs, key) is None:
            return None
        return self._number_window(modality, index, hf_kwargs, key)

    def _number_window(self, modality: str, index: int, hf_kwargs: Mapping[str, object], key: str) -> numbering.NumberWindow | None:
        if (modality, key, index) not in self._number_windows:
            self._number_windows[modality, key, index] = numbering.number_window(
                self.probe(modality, self.blank(modality, hf_kwargs=hf_kwargs), hf_kwargs)[1].token_ids,
                self._blank_expansion_at(modality, index, hf_kwargs),
            )
        return self._number_windows[modality, key, index]

    def _blank_expansion_at(self, modality: str, index: int, hf_kwargs: Mapping[str, object]) -> list[int]:
        """The expansion of the blank item at `index` among `index + 2`, each placeholder
        followed by the sentinel: the text between the sentinels around it is that
        expansion alone (the frame adds tokens at the start and after the last item only)."""
        count = index + 2
        text = (self.placeholder_text(modality) + PROBE_SENTINEL) * count
        try:
            ids = self.call_one_item(text, self.blank(modality, count, hf_kwargs=hf_kwargs), hf_kwargs)["input_ids"][0].tolist()
        except Exception:  # noqa: BLE001 - a processor that takes one item per prompt (Fuyu) numbers none
            return list(self.probe(modality, self.blank(modality, hf_kwargs=hf_kwargs), hf_kwargs)[1].token_ids)
        sentinel = self.tokenizer.encode(PROBE_SENTINEL, add_special_tokens=False)
        starts = placeholders.find_all_sublists(ids, sentinel)
        if len(starts) != count:
            raise placeholders.PlaceholderError(f"the processor dropped or changed the text between {count} placeholders")
        return ids[starts[index - 1] + len(sentinel):starts[index]]


def _joined_as_stacked(together: Any, stacked: Any) -> bool:
    """`together` holds `stacked`'s values in its order: equal, or equal once the first
    two dimensions are merged (Idefics3 puts a prompt's images in its second dimension,
    and its model merges the two)."""
    import torch

    if not isinstance(together, torch.Tensor) or together.numel() != stacked.numel():
        return False
    if together.shape == stacked.shape:
        return torch.equal(together, stacked)
    return together.ndim >= 2 and stacked.ndim >= 2 and torch.equal(together.flatten(0, 1), stacked.flatten(0, 1))
