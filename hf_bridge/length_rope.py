"""Rotary embeddings whose frequencies follow a sequence's length (transformers'
`dynamic_rope_update`: `longrope`, and `dynamic` and its kin), computed per request as
transformers computes them for that request alone.

transformers' rotary module reads the length from the largest position in its forward,
which under vLLM is the whole step's batch; and a dynamic one keeps what it last computed
from call to call (vLLM's start-up run, at the longest positions, among them). So a short
request batched with a long one took the long one's frequencies, and a dynamic RoPE past
its original length kept the start-up run's. Here each request's rows get the frequencies
of a fresh module called with that request's positions: the rows of requests that would
get the same ones are computed in one call. No vLLM import: the caller gives the step's
request boundaries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

LONGROPE = "longrope"


def follows_length(rope_type: object) -> bool:
    """Whether transformers recomputes this RoPE's frequencies from the sequence's length."""
    return isinstance(rope_type, str) and (rope_type == LONGROPE or "dynamic" in rope_type)


def length_rope_types(config: Any) -> list[str]:
    """The config's RoPE types that follow the length (its `rope_parameters`, flat or per layer type)."""
    params = getattr(config, "rope_parameters", None) or {}
    entries = list(params.values()) if params and all(isinstance(v, dict) for v in params.values()) else [params]
    return sorted({e.get("rope_type") for e in entries if isinstance(e, dict) and follows_length(e.get("rope_type"))})


def length_rotaries(model: torch.nn.Module) -> list[torch.nn.Module]:
    """`model`'s rotary modules whose frequencies follow the length."""
    return [m for m in model.modules() if _layer_types(m)]


def _layer_types(module: torch.nn.Module) -> list[str | None]:
    """The layer types (None: the module's one type) whose RoPE follows the length."""
    rope_type = getattr(module, "rope_type", None)
    if isinstance(rope_type, dict):
        return [layer for layer, kind in rope_type.items() if follows_length(kind)]
    return [None] if follows_length(rope_type) and hasattr(module, "original_inv_freq") else []


def forget_length(module: torch.nn.Module) -> None:
    """`module` back to the frequencies of a fresh one, as transformers' own reset does it:
    a forward at position 0 (below any original length)."""
    x = torch.zeros(1, 1, 1, device=next(module.buffers()).device)  # its frequencies' device
    for layer in _layer_types(module):
        _class_forward(module)(module, x, torch.zeros(1, 1, dtype=torch.long, device=x.device), **_layer_kwargs(layer))


def _class_forward(module: torch.nn.Module) -> Callable:
    return type(module).forward


def _layer_kwargs(layer: str | None) -> dict[str, str]:
    return {} if layer is None else {"layer_type": layer}


def original_length(module: torch.nn.Module, layer: str | None) -> int:
    """The length past which `module`'s frequencies change: LongRoPE's
    `original_max_position_embeddings`, a dynamic RoPE's `original_max_seq_len`."""
    kind = module.rope_type if layer is None else module.rope_type[layer]
    if kind == LONGROPE:
        params = module.config.rope_parameters
        return int((params if layer is None else params[layer])["original_max_position_embeddings"])
    return int(module.original_max_seq_len)


def frequency_groups(starts: Sequence[int], num_rows: int, last_positions: Sequence[int], rope_type: str,
                     original: int) -> list[list[tuple[int, int]]]:
    """The step's row ranges (`starts`: each request's first row, then the end of its
    last), grouped by the frequencies transformers gives each request alone: one group for
    every request within `original` positions, and past it one for all (LongRoPE's long
    factors) or one per length (a dynamic RoPE). Rows past the last request (padding) join
    the first group. `last_positions`: each request's last position in the step."""
    groups: dict[object, list[tuple[int, int]]] = {}
    for (start, end), last in zip(zip(starts, starts[1:]), last_positions):
        if end > start:
            length = last + 1
            key = None if length <= original else (LONGROPE if rope_type == LONGROPE else length)
            groups.setdefault(key, []).append((start, end))
    if num_rows > starts[-1]:
        groups.setdefault(None, []).append((starts[-1], num_rows))
    return list(groups.values())


class PerRequestFrequencies:
    """Installed on a rotary module: its forward gives each request of an engine step the
    frequencies of a fresh module called with that request's rows alone.
    `request_starts(num_rows)` gives the step's boundaries (None outside a step: the
    module is called as it is, fresh)."""

    def __init__(self, module: torch.nn.Module, request_starts: Callable[[int], list[int] | None]):
        self.module, self.request_starts = module, request_starts

    def install(self) -> None:
        self.module.forward = self.forward

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None = None):
        module, kwargs = self.module, _layer_kwargs(layer_type)
        forward = _class_forward(module)
        num_rows = position_ids.shape[-1]
        starts = self.request_starts(num_rows) if position_ids.dim() == 2 else None
        if layer_type not in _layer_types(module) or not starts or len(starts) < 2:
            forget_length(module)
            return forward(module, x, position_ids, **kwargs)
        last_positions = position_ids[0, [max(end - 1, 0) for end in starts[1:]]].tolist()
        kind = module.rope_type if layer_type is None else module.rope_type[layer_type]
        groups = frequency_groups(starts, num_rows, last_positions, kind, original_length(module, layer_type))
        if len(groups) == 1:
            forget_length(module)
            return forward(module, x, position_ids, **kwargs)
        cos = sin = None
        for group in groups:
            rows = torch.cat([torch.arange(start, end, device=position_ids.device) for start, end in group])
            forget_length(module)
            group_cos, group_sin = forward(module, x[:, rows] if x.dim() == 3 else x, position_ids[:, rows], **kwargs)
            if cos is None:
                cos = group_cos.new_empty((*group_cos.shape[:-2], num_rows, group_cos.shape[-1]))
                sin = torch.empty_like(cos)
            cos[..., rows, :], sin[..., rows, :] = group_cos, group_sin
        return cos, sin
