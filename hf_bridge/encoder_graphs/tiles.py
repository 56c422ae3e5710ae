"""Which vision towers can run as graphs over token budgets, and how items pack.

Pure functions over plain data (shapes and counts): no torch, no vLLM.

A captured graph has fixed shapes, so it can serve an item only if the item is a stack
of fixed-shape *tiles* and the encoder turns each tile into the same number of output
rows, independently of the other tiles: then a budget of `B` output tokens is a buffer
of `B // tokens_per_tile` tiles, any set of items whose tiles fit is packed into it,
and the unused tiles are zeros whose outputs are never read.

Eligibility is learnt from the model's own processor: blank images of two different
sizes are processed alone (as every request's items are) and their data compared.
InternVL (tiles from `crop_to_patches`), LLaVA/CLIP, Gemma3/SigLIP, PaliGemma,
Chameleon and Fuyu (each patch a tile of one token) qualify; a processor whose item
data carries anything besides the pixel stack (image sizes, patch masks, grids) makes
the output depend on more than the tile count, and does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Shape = tuple[int, ...]


@dataclass(frozen=True)
class ProbedItem:
    """One blank item as the processor made it: its data fields and embedding count."""

    fields: Mapping[str, tuple[Shape, bool]]
    """Field name -> (shape, is floating point)."""
    num_embeds: int


@dataclass(frozen=True)
class TileLayout:
    """How items of one modality map onto tiles."""

    field: str
    """The item data field holding the tile stack."""
    tile_shape: Shape
    """Shape of one tile (the field's shape without its leading dimension)."""
    tokens_per_tile: int

    def tiles_for_budget(self, token_budget: int) -> int:
        return token_budget // self.tokens_per_tile


@dataclass(frozen=True)
class Ineligible:
    reason: str


def tile_layout(probes: Sequence[ProbedItem]) -> TileLayout | Ineligible:
    """The layout every probe agrees on, or why there is none."""
    if not probes:
        return Ineligible("no item could be probed")
    names = {tuple(sorted(p.fields)) for p in probes}
    if len(names) != 1:
        return Ineligible(f"items carry different fields: {sorted(names)}")
    (fields,) = names
    floating = [f for f in fields if probes[0].fields[f][1]]
    others = [f for f in fields if f not in floating]
    if len(floating) != 1 or others:
        return Ineligible(
            f"an item's data is {list(fields)}: the encoder output depends on more than one stack of tiles"
            if others
            else f"an item's data holds {len(floating)} pixel fields, not one stack of tiles"
        )
    (field,) = floating
    shapes = [p.fields[field][0] for p in probes]
    if any(len(s) < 2 for s in shapes):
        return Ineligible(f"{field} has no tile dimension (shapes {shapes})")
    tile_shapes = {s[1:] for s in shapes}
    if len(tile_shapes) != 1:
        return Ineligible(f"{field} tiles change shape with the image ({sorted(tile_shapes)})")
    per_tile = {p.num_embeds / p.fields[field][0][0] for p in probes}
    if len(per_tile) != 1 or not float(next(iter(per_tile))).is_integer() or next(iter(per_tile)) < 1:
        counts = [(p.fields[field][0][0], p.num_embeds) for p in probes]
        return Ineligible(f"output tokens are not a fixed number per tile ((tiles, tokens): {counts})")
    return TileLayout(field, next(iter(tile_shapes)), int(next(iter(per_tile))))


def budget_range(layout: TileLayout, max_tiles_per_item: int, max_items: int, max_tokens: int) -> tuple[int, int]:
    """(smallest, largest) token budget worth capturing: one tile, and as many items of
    the most tiles as a step can hold, capped by the step's token limit and kept a whole
    number of tiles."""
    smallest = layout.tokens_per_tile
    largest = min(max_tiles_per_item * max(max_items, 1) * smallest, max(max_tokens, smallest))
    return smallest, max(smallest, largest - largest % smallest)
