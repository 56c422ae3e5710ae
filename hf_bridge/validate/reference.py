"""Transformers reference results, computed in a clean subprocess and cached on disk.

The reference must come from an untouched transformers: once vLLM's in-tree
Transformers backend (which validate also runs) has built an engine in a process, it
has decorated HF model classes in place for torch.compile, so an HF model in that
process is not plain transformers any more (hf_bridge decorates a twin instead:
`compile_twin.py`). Each reference therefore runs in its own interpreter.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from . import parity

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
    model_dir = Path(model_dir)
    cache_file = model_dir / CACHE_NAME
    cache = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    if cache.pop("harness", None) != _harness_digest():
        cache = {}  # the reference recipe changed: recompute everything
    missing = {dtype: [c.key() for c in cases if _cache_key(c, dtype, items_alone) not in cache] for dtype in dtypes}
    missing = {dtype: keys for dtype, keys in missing.items() if keys}
    if missing:
        variant = ["--items-alone"] if items_alone else []
        cmd = [sys.executable, "-m", "hf_bridge.validate.reference", *variant, str(model_dir), json.dumps(missing)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"reference run failed:\n{done.stderr[-4000:]}")
        computed = json.loads(done.stdout.strip().splitlines()[-1])
        by_key = {c.key(): c for c in cases}
        for dtype, entries in computed.items():
            cache.update({_cache_key(by_key[key], dtype, items_alone): entry for key, entry in entries.items()})
        cache_file.write_text(json.dumps({**cache, "harness": _harness_digest()}))
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

    from . import reference

    from . import encoder

    source = inspect.getsource(parity) + inspect.getsource(reference) + inspect.getsource(encoder)
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items-alone", action="store_true", help="encode each item alone (`encoder.rows_placed_alone`)")
    parser.add_argument("model_dir")
    parser.add_argument("cases", help='JSON: {dtype ("float32", "float64" or "bfloat16"): [JSON of `parity.Case` fields, ...]}')
    args = parser.parse_args(argv)

    from .checkpoint import load_processor
    from .encoder import rows_placed_alone

    processor = load_processor(args.model_dir)
    results: dict[str, dict] = {}
    for dtype, keys in json.loads(args.cases).items():
        model = parity.load_generation_model(args.model_dir, dtype)
        results[dtype] = {}
        for key in keys:
            case = parity.Case(**json.loads(key))
            try:
                with rows_placed_alone(model, processor, case) if args.items_alone else contextlib.nullcontext():
                    result = parity.hf_reference(args.model_dir, case, model=model, processor=processor)
                results[dtype][key] = dataclasses.asdict(result)
            except Exception as exc:  # recorded: transformers' own error makes the case N/A
                results[dtype][key] = {"error": f"{type(exc).__name__}: {exc}"}
        del model
    print(json.dumps(results))


if __name__ == "__main__":
    main()
