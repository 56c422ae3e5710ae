"""Build tiny, seeded, randomly initialised checkpoints offline, and cache them."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from filelock import FileLock

from ..clean_interpreter import CleanCall
from ..cache_dirs import cache_dir
from .specs import SPECS, ZooSpec
from .tokenizer import build_tokenizer

ZOO_VERSION = "1"
"""Bump to rebuild every cached checkpoint (recipe changes rebuild theirs by digest)."""
STAMP = "hf_bridge_zoo.json"
"""The file, written last, that marks a finished build and holds its recipe key."""


def default_cache_dir() -> Path:
    """`$HF_BRIDGE_ZOO_DIR`, else the user cache directory (XDG)."""
    if env := os.environ.get("HF_BRIDGE_ZOO_DIR"):
        return Path(env)
    return cache_dir("zoo")


def _init_weights(model, std: float, seed: int, centred_norm_biases: bool = False) -> None:
    """Re-draw every weight from a seeded normal, biases and norms included.

    transformers' default init (std 0.02, zero biases) makes a 2-layer random model
    repeat one token forever, which would make parity tests prove little.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if param.ndim >= 2:
                # fused expert tensors are (experts, out, in); convolutions (out, in, *kernel)
                per_output = param.ndim == 2 or ".experts." in f".{name}."
                fan_in = param.shape[-1] if per_output else param[0].numel()
                scale = std * max(fan_in, 1) ** -0.5 * 8
                param.copy_(torch.randn(param.shape, generator=gen) * scale)
            elif ("norm" in name or "ln" in name.split(".")[-2:][0]) and not (centred_norm_biases and name.endswith("bias")):
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=gen))
            else:
                param.copy_(0.1 * torch.randn(param.shape, generator=gen))


def build(name: str, directory: Path | None = None, *, seed: int = 0, force: bool = False) -> Path:
    """Build the tiny checkpoint `name` (see `SPECS`) into `directory` and return it.

    Cached: a directory holding a finished build of the same recipe is reused, and one
    process at a time builds a directory. A new
    build runs in a clean interpreter (`clean_interpreter.py`): once a vLLM engine has been built in a process,
    vLLM has decorated transformers' model classes in place, and a model instantiated
    there afterwards is not plain transformers.
    """
    if name not in SPECS:
        raise KeyError(f"no zoo model {name!r}; choose one of {', '.join(SPECS)}")
    directory = _directory(name, directory, seed)
    if not force and _is_built(directory, name, seed):
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{directory}.lock"):  # another process (a test worker) may be building it
        if not force and _is_built(directory, name, seed):
            return directory
        CleanCall(build_here, name, directory, seed, doing=f"building zoo model {name!r}").result()
    if not _is_built(directory, name, seed):
        raise RuntimeError(f"building zoo model {name!r} left no finished checkpoint in {directory}")
    return directory


def cached(name: str, directory: Path | None = None, *, seed: int = 0) -> Path | None:
    """Where `build(name, directory, seed=seed)` would find a finished build, or None."""
    directory = _directory(name, directory, seed)
    return directory if _is_built(directory, name, seed) else None


def _directory(name: str, directory: Path | None, seed: int) -> Path:
    return Path(directory or default_cache_dir() / f"{name}-s{seed}")


def _key(name: str, seed: int) -> dict:
    return {"zoo_version": ZOO_VERSION, "name": name, "seed": seed, "digest": _recipe_digest(SPECS[name])}


def _is_built(directory: Path, name: str, seed: int) -> bool:
    stamp = directory / STAMP
    return stamp.exists() and json.loads(stamp.read_text()) == _key(name, seed)


def build_here(name: str, directory: Path, seed: int = 0) -> Path:
    """Build in this interpreter (what `build` runs in its clean one)."""
    return build_checkpoint(SPECS[name], directory, _key(name, seed), seed)


def build_checkpoint(spec: ZooSpec, directory: Path, stamp: dict, seed: int = 0, model_class=None) -> Path:
    """Write `spec`'s checkpoint (config, seeded weights, tokenizer, processor) to
    `directory`, marked finished with `stamp`. `model_class` builds the model from the
    config (default `AutoModelForImageTextToText`)."""
    import torch
    from transformers import AutoModelForImageTextToText

    if directory.exists():
        shutil.rmtree(directory)  # stale files (old references) must not survive a rebuild
    directory.mkdir(parents=True)

    # As in real checkpoints, BOS comes from the chat template, not from the tokenizer:
    # vLLM's chat endpoint tokenizes a rendered template without adding special tokens.
    tokenizer = build_tokenizer(
        spec.special_tokens, add_bos=False, extra_attributes=spec.tokenizer_attributes, pieces=spec.vocabulary_pieces
    )
    processor = spec.make_processor(tokenizer)
    if spec.add_bos:
        processor.chat_template = "{{ bos_token }}" + processor.chat_template
    config = spec.make_config(tokenizer)
    _set_special_token_ids(config, tokenizer)
    torch.manual_seed(seed)
    if model_class is None:
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    else:
        model = model_class._from_config(config, dtype=torch.float32)
    _init_weights(model, spec.init_std, seed, spec.centred_norm_biases)
    model.generation_config.do_sample = False
    for token in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(model.generation_config, token, getattr(tokenizer, token))
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    if spec.beside_weights is not None:
        spec.beside_weights(directory)
    (directory / STAMP).write_text(json.dumps(stamp))
    return directory


def _set_special_token_ids(config, tokenizer) -> None:
    """Point every config level's bos/eos/pad at this tokenizer (defaults name real vocabularies)."""
    for cfg in {id(c): c for c in (config, config.get_text_config())}.values():
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if hasattr(cfg, name) or cfg is config.get_text_config():
                setattr(cfg, name, getattr(tokenizer, name))


def _is_plain(value) -> bool:
    try:
        json.dumps(value)
        return True
    except TypeError:
        return False


DESCRIPTIVE_FIELDS = {"notes"}
"""Spec fields that describe a model without changing how it is built."""


def _recipe_digest(spec: ZooSpec) -> str:
    """Changes when this model's recipe does: its spec and functions, the tokenizer, the
    build steps (other models' recipes do not count)."""
    import inspect

    from . import tokenizer

    this_module = sys.modules[__name__]  # `zoo.build` is the function: the package re-exports it

    fields = {k: v for k, v in vars(spec).items() if not callable(v) and k not in DESCRIPTIVE_FIELDS}
    parts = [repr(sorted(fields.items())), inspect.getsource(tokenizer), inspect.getsource(this_module)]
    for fn in (spec.make_config, spec.make_processor):
        parts.append(inspect.getsource(fn))
        # helpers the recipe calls (e.g. shared config dicts) live in specs.py
        parts += [
            json.dumps(v, sort_keys=True)
            for k, v in sorted(fn.__globals__.items())
            if k.isupper() and isinstance(v, (dict, list, str, int)) and _is_plain(v)
        ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
