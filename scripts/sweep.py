"""The sweep: every decoder-only VLM type transformers ships whose processor types its
multimodal tokens (returns `mm_token_type_ids`, or lists the tokens transformers'
`create_mm_token_type_ids` types, which hf_bridge then types by), built tiny and checked
for parity through hf_bridge, vLLM's in-tree Transformers backend (`HF_BRIDGE_DISABLE=1`)
and vLLM's native model.

    .venv/bin/python scripts/sweep.py                      # all types -> COVERAGE.md (about an hour)
    .venv/bin/python scripts/sweep.py --types glm4v,emu3   # re-run some types, keep the others
    .venv/bin/python scripts/sweep.py --render sweep.jsonl # table from earlier results
    .venv/bin/python scripts/sweep.py --update COVERAGE.md --types qwen2_5_vl --cases video
                                    # re-run some cells of a committed table, keep its others
    .venv/bin/python scripts/sweep.py --compiled --out COVERAGE_COMPILED.md
                                    # hf_bridge alone in vLLM's default compiled mode (the
                                    # sweep above runs eagerly, as `hf-bridge validate` does)

A type with a hand-written zoo recipe (`hf_bridge/zoo/specs.py`) is built from it; any
other from its default config and processor (`hf_bridge/zoo/shrink.py`). Every engine
runs in its own process; each cell records what happened, with its cause.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from hf_bridge.probes import MODALITIES
from hf_bridge.validate.cases import CASES, cases_of
from hf_bridge.validate.stages import last_exception

ROOT = Path(__file__).resolve().parent.parent
IMPLS = {"hf_bridge": {}, "in-tree": {"HF_BRIDGE_DISABLE": "1"}, "native": {}}
"""Each column's environment; every engine runs eagerly (`ENGINE_DEFAULTS`) unless compiled."""
COMPILED_IMPLS = {"hf_bridge (compiled)": {}}
"""`--compiled`: hf_bridge in vLLM's default mode, where its compile decorator traces the
decoder and the CPU worker profiles with dummy media (eager mode skips both)."""
WORKER_TIMEOUT = 900


def candidate_types() -> list[str]:
    """Model types with a generation class whose processor module types multimodal tokens
    or names a modality's token (`image_token_id`, ...: `ProcessorMixin.image_token_ids`
    lists it, and `probes.token_type_ids` types by it where `__call__` returns no types),
    or only its text (`image_token = ...`: `probes.named_token_ids`)."""
    import inspect

    from hf_bridge.zoo.shrink import generation_class, processor_class
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    out = []
    for model_type in sorted(PROCESSOR_MAPPING_NAMES):
        cls = processor_class(model_type)
        if cls is None or generation_class(model_type) is None:
            continue
        source = inspect.getsource(inspect.getmodule(cls))
        if "mm_token_type_ids" in source or any(f"{m}_token_id" in source or f"{m}_token =" in source for m in MODALITIES):
            out.append(model_type)
    return out


def emit(record: dict) -> None:
    print("SWEEP " + json.dumps(record), flush=True)


# -- in a worker process ------------------------------------------------------------------


def worker(impl: str, model_dir: str, cases: list[str], side: int) -> None:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from transformers import AutoProcessor

    from hf_bridge.validate import parity
    from hf_bridge.validate.engine import make_llm
    from hf_bridge.validate.reference import NotApplicable, neighbours_diagnosis, references, rounding_problems

    processor = AutoProcessor.from_pretrained(model_dir)
    standard = parity.standard_cases(side)
    limits = {CASES[c]: 2 if c == "two_images" else 1 for c in cases if CASES[c] != "text"}
    kwargs = {"model_impl": "vllm" if impl == "native" else "transformers", "limit_mm_per_prompt": limits}
    if impl in COMPILED_IMPLS:
        kwargs["enforce_eager"] = False
    llm = None
    for case in cases:
        (reference,) = references(model_dir, [standard[case]])
        if isinstance(reference, NotApplicable):
            emit({"case": case, "outcome": "n/a", "detail": f"transformers: {reference.error}"})
            continue
        try:
            llm = llm or make_llm(model_dir, **kwargs)
            got = parity.vllm_result(llm, processor, standard[case])
        except Exception as exc:  # noqa: BLE001 - recorded with its cause
            emit({"case": case, "outcome": "error", "detail": f"{type(exc).__name__}: {_line(exc)}"})
            llm = None  # an in-process engine that raised is rebuilt
            continue
        problems = parity.compare(reference, got)
        if problems:  # the diagnosis first: the table shows a cell's first problem
            problems = list(filter(None, [neighbours_diagnosis(model_dir, standard[case], got),
                                          parity.placeholder_diagnosis(reference, processor), *problems]))
        if problems:  # whether transformers' own float32 rounding could explain it
            try:
                problems += [p for p in rounding_problems(model_dir, [standard[case]], [reference]) if p]
            except RuntimeError:  # the model does not load in float64
                pass
        degenerate = parity.is_degenerate(reference.tokens)
        outcome = "fail" if problems else ("pass (degenerate)" if degenerate else "pass")
        emit({"case": case, "outcome": outcome, "detail": "; ".join(problems)})


def _line(exc: BaseException) -> str:
    """The message's first line, and its last where the first only frames it
    (pydantic's "1 validation error for ModelConfig" names the cause further down)."""
    lines = [l.strip() for l in str(exc).strip().splitlines() if l.strip()]
    if not lines:
        return ""
    cause = next((l for l in lines[1:] if "error" in l.lower() and not l.startswith("For further")), lines[-1])
    text = lines[0] if len(lines) == 1 else f"{lines[0]} ... {cause}"
    return text[:300]


# -- the driver ---------------------------------------------------------------------------


SEEDS = 4
"""Seeds tried for a generic checkpoint until transformers' own continuations are not
degenerate (a random tiny model may repeat one token, which would prove little) and its
float32 rounding leaves parity's tolerance to the implementations."""


def build(model_type: str, cache: Path) -> tuple[Path, int, list[str]]:
    """(checkpoint, image side, its cases); raises with the builder's error."""
    from hf_bridge.zoo import SPECS, build as build_zoo

    if model_type in SPECS:
        spec = SPECS[model_type]
        return build_zoo(model_type), spec.min_image_side, [c for c in CASES if c != "audio" and (c != "video" or spec.has_video)]
    directory = cache / model_type
    code = "import sys; from pathlib import Path; from hf_bridge.zoo.shrink import build_sweep_model; build_sweep_model(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]))"
    tried = {}
    for seed in range(SEEDS):
        done = subprocess.run([sys.executable, "-c", code, model_type, str(directory), str(seed)], capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(last_exception(done.stderr, 240) if done.stderr.strip() else f"build failed (exit {done.returncode})")
        cases = cases_of(directory)
        tried[seed] = unfit_cases(directory, cases)
        if not tried[seed]:
            break
    best = min(tried, key=lambda s: len(tried[s]))
    if best != seed:
        subprocess.run([sys.executable, "-c", code, model_type, str(directory), str(best)], check=True, capture_output=True, timeout=600)
    print(f"{model_type}: seed {best}" + (f", unfit: {', '.join(tried[best])}" if tried[best] else ""), file=sys.stderr, flush=True)
    return directory, 64, cases


def unfit_cases(model_dir: Path, cases: list[str]) -> list[str]:
    """The cases whose transformers continuation is degenerate or writes a media placeholder
    (`parity.generated_placeholders`), or whose float32 reference is ill-conditioned
    (`parity.rounding_problem`; references stay cached)."""
    from hf_bridge.validate import parity
    from hf_bridge.validate.checkpoint import load_processor
    from hf_bridge.validate.reference import NotApplicable, references, rounding_problems

    standard = [parity.standard_cases(64)[c] for c in cases]
    try:
        results = references(model_dir, standard)
    except RuntimeError:
        return []  # transformers cannot run it at all: the workers record why, per case
    try:
        rounding = rounding_problems(model_dir, standard, results)
    except RuntimeError:  # the model does not load in float64: rounding cannot be judged
        rounding = [""] * len(cases)
    processor = load_processor(model_dir)
    return [c for c, r, p in zip(cases, results, rounding) if not isinstance(r, NotApplicable)
            and (parity.is_degenerate(r.tokens) or parity.generated_placeholders(r.tokens, processor) or p)]


def sweep_type(model_type: str, cache: Path, results: Path, impls: dict[str, dict], only: set[str] | None = None) -> None:
    def record(impl: str, case: str, outcome: str, detail: str = "") -> None:
        entry = {"type": model_type, "impl": impl, "case": case, "outcome": outcome, "detail": detail}
        with results.open("a") as f:
            f.write(json.dumps(entry) + "\n")

    from hf_bridge.zoo.shrink import default_config

    if getattr(default_config(model_type), "is_encoder_decoder", False):
        for impl in impls:
            record(impl, "*", "not swept", "encoder-decoder: neither hf_bridge nor vLLM's Transformers backend serves it")
        return
    try:
        model_dir, side, cases = build(model_type, cache)
    except Exception as exc:  # noqa: BLE001 - recorded with its cause
        for impl in impls:
            record(impl, "*", "not built", f"{type(exc).__name__}: {_line(exc)}")
        return
    cases = [c for c in cases if only is None or c in only]
    if not cases:
        return
    for impl, env in impls.items():
        cmd = [sys.executable, __file__, "--worker", impl, str(model_dir), ",".join(cases), str(side)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=WORKER_TIMEOUT, env=dict(os.environ, **env))
            output, cause = done.stdout, last_exception(done.stderr, 240)
        except subprocess.TimeoutExpired as exc:
            output, cause = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or ""), f"timed out after {WORKER_TIMEOUT} s"
        seen = set()
        for line in output.splitlines():
            if line.startswith("SWEEP "):
                entry = json.loads(line[len("SWEEP "):])
                seen.add(entry["case"])
                record(impl, entry["case"], entry["outcome"], entry["detail"])
        for case in cases:
            if case not in seen:
                record(impl, case, "error", f"worker died: {cause}")


def render(results: Path) -> str:
    rows: dict[tuple[str, str], dict[str, dict]] = {}
    for line in results.read_text().splitlines():
        entry = json.loads(line)
        rows.setdefault((entry["type"], entry["case"]), {})[entry["impl"]] = entry
    compiled = any(impl in COMPILED_IMPLS for impls in rows.values() for impl in impls)
    columns = COMPILED_IMPLS if compiled else IMPLS
    if compiled:
        lines = [
            "# Coverage in compiled mode: the sweep's types through hf_bridge in vLLM's default mode",
            "",
            "Generated by `scripts/sweep.py --compiled` (strict parity: identical prompt ids and greedy tokens, log-probs",
            "within 1e-3, float32), hf_bridge with `enforce_eager=False` against transformers, on the checkpoints",
            "[COVERAGE.md](COVERAGE.md) runs eagerly. Every non-pass carries its cause.",
        ]
    else:
        lines = [
            "# Coverage: every decoder-only VLM type in transformers 5.19 whose processor types its multimodal tokens, or names them",
            "",
            "Generated by `scripts/sweep.py` (strict parity: identical prompt ids and greedy tokens, log-probs within",
            "1e-3, float32). hf_bridge, vLLM's in-tree Transformers backend (`HF_BRIDGE_DISABLE=1`) and vLLM's native",
            "model (`model_impl=\"vllm\"`), each against transformers. Every non-pass carries its cause.",
        ]
    lines += ["", "| type | case | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    # by type, so a re-run type (its results appended last) keeps its place; cases as the sweep runs them
    order = list(CASES)
    rows = dict(sorted(rows.items(), key=lambda row: (row[0][0], order.index(row[0][1]) if row[0][1] in order else -1)))
    for (model_type, case), impls in rows.items():
        lines.append(f"| {model_type} | {case} | " + " | ".join(_cell(impls.get(i)) for i in columns) + " |")
    passing = {}
    for impl in columns:
        types = {t for (t, _), impls in rows.items() if impls.get(impl, {}).get("outcome") == "pass"}
        failing = {t for (t, _), impls in rows.items() if impls.get(impl, {}).get("outcome") not in ("pass", "n/a", None)}
        passing[impl] = sorted(types - failing)
    lines += ["", "Types where every case passes (n/a: transformers itself refuses the case):", ""]
    lines += [f"- {impl}: {len(types)} ({', '.join(types)})" for impl, types in passing.items()]
    if not compiled:
        worse = [f"{t} {c}" for (t, c), impls in rows.items()
                 if impls.get("in-tree", {}).get("outcome") == "pass" and impls.get("hf_bridge", {}).get("outcome") != "pass"]
        lines += ["", f"Cases the in-tree backend passes and hf_bridge does not: {', '.join(worse) or 'none'}."]
    return "\n".join(lines) + "\n"


def _cell(entry: dict | None) -> str:
    if entry is None:
        return "-"
    if entry["outcome"] == "pass":
        return "pass"
    detail = entry["detail"].replace("|", "\\|").split("; ")[0][:160]
    return f"**{entry['outcome']}**: {detail}" if detail else f"**{entry['outcome']}**"


def read_table(table: Path) -> list[dict]:
    """The results a table `render` wrote holds, cell by cell (causes as the table shortened
    them): so that a re-run of some of its cells (`--update`) renders the rest unchanged."""
    lines = table.read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| type | case |"))
    impls = [cell.strip() for cell in lines[header].strip("|").split("|")][2:]
    entries = []
    for line in lines[header + 2:]:
        if not line.startswith("| "):
            break
        model_type, case, *cells = (c.replace("\\|", "|") for c in re.split(r"(?<!\\) \| ", line[2:-2]))
        for impl, cell in zip(impls, cells):
            if cell == "-":
                continue
            outcome, _, detail = cell.partition(": ") if cell.startswith("**") else (cell, "", "")
            entries.append({"type": model_type, "impl": impl, "case": case, "outcome": outcome.strip("*"), "detail": detail})
    return entries


def _forget(results: Path, types: list[str], cases: set[str] | None = None) -> None:
    """Drop earlier results of `types` (of their `cases` only, where given; a type that was
    not built, its `*` row, too); the others stay (a partial re-run updates them)."""
    if not results.exists():
        return

    def forgotten(entry: dict) -> bool:
        return entry["type"] in types and (cases is None or entry["case"] in cases or entry["case"] == "*")

    kept = [l for l in results.read_text().splitlines() if not forgotten(json.loads(l))]
    results.write_text("".join(f"{l}\n" for l in kept))


def _not_built(results: Path, types: list[str]) -> set[str]:
    """Those of `types` that the results hold as not built or not swept (a `*` row): a
    re-run of some of their cases runs them all, as no cell of theirs is kept."""
    if not results.exists():
        return set()
    entries = (json.loads(line) for line in results.read_text().splitlines())
    return {e["type"] for e in entries if e["type"] in types and e["case"] == "*"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--types", help="comma-separated model types (default: every candidate)")
    parser.add_argument("--compiled", action="store_true", help="hf_bridge alone, in vLLM's default compiled mode")
    parser.add_argument("--results", type=Path, help="default: sweep.jsonl (sweep_compiled.jsonl with --compiled)")
    parser.add_argument("--out", type=Path, help="write the table here (COVERAGE.md for the full sweep)")
    parser.add_argument("--cases", help="comma-separated cases to re-run (default: each type's every case)")
    parser.add_argument("--update", type=Path, metavar="TABLE",
                        help="start from this committed table's cells and write it back, re-run cells replaced")
    parser.add_argument("--render", type=Path, help="only render the table from these results")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "hf_bridge" / "sweep")
    parser.add_argument("--worker", nargs=4, metavar=("IMPL", "MODEL_DIR", "CASES", "SIDE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        impl, model_dir, cases, side = args.worker
        worker(impl, model_dir, cases.split(","), int(side))
        return
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    args.results = args.results or ROOT / ("sweep_compiled.jsonl" if args.compiled else "sweep.jsonl")
    if args.update:
        args.out = args.update
        args.results.write_text("".join(json.dumps(entry) + "\n" for entry in read_table(args.update)))
    if args.render is None:
        types = args.types.split(",") if args.types else candidate_types()
        cases = set(args.cases.split(",")) if args.cases else None
        whole = _not_built(args.results, types) if cases else set()
        if whole:
            print(f"{', '.join(sorted(whole))}: not built before, so every case is run", file=sys.stderr)
        _forget(args.results, types, cases)
        for model_type in types:
            started = time.monotonic()
            sweep_type(model_type, args.cache, args.results, COMPILED_IMPLS if args.compiled else IMPLS,
                       None if model_type in whole else cases)
            print(f"{model_type}: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    text = render(args.render or args.results)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
