"""M-RoPE positions of a prompt, from the HF model's own `get_rope_index` (no vLLM import).

transformers computes them over a whole prompt from its ids, the token types the
processor returned and each item's size fields (`image_grid_thw`, ...). vLLM asks for them
per request, holding each item's fields apart: they are put back in prompt order here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import torch

from .embeds import GRID_FIELDS, POSITION_FIELDS
from .features import accepted_kwargs

MROPE_AXES = 3
"""The rows of vLLM's M-RoPE positions (time, height, width)."""
FROM_PROMPT = frozenset({"input_ids", "mm_token_type_ids", "attention_mask"})
"""What `get_rope_index` takes from the prompt, not from an item's fields."""


@dataclass(frozen=True)
class PlacedItem:
    """An item's place in the prompt, its tokens' types, and its processed fields."""

    offset: int
    type_ids: torch.Tensor
    fields: Mapping[str, object]


def mrope_positions(get_rope_index: Callable | None, input_ids: list[int], items: Iterable[PlacedItem]) -> tuple[torch.Tensor, int]:
    """(positions (3, tokens), delta) for a prompt whose items are `items`, in prompt order.

    A model whose text config asks for M-RoPE but whose base model has no `get_rope_index`
    (MiniCPM-V 4.6 on a Qwen3.5 text model) is given the text positions on every axis, as
    transformers' text model gives them when no positions are passed."""
    if get_rope_index is None:
        return torch.arange(len(input_ids)).expand(MROPE_AXES, -1), 0
    type_ids = torch.zeros(len(input_ids), dtype=torch.long)
    fields = item_fields(get_rope_index)
    rows: dict[str, list[torch.Tensor]] = {}
    for item in items:
        type_ids[item.offset : item.offset + len(item.type_ids)] = item.type_ids
        for key in fields:
            value = item.fields.get(key)
            if isinstance(value, torch.Tensor):
                # a size row per item; another named field (MiniCPM-V 4.7's `target_sizes`) keeps its rows too
                as_rows = key in GRID_FIELDS or (key not in POSITION_FIELDS and value.ndim > 0)
                rows.setdefault(key, []).append(value.reshape(-1, value.shape[-1]) if as_rows else value.reshape(-1))
    kwargs: dict[str, object] = {key: torch.cat(values) for key, values in rows.items()}
    kwargs["mm_token_type_ids"] = type_ids[None]
    accepted = accepted_kwargs(get_rope_index)
    kwargs = {k: v for k, v in kwargs.items() if accepted is None or k in accepted}
    positions, delta = get_rope_index(input_ids=torch.tensor(input_ids)[None], **kwargs)
    return positions[:, 0], int(delta[0])


def item_fields(get_rope_index: Callable) -> tuple[str, ...]:
    """The item fields positions are computed from: `POSITION_FIELDS`, and any other the
    method names."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    named = [n for n, p in inspect.signature(get_rope_index).parameters.items() if p.kind in kinds and n not in FROM_PROMPT]
    return tuple(dict.fromkeys((*POSITION_FIELDS, *named)))
