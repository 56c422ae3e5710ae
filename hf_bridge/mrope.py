"""M-RoPE positions of a prompt, from the HF model's own `get_rope_index` (no vLLM import).

transformers computes them over a whole prompt from its ids, the token types the
processor returned and each item's size fields (`image_grid_thw`, ...). vLLM asks for them
per request, holding each item's fields apart: they are put back in prompt order here.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from .embeds import GRID_FIELDS, POSITION_FIELDS
from .features import accepted_kwargs
from .hf_classes import code_names, method_tree
from .item_keys import DATA_KEY, TYPE_IDS_KEY

ROPE_INDEX_METHOD = "get_rope_index"
"""transformers' method computing a prompt's M-RoPE positions."""
MROPE_AXES = 3
"""The rows of vLLM's M-RoPE positions (time, height, width)."""
FROM_PROMPT = frozenset({"input_ids", "mm_token_type_ids", "attention_mask"})
"""What `get_rope_index` takes from the prompt, not from an item's fields."""


@dataclasses.dataclass(frozen=True)
class PlacedItem:
    """An item's place in the prompt, its tokens' types, and its processed fields."""

    offset: int
    type_ids: torch.Tensor
    fields: Mapping[str, object]


@dataclasses.dataclass(frozen=True)
class Derivation:
    """A value a model's forward computes from its own arguments, the processor's fields,
    before handing it to `get_rope_index` (Qwen2.5-Omni's `audio_feature_lengths =
    torch.sum(feature_attention_mask, dim=1)`): its expression, as the forward writes it."""

    expression: str
    inputs: tuple[str, ...]

    def __call__(self, fields: Mapping[str, object]) -> object:
        """Its value for one item, from that item's fields: hf_bridge's are the processor's
        output for the item alone (`processing._merge_items`), so the value is shaped as for
        a prompt of that item, and the items' values are joined as they are."""
        namespace = {name: fields[name] for name in self.inputs}
        return eval(compile(self.expression, "<forward>", "eval"), {"torch": torch}, namespace)  # noqa: S307 - the model's own code


def item_rope_inputs(modality: str, data: Mapping[str, Any], fields: Iterable[str]) -> tuple[torch.Tensor, dict[str, object]]:
    """An item's token types and those of `fields` (`item_fields`) it has, read from its
    processed data as hf_bridge's processor stores it (`item_keys`; each value's `.data`,
    vLLM's `MultiModalKwargsItem`)."""
    values = {key: field.data for key in fields if (field := data.get(DATA_KEY.format(modality, key))) is not None}
    return data[TYPE_IDS_KEY.format(modality)].data, values


def rope_index_arguments(model_class: type) -> tuple[dict[str, str], dict[str, Derivation]]:
    """What `model_class`'s forward hands `get_rope_index` under other names than the
    processor's fields (`names_handed_over`), and which of those it computes from the
    fields (`derivations`); empty where it has no `get_rope_index`."""
    get_rope_index = getattr(model_class, ROPE_INDEX_METHOD, None)
    if get_rope_index is None:
        return {}, {}
    handed = names_handed_over(model_class, get_rope_index)
    return handed, derivations(model_class, handed.values())


def mrope_positions(get_rope_index: Callable | None, input_ids: list[int], items: Iterable[PlacedItem],
                    handed: Mapping[str, str] | None = None,
                    derived: Mapping[str, Derivation] | None = None) -> tuple[torch.Tensor, int]:
    """(positions (3, tokens), delta) for a prompt whose items are `items`, in prompt order;
    `handed`: the method's parameters the model's forward fills from fields of another name
    (`names_handed_over`); `derived`: which of those names it computes from the fields
    (`derivations`).

    A model whose text config asks for M-RoPE but whose base model has no `get_rope_index`
    (MiniCPM-V 4.6 on a Qwen3.5 text model) is given the text positions on every axis, as
    transformers' text model gives them when no positions are passed."""
    if get_rope_index is None:
        return torch.arange(len(input_ids)).expand(MROPE_AXES, -1), 0
    type_ids = torch.zeros(len(input_ids), dtype=torch.long)
    handed, derived = dict(handed or {}), dict(derived or {})
    fields = item_fields(get_rope_index, handed)
    rows: dict[str, list[torch.Tensor]] = {}
    for item in items:
        type_ids[item.offset : item.offset + len(item.type_ids)] = item.type_ids
        for key in fields:
            value = item.fields.get(key)
            if isinstance(value, torch.Tensor):
                # a size row per item; another named field (MiniCPM-V 4.7's `target_sizes`) keeps its rows too
                as_rows = key in GRID_FIELDS or (key not in POSITION_FIELDS and value.ndim > 0)
                rows.setdefault(key, []).append(value.reshape(-1, value.shape[-1]) if as_rows else value.reshape(-1))
        for name, derive in derived.items():
            if name not in item.fields and all(key in item.fields for key in derive.inputs):
                rows.setdefault(name, []).append(derive(item.fields))
    kwargs: dict[str, object] = {key: torch.cat(values) for key, values in rows.items()}
    for parameter, field in handed.items():
        if field in kwargs:
            kwargs[parameter] = kwargs.pop(field)
    kwargs["mm_token_type_ids"] = type_ids[None]
    # one whole prompt, as transformers' generate hands it over (Qwen2.5-Omni's text positions need it)
    kwargs["attention_mask"] = torch.ones(1, len(input_ids), dtype=torch.long)
    accepted = accepted_kwargs(get_rope_index)
    kwargs = {k: v for k, v in kwargs.items() if accepted is None or k in accepted}
    positions = get_rope_index(input_ids=torch.tensor(input_ids)[None], **kwargs)[0][:, 0]
    return positions, decoding_delta(positions)


def decoding_delta(positions: torch.Tensor) -> int:
    """vLLM's M-RoPE delta (a decoding step's position less its index in the sequence) for a
    prompt of `positions` (3, tokens): where transformers' `generate` places the first
    generated token, one past the prompt's last position, as it advances the position ids
    it hands the forward (`_update_model_kwargs_for_generation`). That is not always one
    past the largest, which `get_rope_index`'s own delta counts from: Qwen2.5-VL resumes
    text after a video `max(height, width)` positions on, below the temporal positions of
    a video of more time than space (9 frames of 70 x 38 pixels: the video's positions up
    to 22, the text after it at 9 to 19, the first generated token at 20, not 23)."""
    return int(positions[:, -1].max()) + 1 - positions.shape[1]


def item_fields(get_rope_index: Callable, handed: Mapping[str, str] | None = None,
                derived: Mapping[str, Derivation] | None = None) -> tuple[str, ...]:
    """The item fields positions are computed from: `POSITION_FIELDS`, any other the
    method names, or the model's forward hands it under another name (`handed`), and those
    it computes such a value from (`derived`)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    named = [n for n, p in inspect.signature(get_rope_index).parameters.items() if p.kind in kinds and n not in FROM_PROMPT]
    inputs = [key for derivation in (derived or {}).values() for key in derivation.inputs]
    return tuple(dict.fromkeys((*POSITION_FIELDS, *named, *(handed or {}).values(), *inputs)))


def names_handed_over(model_class: type, get_rope_index: Callable) -> dict[str, str]:
    """{`get_rope_index` parameter: the name of its caller's own argument it is called
    with}, where the two differ, read from the source of the class's methods that call it
    (a caller's arguments carry the forward's names, which are the processor's fields):
    Qwen2.5-Omni's thinker hands its `video_second_per_grid` over as `second_per_grids`."""
    parameters = [name for name in inspect.signature(get_rope_index).parameters if name != "self"]  # bound or not
    handed = {}
    for name, method in inspect.getmembers(model_class, inspect.isfunction):
        if name == ROPE_INDEX_METHOD or ROPE_INDEX_METHOD not in code_names(model_class, name):
            continue
        tree = method_tree(model_class, name)
        caller_arguments = set(inspect.signature(method).parameters)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == ROPE_INDEX_METHOD:
                pairs = [*zip(parameters, node.args), *((k.arg, k.value) for k in node.keywords if k.arg)]
                handed.update({parameter: value.id for parameter, value in pairs
                               if isinstance(value, ast.Name) and value.id != parameter and value.id in caller_arguments
                               and parameter not in FROM_PROMPT})
    return handed


def derivations(model_class: type, names: Iterable[str]) -> dict[str, Derivation]:
    """For each of `names` (`names_handed_over`'s) that the class's forward assigns from its
    own arguments alone (and torch), that assignment."""
    tree = method_tree(model_class)
    arguments = set(inspect.signature(model_class.forward).parameters)
    wanted, found = set(names), {}
    for node in ast.walk(tree) if tree is not None else ():
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        target = node.targets[0].id
        inputs = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)} - {"torch"}
        if target in wanted and target not in found and inputs and inputs <= arguments and target not in inputs:
            found[target] = Derivation(ast.unparse(node.value), tuple(sorted(inputs)))
    return found
