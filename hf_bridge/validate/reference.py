"""Transformers reference results, cached on disk beside the model; what the cache lacks
is computed in a clean interpreter (`transformers_side.py`, which says why it must be).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path

from filelock import FileLock

from . import parity
from .transformers_side import TransformersSide

CACHE_NAME = "hf_bridge_reference.json"


@dataclasses.dataclass
class NotApplicable:
    """transformers itself cannot run the case; `error` is its own message."""

    error: str


def references(model_dir: str | Path, cases: list[parity.Case], dtype: str = "float32",
               items_alone: bool = False) -> list[parity.Result | NotApplicable]:
    """Reference results for `cases`, cached beside the model. `dtype="float64"` gives the
    exact reference the float32 one's rounding is measured against (`parity.rounding_error`);
    `"bfloat16"` the one an engine in bfloat16 is judged against, by `parity.compare_lenient`.
    `items_alone`: transformers with each item encoded alone (`encoder.rows_placed_alone`)."""
    cache = cache_references(model_dir, cases, (dtype,), items_alone)
    entries = [cache[_cache_key(c, dtype, items_alone)] for c in cases]
    return [NotApplicable(e["error"]) if "error" in e else parity.Result(**e) for e in entries]


def cache_references(model_dir: str | Path, cases: list[parity.Case], dtypes: tuple[str, ...] = ("float32",),
                     items_alone: bool = False) -> dict:
    """Computes the references of `cases` in each of `dtypes` that the cache beside the model
    lacks, all in one clean interpreter (one start-up, not one per dtype), and returns the cache."""
    cache = _read_cache(Path(model_dir))
    missing = _lacking(cache, cases, dtypes, items_alone)
    if not missing:
        return cache
    return store_references(model_dir, cases, TransformersSide(model_dir, missing, items_alone=items_alone).result(), items_alone)


def missing_references(model_dir: str | Path, cases: list[parity.Case], dtypes: tuple[str, ...] = ("float32",),
                       items_alone: bool = False) -> dict[str, list[str]]:
    """{dtype: [case keys]}: the references of `cases` the cache beside the model lacks."""
    return _lacking(_read_cache(Path(model_dir)), cases, dtypes, items_alone)


def _lacking(cache: dict, cases: list[parity.Case], dtypes: tuple[str, ...], items_alone: bool) -> dict[str, list[str]]:
    missing = {dtype: [c.key() for c in cases if _cache_key(c, dtype, items_alone) not in cache] for dtype in dtypes}
    return {dtype: keys for dtype, keys in missing.items() if keys}


def store_references(model_dir: str | Path, cases: list[parity.Case], computed: dict[str, dict[str, dict]],
                     items_alone: bool = False) -> dict:
    """Adds what `TransformersSide.result` `computed` for `cases` to the cache beside the model; returns the cache."""
    cache_file = Path(model_dir) / CACHE_NAME
    by_key = {c.key(): c for c in cases}
    with FileLock(f"{cache_file}.lock"):  # read, add, write: another process may store its own meanwhile
        cache = _read_cache(Path(model_dir))
        for dtype, entries in computed.items():
            cache.update({_cache_key(by_key[key], dtype, items_alone): entry for key, entry in entries.items()})
        with tempfile.NamedTemporaryFile("w", dir=model_dir, suffix=".tmp", delete=False) as written:
            json.dump({**cache, "harness": _harness_digest()}, written)
        os.replace(written.name, cache_file)  # whole: a reader never sees half a file
    return cache


def _read_cache(model_dir: Path) -> dict:
    cache_file = model_dir / CACHE_NAME
    cache = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    if cache.pop("harness", None) != _harness_digest():
        return {}  # the reference recipe changed: recompute everything
    return cache


def rounding_problems(model_dir: str | Path, cases: list[parity.Case], results: list) -> list[str]:
    """Per case, why its float32 reference in `results` cannot test parity: its rounding
    against transformers in float64 (`parity.rounding_problem`), or float64 failing; ""
    where it can, or where transformers cannot run the case at all."""
    problems = []
    for result, exact in zip(results, references(model_dir, cases, dtype="float64")):
        if isinstance(result, NotApplicable):
            problems.append("")
        elif isinstance(exact, NotApplicable):
            problems.append(f"rounding not measured: transformers fails in float64 ({exact.error})")
        else:
            problems.append(parity.rounding_problem(result, exact))
    return problems


def neighbours_diagnosis(model_dir: str | Path, case: parity.Case, got: parity.Result) -> str:
    """For a case vLLM fails: where it holds several items of a modality, whether vLLM
    matches transformers with each item encoded alone (`stages.items_alone_diagnosis`);
    "" for other cases, or where transformers cannot run that."""
    from .encoder import has_neighbours
    from .stages import items_alone_diagnosis

    if not has_neighbours(case):
        return ""
    (alone,) = references(model_dir, [case], items_alone=True)
    return "" if isinstance(alone, NotApplicable) else items_alone_diagnosis(parity.compare(alone, got))


def _cache_key(case: parity.Case, dtype: str, items_alone: bool = False) -> str:
    key = case.key() if dtype == "float32" else f"{dtype} {case.key()}"  # float32 keys read as before
    return f"items alone {key}" if items_alone else key


def _harness_digest() -> str:
    import hashlib
    import inspect

    from . import checkpoint, encoder, reference, transformers_side

    source = "".join(inspect.getsource(module) for module in (parity, reference, encoder, transformers_side, checkpoint))
    return hashlib.sha256(source.encode()).hexdigest()[:16]
