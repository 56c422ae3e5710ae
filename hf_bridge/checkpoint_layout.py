"""Checkpoints in a model's original layout, read as transformers reads them: no vLLM import.

transformers 5 converts many checkpoints at load time through its `conversion_mapping`:
renamings (GLM-ASR's `language_model.model.*`) and converters that split or permute
tensors (Kimi-K2.5's fused `wqkv`, with a RoPE permutation). Its `save_pretrained` writes
that original layout back, and the hub holds it. vLLM's Transformers backend applies
only the renamings it finds on the base model, so such a checkpoint does not load.
`transformers_layout` applies the generation class's own transforms, with transformers'
own `WeightRenaming`/`WeightConverter` objects, before vLLM's name mapping sees the stream.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from typing import Any

import torch


def checkpoint_transforms(config: Any, base_model: torch.nn.Module | None = None) -> list:
    """The transforms transformers applies when its generation class loads this checkpoint:
    the root's (by class name, else model type), then those of the sub-models of
    `base_model` (the generation class's `model`), scoped as transformers scopes them."""
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping, get_model_conversion_mapping

    root = []
    for identifier in [*(getattr(config, "architectures", None) or []), getattr(config, "model_type", None)]:
        root = (get_checkpoint_conversion_mapping(identifier) if identifier else None) or []
        if root:
            break
    if base_model is None:
        return root
    holder = torch.nn.Module()  # the generation class's layout: `model` under a root
    holder.model = base_model
    holder.base_model_prefix = "model"
    nested = get_model_conversion_mapping(holder)
    root_patterns = {(tuple(t.source_patterns), tuple(t.target_patterns)) for t in root}
    return root + [t for t in nested if (tuple(t.source_patterns), tuple(t.target_patterns)) not in root_patterns]


def transformers_layout(
    weights: Iterable[tuple[str, torch.Tensor]], config: Any, base_model: torch.nn.Module | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """`weights` renamed and converted as transformers loads them. A converter fed by one
    tensor (a fused qkv split in three) yields at once; one fed by several (experts merged
    into one tensor) yields when the stream ends."""
    from transformers.core_model_loading import WeightConverter, WeightRenaming

    transforms = checkpoint_transforms(config, base_model)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    if not transforms:
        yield from weights
        return
    pending: dict[tuple[int, str], Any] = {}
    for name, tensor in weights:
        renamed = name
        for renaming in renamings:
            renamed, _ = renaming.rename_source_key(renamed)
        match = next(((c, *c.rename_source_key(renamed)) for c in converters if c.rename_source_key(renamed)[1]), None)
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
    """Whether the converter merges a list of tensors per pattern (per-expert weights)."""
    from transformers.core_model_loading import MergeModulelist

    return any(isinstance(op, MergeModulelist) for op in converter.operations)
