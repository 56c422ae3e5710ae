"""Checkpoint names a model ignores only where it has no such weight, as transformers does.

A model's `_keys_to_ignore_on_load_unexpected` lists patterns for names a checkpoint may
hold that the model does not (GPT-2's "attn.bias", its old causal-mask buffer), and
transformers drops a name they match only among the unexpected ones. vLLM's Transformers
backend maps every name they match to None, so a pattern that also matches a weight the
model has drops that weight: `re.search("attn.bias", "h.0.attn.c_attn.bias")` left GPT-2's
fused projection bias unloaded, and the engine stopped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, replace

from vllm.model_executor.models.utils import ShardIds, WeightsMapper


@dataclass
class UnexpectedOnlyMapper(WeightsMapper):
    """vLLM's mapper with the model's ignore patterns applied to unexpected names only: a
    name they match is dropped unless its mapped name is a weight (`names_a_weight`)."""

    unexpected_patterns: tuple[re.Pattern, ...] = ()
    names_a_weight: Callable[[str], bool] = lambda name: False

    def _map_name_with_shard(self, key: str) -> tuple[str, ShardIds | None] | None:
        mapped = super()._map_name_with_shard(key)
        if mapped is None or not self.unexpected_patterns or self.names_a_weight(mapped[0]):
            return mapped
        renamed = key  # the patterns read the name after transformers' renamings, as vLLM's did
        for renaming in self.orig_to_new_renaming:
            renamed, _ = renaming.rename_source_key(renamed)
        return None if any(pattern.search(renamed) for pattern in self.unexpected_patterns) else mapped

    def get_rename_mapper(self) -> WeightsMapper:
        """vLLM's renames alone (LoRA's and quantization's name lists), which drop no name."""
        return replace(super().get_rename_mapper(), unexpected_patterns=())


def ignoring_unexpected_only(mapper: WeightsMapper, ignored: Iterable[str] | None,
                             names_a_weight: Callable[[str], bool]) -> WeightsMapper:
    """`mapper` (vLLM's, which drops every name a pattern in `ignored` matches) with those
    patterns moved to apply to names that are no weight of the model."""
    patterns = {str(pattern) for pattern in ignored or ()}
    moved = tuple(p for p, new in mapper.orig_to_new_regex.items() if new is None and p.pattern in patterns)
    if not moved:
        return mapper
    kept = {p: new for p, new in mapper.orig_to_new_regex.items() if p not in moved}
    settings = {f.name: getattr(mapper, f.name) for f in fields(WeightsMapper)}
    return UnexpectedOnlyMapper(**{**settings, "orig_to_new_regex": kept}, unexpected_patterns=moved,
                                names_a_weight=names_a_weight)
