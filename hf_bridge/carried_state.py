"""Decoder layers that carry a state from one step to the next (linear attention, short
convolutions), run by transformers' own modules on states vLLM keeps per request.

transformers caches such a layer's convolution and recurrent states in a cache layer of
its own (`LinearAttentionLayer`: Qwen3.5's Gated DeltaNet, LFM2's short convolutions)
beside the keys and values, and the layer's module reads and updates them through the
cache it is handed (`cache_params`, `past_key_values`). vLLM keeps per-request states for
its native hybrid models in slots of its hybrid KV cache. hf_bridge hands the module each
request's states as a transformers cache holding that request alone, lets the module run,
and writes the states it leaves back to the request's slot: the module's own code
computes a prefill, a decode step, and a prefill continuing an earlier chunk (transformers
takes the cached states as its initial ones there too).

Decode steps of requests that already have states run as one batch; every other request
runs alone, as transformers runs a prompt. No vLLM import: the layer owning the slots is
`state_layers.py`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from . import errors
from .hf_classes import method_source

CACHE_ARGUMENTS = ("cache_params", "past_key_values")
"""What transformers' modules call the cache they read a layer's states from."""
STATE_KINDS = ("conv_states", "recurrent_states")
"""The cache layer's state dictionaries (state index -> tensor, batch first)."""
PROBE_LENGTHS = (2, 7)
"""Prompt lengths the layout is measured at, below and above every convolution kernel
transformers ships (4): a state whose shape follows the prompt cannot live in a slot."""


@dataclass(frozen=True)
class StateEntry:
    """One tensor of a layer's cached state: `kind` (one of `STATE_KINDS`), its index among
    the layer's states, and its shape without the batch dimension."""

    kind: str
    index: int
    shape: tuple[int, ...]
    dtype: torch.dtype


@dataclass(frozen=True)
class StepSequence:
    """One request's tokens in a step: rows `start`..`end` of the flattened batch, the slot
    holding its states, and whether it has states yet (a prompt's first chunk has none)."""

    start: int
    end: int
    slot: int
    continues: bool


def state_modules(model: torch.nn.Module, layers: Iterable[int]) -> dict[int, tuple[str, torch.nn.Module]]:
    """Each decoder layer index in `layers` -> the qualname and module transformers hands that
    layer's cache to: the innermost module with that `layer_idx` whose forward takes the
    cache, attention modules aside (Falcon-H1's layers run a Mamba mixer beside attention,
    both handed the cache; vLLM keeps the attention's keys and values). A layer with none,
    or with two, is left out."""
    wanted = set(layers)
    found: dict[int, list[tuple[str, torch.nn.Module]]] = {}
    for name, module in model.named_modules():
        index = getattr(module, "layer_idx", None)
        if index in wanted and cache_argument(module) is not None and not attends_through_transformers(type(module)):
            found.setdefault(index, []).append((name, module))
    innermost = {}
    for index, candidates in found.items():
        inner = [(n, m) for n, m in candidates if not any(o != n and o.startswith(f"{n}.") for o, _ in candidates)]
        if len(inner) == 1:
            innermost[index] = inner[0]
    return innermost


ATTENTION_INTERFACE = "ALL_ATTENTION_FUNCTIONS"
"""transformers' registry of attention functions, where vLLM's `"vllm"` function is found:
an attention module's forward calls through it."""


@functools.cache
def attends_through_transformers(cls: type) -> bool:
    """Whether `cls.forward` calls transformers' attention interface, as its attention modules
    do (where its source cannot be read, it is not known to)."""
    return ATTENTION_INTERFACE in (method_source(cls) or "")


def cache_argument(module: torch.nn.Module) -> str | None:
    """The name `module`'s forward takes the cache by, if it takes one."""
    parameters = inspect.signature(type(module).forward).parameters
    return next((name for name in CACHE_ARGUMENTS if name in parameters), None)


class OneLayerCache:
    """A transformers cache for `text_config` whose layer `layer_idx` is rebuilt for each
    call, holding the states of the requests run together (none: a fresh prompt)."""

    def __init__(self, text_config: Any, layer_idx: int):
        from transformers.cache_utils import DYNAMIC_LAYER_TYPE_MAPPING, DynamicCache, get_layer_types_and_kwargs

        types, per_layer_kwargs = get_layer_types_and_kwargs(text_config)
        self.layer_idx = layer_idx
        self.cache = DynamicCache(config=text_config)
        self._new_layer = functools.partial(DYNAMIC_LAYER_TYPE_MAPPING[types[layer_idx]], **per_layer_kwargs[layer_idx])

    def holding(self, states: Sequence[torch.Tensor] | None, layout: Sequence[StateEntry]):
        """The cache, its layer holding `states` (in `layout`'s order), or nothing."""
        layer = self._new_layer()
        for entry, tensor in zip(layout, states or ()):
            getattr(layer, entry.kind)[entry.index] = tensor
            getattr(layer, f"is_{entry.kind}_initialized")[entry.index] = True
            layer.has_previous_state[entry.index] = True
            if entry.kind == "conv_states":
                layer.conv_kernel_size[entry.index] = tensor.shape[-1]
            if layer.device is None:  # as transformers sets them: from the first state it caches
                layer.device, layer.dtype = tensor.device, tensor.dtype
        self.cache.layers[self.layer_idx] = layer
        return self.cache

    def left(self, layout: Sequence[StateEntry]) -> list[torch.Tensor]:
        """The states the last call left, in `layout`'s order."""
        layer = self.cache.layers[self.layer_idx]
        return [getattr(layer, entry.kind)[entry.index] for entry in layout]

    def measured(self) -> tuple[StateEntry, ...]:
        """What the last call left, as entries."""
        layer = self.cache.layers[self.layer_idx]
        return tuple(
            StateEntry(kind, index, tuple(tensor.shape[1:]), tensor.dtype)
            for index in range(getattr(layer, "number_of_states", 0))
            for kind in STATE_KINDS
            if getattr(layer, f"is_{kind}_initialized")[index] and (tensor := getattr(layer, kind)[index]) is not None
        )


class StateLayoutError(ValueError):
    """The module's cached state changes shape with the prompt, it caches none, or it does
    not run on hidden states and a transformers cache alone."""


@torch.no_grad()
def measure_layout(forward: Callable[..., Any], argument: str, cache: OneLayerCache, width: int, device: torch.device,
                   dtype: torch.dtype) -> tuple[StateEntry, ...]:
    """The states an HF module's `forward` caches after a prompt (through `argument`),
    measured by running it at each of `PROBE_LENGTHS` (its weights need only be allocated)."""
    layouts = set()
    for length in PROBE_LENGTHS:
        try:
            forward(torch.zeros(1, length, width, device=device, dtype=dtype), **{argument: cache.holding(None, ())})
        except (TypeError, AttributeError) as exc:  # it wants more, or a cache class of its own (MiniMax's)
            raise StateLayoutError(errors.state_module_not_run_alone(getattr(forward, "__qualname__", str(forward)), exc)) from exc
        layouts.add(cache.measured())
    if len(layouts) != 1 or not next(iter(layouts)):
        raise StateLayoutError(f"{getattr(forward, '__qualname__', forward)} caches {sorted(map(str, layouts))} after prompts of "
                               f"{PROBE_LENGTHS} tokens, not one fixed-size state")
    return layouts.pop()


def groups(sequences: Sequence[StepSequence]) -> list[list[int]]:
    """Which sequences run together: every one-token step of a request that has states in one
    batch, every other sequence alone."""
    stepping = [i for i, s in enumerate(sequences) if s.continues and s.end - s.start == 1]
    alone = [[i] for i in range(len(sequences)) if i not in set(stepping)]
    return ([stepping] if stepping else []) + alone


def run_on_slots(
    forward: Callable[..., Any],
    hidden_states: torch.Tensor,
    kwargs: dict[str, Any],
    argument: str,
    sequences: Sequence[StepSequence],
    slots: Sequence[torch.Tensor],
    layout: Sequence[StateEntry],
    cache: OneLayerCache,
) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """`forward` (the HF module's own) over the step's flattened tokens `hidden_states`
    (1, tokens, width), each request on its own states: read from `slots` (one tensor per
    layout entry, slot first) and written back there. The module returns one tensor, or
    several (ZAYA's convolved queries, keys and values), each batch first, then tokens;
    so does this, over the step's tokens. Rows past the last request (a padded batch)
    come out as zeros."""
    outputs: list[tuple[torch.Tensor, ...] | None] = [None] * len(sequences)
    several = False
    for group in groups(sequences):
        members = [sequences[i] for i in group]
        rows = torch.stack([hidden_states[0, s.start:s.end] for s in members])
        where = torch.tensor([s.slot for s in members], device=hidden_states.device)
        held = [slot.index_select(0, where) for slot in slots] if members[0].continues else None
        out = forward(rows, **kwargs, **{argument: cache.holding(held, layout)})
        for slot, state in zip(slots, cache.left(layout)):
            slot.index_copy_(0, where, state.to(slot.dtype))
        several = isinstance(out, tuple)
        for position, i in enumerate(group):
            outputs[i] = tuple(part[position] for part in (out if several else (out,)))
    tokens = hidden_states.shape[1]
    done = sequences[-1].end if sequences else 0
    pieces = [o for o in outputs if o is not None]
    if done < tokens:
        like = pieces[0] if pieces else (hidden_states[0],)
        pieces.append(tuple(part.new_zeros(tokens - done, *part.shape[1:]) for part in like))
    joined = tuple(torch.cat(column)[None] for column in zip(*pieces))
    return joined if several else joined[0]
