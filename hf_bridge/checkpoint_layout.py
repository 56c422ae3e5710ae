"""Checkpoints in a model's original layout, read as transformers reads them: no vLLM import.

transformers 5 converts many checkpoints at load time through its `conversion_mapping`:
renamings (GLM-ASR's `language_model.model.*`) and converters that split or permute
tensors (Kimi-K2.5's fused `wqkv`, with a RoPE permutation). Its `save_pretrained` writes
that original layout back, and the hub holds it. vLLM's Transformers backend applies
only the renamings it finds on the base model, so such a checkpoint does not load.
`transformers_layout` applies the generation class's own transforms, with transformers'
own `WeightRenaming`/`WeightConverter` objects, before vLLM's name mapping sees the stream;
converters that keep a tensor's name are left to vLLM's loader for that name.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch


def checkpoint_transforms(config: Any, base_model: torch.nn.Module | None = None) -> list:
    """The transforms transformers applies when its generation class loads this checkpoint,
    from transformers' own `get_model_conversion_mapping`: it walks the generation class's
    sub-models, so it is given a stand-in of that class (no `__init__`: nothing built)
    holding `base_model`, the generation class's `model`; or `base_model` itself, where it
    is the generation class (`hf_classes.generation_class_alone`). Without one, the root's alone."""
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping, get_model_conversion_mapping

    from .head import generation_class

    cls = generation_class(config)
    if base_model is not None and type(base_model) is cls:
        return get_model_conversion_mapping(base_model)
    if base_model is not None and cls is not None and getattr(cls, "base_model_prefix", None) == "model":
        stand_in = cls.__new__(cls)
        torch.nn.Module.__init__(stand_in)
        stand_in.config = config
        stand_in.model = base_model
        return get_model_conversion_mapping(stand_in)
    for identifier in [*(getattr(config, "architectures", None) or []), getattr(config, "model_type", None)]:
        transforms = get_checkpoint_conversion_mapping(identifier) if identifier else None
        if transforms:
            return transforms
    return []


def transformers_layout(
    weights: Iterable[tuple[str, torch.Tensor]],
    config: Any,
    base_model: torch.nn.Module | None = None,
    loads_as_is: Callable[[str], bool] = lambda name: False,
) -> Iterator[tuple[str, torch.Tensor]]:
    """`weights` renamed and converted as transformers loads them, except those for which
    `loads_as_is(name)` (vLLM's own mapping places them; its renamings expect checkpoint
    names, not transformers' converted ones). A converter fed by one tensor (a fused qkv
    split in three) yields at once; one fed by several (experts merged into one tensor)
    yields when the stream ends."""
    from transformers.core_model_loading import WeightConverter, WeightRenaming

    transforms = checkpoint_transforms(config, base_model)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    # A converter that keeps a tensor's name only re-lays it out (Qwen3-VL-MoE's experts,
    # transposed where their shape says so): vLLM's own loader for that name reads it.
    converters = [t for t in transforms if isinstance(t, WeightConverter) and t.source_patterns != t.target_patterns]
    if not transforms:
        yield from weights
        return
    pending: dict[tuple[int, str], Any] = {}
    for name, tensor in weights:
        renamed = name
        for renaming in renamings:
            renamed, _ = renaming.rename_source_key(renamed)
        match = next(((c, *c.rename_source_key(renamed)) for c in converters if c.rename_source_key(renamed)[1]), None)
        # vLLM's loaders read a stored tensor as it is; of transformers' converters they
        # redo only the merge of per-expert tensors (its fused-MoE layer reads each expert).
        if loads_as_is(name) and (match is None or _merges_many(match[0])):
            yield name, tensor
            continue
        if match is None:
            yield renamed, tensor
            continue
        converter, target, pattern = match
        group = pending.setdefault((id(converter), target), copy.deepcopy(converter))
        group.add_tensor(target, name, pattern, tensor)
        if len(converter.source_patterns) == 1 and not _merges_many(converter):
            yield from group.convert(target, config=config).items()
            del pending[(id(converter), target)]
    for (_, target), group in pending.items():
        yield from group.convert(target, config=config).items()


def _merges_many(converter: Any) -> bool:
    """Whether the converter merges a list of tensors per pattern (per-expert weights): a
    `MergeModulelist`, or any operation fed by a pattern with transformers' list-index
    wildcard (Ernie 4.5 VL's `experts.*.down_proj.weight`, split into text and vision experts)."""
    from transformers.core_model_loading import MergeModulelist

    return any(isinstance(op, MergeModulelist) for op in converter.operations) or any(
        "*" in pattern for pattern in converter.source_patterns)
