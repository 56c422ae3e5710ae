"""Processor kwargs nothing would read: a request's key that its HF processor takes
nowhere, such as `max_pixel` for `max_pixels`.

vLLM hands a request's processor kwargs to the processor twice: to its loading, where a
key sets an attribute of the processor or of one of its parts (LLaVA's
`vision_feature_select_strategy`) or is taken by transformers' loaders (`use_fast`), and
to its call. There transformers sorts them into the
processor's parts (`ProcessorMixin._merge_kwargs`, by its `valid_processor_kwargs` and
each part's `valid_kwargs`), logs once in the server's log that a key it cannot place
"will be ignored", and processes without it: the sender gets a reply made without their
setting. The sorting is asked of transformers itself. Only transformers' own processors
are asked, and only those that sort by the kwargs they declare: a checkpoint's own code may
read its kwargs before sorting them, and a few of transformers' processors (Phi-4-multimodal,
Voxtral) sort by a class of their module that they do not declare. Two keys the processor
reads are not vLLM's to pass on: `return_tensors` (`tensor_type_asked`), and `truncation`
below the prompt's length (`text_cut_to`), which cuts only an item's own short text in
vLLM. No vLLM.
"""

from __future__ import annotations

import copy
import difflib
import functools
import inspect
import re
import sys
from collections.abc import Mapping
from typing import Any

MODALITY_KEYWORDS = {"text", "images", "videos", "audio"}
"""What transformers' sorting passes over: the data, not settings."""
PARTS = ("image_processor", "video_processor", "feature_extractor", "tokenizer")
"""The parts transformers sorts kwargs for; `ProcessorMixin.get_attributes()` names all of a processor's."""
LOADING_STEPS = ("from_pretrained", "get_processor_dict")
"""transformers' loading methods, whose source names the keys they take out of their kwargs."""
TAKEN_OUT = re.compile(r"""kwargs\.(?:pop|get)\(\s*["'](\w+)["']""")
"""A loading step taking a key out of its kwargs: `kwargs.pop("use_fast", None)`."""


def ignored_keys(processor: Any, kwargs: Mapping[str, object]) -> list[str]:
    """The keys of `kwargs` that `processor` takes nowhere; none where it cannot be told."""
    declared = getattr(type(processor), "valid_processor_kwargs", None)
    if declared is None or not type(processor).__module__.startswith("transformers.") or not kwargs:
        return []
    if any(cls is not declared for cls in _module_kwargs_classes(type(processor))):
        return []  # it sorts by a class it does not declare
    named = set(inspect.signature(type(processor).__call__).parameters)
    asked = {key: copy.deepcopy(value) for key, value in kwargs.items() if key not in named | MODALITY_KEYWORDS}
    tokenizer = getattr(processor, "tokenizer", None)
    try:
        sorted_kwargs = processor._merge_kwargs(declared, tokenizer_init_kwargs=getattr(tokenizer, "init_kwargs", {}), **asked)
    except Exception:  # noqa: BLE001 - a value it refuses: the processor's own call names it
        return []
    placed = set(sorted_kwargs).union(*(part for part in sorted_kwargs.values() if isinstance(part, Mapping)))
    return sorted(key for key in asked if key not in placed and not _set_when_loading(processor, key))


def _module_kwargs_classes(processor_class: type) -> list[type]:
    """The `...ProcessorKwargs` classes the processor's own module defines."""
    module = sys.modules.get(processor_class.__module__)
    return [obj for name, obj in vars(module or object()).items()
            if name.endswith("ProcessorKwargs") and isinstance(obj, type) and obj.__module__ == processor_class.__module__]


def _set_when_loading(processor: Any, key: str) -> bool:
    """Whether loading the processor with `key` reads it: one of its `__init__` arguments,
    an attribute of it or of one of its parts, or a key its loaders take (`use_fast`)."""
    names = getattr(type(processor), "get_attributes", lambda: PARTS)()
    owners = [processor, *(part for name in names if (part := getattr(processor, name, None)) is not None)]
    return (key in inspect.signature(type(processor).__init__).parameters or any(hasattr(owner, key) for owner in owners)
            or any(key in _taken_by(loader) for loader in _loaders(type(processor), names)))


def _loaders(processor_class: type, names: list[str]) -> list[type]:
    """The classes whose loading steps run when the processor loads: its own, and the auto
    class transformers loads each part with (the modality its name holds)."""
    from transformers.processing_utils import MODALITY_TO_AUTOPROCESSOR_MAPPING as AUTO_CLASSES

    modalities = list(AUTO_CLASSES.keys())
    return [processor_class, *(AUTO_CLASSES[modality] for name in names for modality in modalities if modality in name)]


@functools.cache
def _taken_by(loader: type) -> frozenset[str]:
    """The keys `loader`'s loading steps name: their parameters, and what they take out of
    their kwargs (AutoImageProcessor's `use_fast` and `backend`, which no signature names)."""
    keys: set[str] = set()
    for step in filter(None, (getattr(loader, name, None) for name in LOADING_STEPS)):
        try:
            source = inspect.getsource(step)
        except (OSError, TypeError):  # no source to read: only its signature
            source = ""
        named = inspect.signature(step).parameters.values()
        keys |= set(TAKEN_OUT.findall(source)) | {p.name for p in named if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    return frozenset(keys)


def known_keys(processor: Any) -> set[str]:
    """The keys the processor declares it takes: its own kwargs' and its parts'."""
    declared = getattr(type(processor), "valid_processor_kwargs", None)
    sections = list(getattr(declared, "__annotations__", {}).values())
    sections += [getattr(getattr(processor, part, None), "valid_kwargs", None) for part in PARTS]
    return {key for section in sections for key in getattr(section, "__annotations__", {})}


def closest(key: str, processor: Any) -> str | None:
    """The declared key `key` most likely misspells, if one is close."""
    return next(iter(difflib.get_close_matches(key, sorted(known_keys(processor)), n=1, cutoff=0.75)), None)


TENSOR_TYPE = "pt"
"""The kind of tensors vLLM asks the processor for, and hands the model: torch's."""
NO_TRUNCATION = (None, False, "do_not_truncate")
"""`truncation` values that leave the text whole (transformers' tokenizers)."""


def tensor_type_asked(kwargs: Mapping[str, object]) -> object | None:
    """The `return_tensors` that `kwargs` ask of the processor, where not torch's: the
    processor would hand vLLM, and vLLM the model's encoder, another kind of array."""
    asked = kwargs.get("return_tensors", TENSOR_TYPE)
    return None if asked == TENSOR_TYPE else asked


def text_cut_to(kwargs: Mapping[str, object], prompt_tokens: int, model_max_length: int | None) -> int | None:
    """The length `kwargs` truncate a prompt's text to (their `max_length`, else the
    tokenizer's `model_max_length`), where that cuts a prompt of `prompt_tokens`: the
    processor truncates the text it is given, which in vLLM is a short text of the item's
    own, never the prompt."""
    text_kwargs = kwargs.get("text_kwargs")
    merged = {**kwargs, **(text_kwargs if isinstance(text_kwargs, Mapping) else {})}
    if merged.get("truncation") in NO_TRUNCATION:
        return None
    length = merged.get("max_length", model_max_length)
    return length if isinstance(length, int) and prompt_tokens > length else None
