"""transformers' classes left untouched by vLLM's compile decorator.

vLLM's Transformers backend marks the HF decoder class (and, with `compile_mm_encoder`,
the encoder classes) for torch.compile by decorating the class itself: its `__init__`
then needs a current vLLM config and its `__call__` an attribute only the engine's
instances have. Every later `AutoModelForImageTextToText.from_pretrained(...)` of that
architecture in the process fails ("Current vLLM config is not set"), and so does every
such model built before the engine ("'LlamaModel' object has no attribute
'do_not_compile'"): a notebook cannot hold an engine and the transformers model it is
compared with.

hf_bridge gives the decorator a *twin* instead, a subclass of the HF class with the same
name, and the engine's instances become the twin as they are built (`built_as`, only
while the engine builds its model). The HF class never changes; the engine's modules
still pass every `isinstance` check against it.

No vLLM import: plain Python classes.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


def twin(cls: type) -> type:
    """A subclass of `cls` that looks like it (name, qualname, module, docstring), for a
    decorator to change in its place."""
    namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__}
    return type(cls.__name__, (cls,), namespace)


@contextmanager
def built_as(twins: Mapping[type, type]) -> Iterator[None]:
    """Inside, an instance of an original class (`twins`' keys) becomes its twin as it is
    built, and runs the twin's `__init__`. Subclasses of an original are built as before.

    The originals' `__init__` is swapped for the context, not their `__new__`: CPython
    keeps a class's instance-creation slot overridden once `__new__` has been set on it,
    even after it is deleted, and `object.__new__` then refuses the constructor's
    arguments."""
    saved = {original: original.__dict__.get("__init__") for original in twins}
    for original, its_twin in twins.items():
        original.__init__ = _init_building(original, its_twin)
    try:
        yield
    finally:
        for original, own_init in saved.items():
            if own_init is None:
                del original.__init__
            else:
                original.__init__ = own_init


def _init_building(original: type, its_twin: type):
    init = original.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        if type(self) is not original:  # a subclass's super().__init__()
            return init(self, *args, **kwargs)
        object.__setattr__(self, "__class__", its_twin)
        # the twin's own __init__ (the decorator's) calls `init`, which it captured when it
        # decorated the twin; an undecorated twin resolves to this one, and takes the branch above
        return its_twin.__init__(self, *args, **kwargs)

    return __init__
