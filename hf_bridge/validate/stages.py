"""Pure: the verdicts of `hf-bridge validate`, stage by stage, and what they add up to.

A verdict is one implementation x one case x one stage. `processing` compares what vLLM
builds for the prompt with what the HF processor builds; `encoder` the rows each side's
decoder receives at the items' positions (`encoder.py`); `decoding` is the tests' strict
parity. Nothing here reports a pass it did not check: a stage that could not run is
"not checked", with its reason.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

STAGES = ("processing", "encoder", "decoding")
PASS, FAIL, NOT_CHECKED, NOT_APPLICABLE = "pass", "fail", "not checked", "n/a"
EXIT_PASSED, EXIT_FAILED, EXIT_NOT_CHECKED = 0, 1, 2

TRANSFORMERS_REFUSED = "transformers: "
"""How an n/a verdict's detail begins where transformers itself could not run the case."""

ENCODER_RTOL = 1e-3
"""Encoder rows agree when max |vLLM - transformers| <= ENCODER_RTOL x max |transformers|
(float32: one tower, run by two runtimes, differs in the last bits)."""


@dataclass(frozen=True)
class Verdict:
    impl: str
    case: str
    stage: str
    outcome: str
    detail: str = ""


@dataclass(frozen=True)
class ItemRange:
    """One item as vLLM placed it: `is_embed[i]` says whether position `offset + i` takes an
    encoder row."""

    modality: str
    offset: int
    is_embed: Sequence[bool]


def processing_problems(
    hf_ids: Sequence[int],
    hf_types: Sequence[int] | None,
    vllm_ids: Sequence[int],
    items: Sequence[ItemRange],
    expected_items: dict[str, int],
    feature_ids: Sequence[int],
    encoder_rows: int | None = None,
) -> list[str]:
    """Every way vLLM's processing of a prompt departs from the HF processor's, or either
    from the HF encoder; empty means it matches. `hf_types` are the processor's
    `mm_token_type_ids` (None where it returns none); `feature_ids` the tokens the HF model
    fills with encoder rows (none: unchecked); `encoder_rows` how many rows the HF model's
    `get_*_features` returns for the items (None: not counted)."""
    problems = []
    features = set(feature_ids)
    hf_mismatch = transformers_mismatch(hf_ids, feature_ids, encoder_rows)
    if hf_mismatch:
        problems.append(hf_mismatch)
    announced = sum(sum(item.is_embed) for item in items)
    if encoder_rows is not None and announced != encoder_rows:
        problems.append(f"vLLM's items announce {announced} embedding position(s), the HF model's get_*_features returns {encoder_rows}")
    if list(hf_ids) != list(vllm_ids):
        first = next((i for i, (a, b) in enumerate(zip(hf_ids, vllm_ids)) if a != b), min(len(hf_ids), len(vllm_ids)))
        return problems + [f"prompt ids differ: {len(hf_ids)} (HF processor) vs {len(vllm_ids)} (vLLM) tokens; first difference at {first}"]
    found = {m: sum(item.modality == m for item in items) for m in {*expected_items, *(i.modality for i in items)}}
    for modality, count in sorted(found.items()):
        if count != expected_items.get(modality, 0):
            problems.append(f"{count} {modality} item(s) placed, {expected_items.get(modality, 0)} given")
    inside = {item.offset + i for item in items for i in range(len(item.is_embed))}
    if hf_types is not None:
        outside = [i for i, t in enumerate(hf_types) if t and i not in inside]
        if outside:
            problems.append(f"{len(outside)} token(s) the HF processor types as multimodal lie outside every item (first at {outside[0]})")
    if features:
        hf_rows = {i for i, t in enumerate(hf_ids) if t in features}
        ours = {item.offset + i for item in items for i, e in enumerate(item.is_embed) if e}
        if hf_rows != ours:
            problems.append(
                f"is_embed marks {len(ours)} position(s), the HF model fills {len(hf_rows)} "
                f"(tokens {sorted(features)}); first disagreement at {min(hf_rows ^ ours)}"
            )
    return problems


def cache_problems(uncached: Sequence[tuple[ItemRange, dict]], cached: Sequence[tuple[ItemRange, dict]]) -> list[str]:
    """How items served from vLLM's processor cache differ from the same items processed
    afresh (range, `is_embed` mask, each data field), empty where they are identical."""
    if len(uncached) != len(cached):
        return [f"{len(cached)} item(s) from the processor cache, {len(uncached)} processed afresh"]
    problems = []
    for index, ((fresh, fresh_data), (hit, hit_data)) in enumerate(zip(uncached, cached)):
        label = f"{fresh.modality} item {index}"
        if (fresh.offset, list(fresh.is_embed)) != (hit.offset, list(hit.is_embed)):
            problems.append(f"{label}: its range or is_embed mask from the processor cache differs from a fresh run's")
        differing = sorted(
            k for k in fresh_data.keys() | hit_data.keys()
            if k not in fresh_data or k not in hit_data or not _same_value(fresh_data[k], hit_data[k])
        )
        if differing:
            problems.append(f"{label}: its data from the processor cache differs from a fresh run's in {', '.join(differing)}")
    return problems


def _same_value(a, b) -> bool:
    import numpy as np

    if hasattr(a, "shape") or hasattr(b, "shape"):
        return getattr(a, "shape", None) == getattr(b, "shape", None) and bool(np.array_equal(np.asarray(a), np.asarray(b)))
    return a == b


def transformers_mismatch(hf_ids: Sequence[int], feature_ids: Sequence[int], encoder_rows: int | None) -> str:
    """Why transformers cannot run a case whose prompt holds another number of feature
    tokens than its encoder gives rows ("" where they agree or were not counted)."""
    features = set(feature_ids)
    in_hf = sum(t in features for t in hf_ids)
    if encoder_rows is None or not features or in_hf == encoder_rows:
        return ""
    return (
        f"the HF processor's prompt holds {in_hf} feature token(s) {sorted(features)}, the HF model's "
        f"get_*_features returns {encoder_rows} row(s): transformers itself cannot run this case"
    )


def encoder_problems(reference, rows, rtol: float = ENCODER_RTOL) -> tuple[list[str], str]:
    """(problems, measurement) for the rows vLLM placed against those transformers placed
    (arrays of positions x width; vLLM's may carry extra columns after the width)."""
    import numpy as np

    if rows is None:
        return ["vLLM placed no encoder rows"], ""
    if rows.shape[0] != reference.shape[0]:
        return [f"vLLM placed {rows.shape[0]} rows, transformers {reference.shape[0]}"], ""
    rows = rows[:, : reference.shape[1]]
    worst = float(np.max(np.abs(rows - reference))) if rows.size else 0.0
    scale = float(np.max(np.abs(reference))) if reference.size else 0.0
    relative = worst / scale if scale else worst
    measured = f"{reference.shape[0]} rows x {reference.shape[1]}: max |diff| {worst:.2e}, relative {relative:.2e} (tolerance {rtol:.0e})"
    if relative <= rtol:
        return [], measured
    first = int(np.argmax(np.max(np.abs(rows - reference), axis=1) > rtol * (scale or 1.0)))
    return [f"rows differ: {measured}; first row beyond it: {first} of the feature positions"], measured


NEIGHBOURS_EXPLAINED = (
    "transformers' result for an item depends on the items processed with it (as when a processor pads "
    "them to one size and the encoder reads the padding); hf_bridge processes, caches and encodes each "
    "item alone, as transformers does in a one-item prompt"
)


def rows_alone_diagnosis(together, alone, rows) -> str:
    """What transformers' rows for the items encoded alone (`alone`) say of a failed encoder
    comparison between its rows for them together (`together`) and vLLM's (`rows`); ""
    where transformers gives the same rows either way, so nothing is explained."""
    apart, between = encoder_problems(together, alone)
    if not apart:
        return ""
    differ, measured = encoder_problems(alone, rows)
    if differ:
        return f"against transformers' rows for each item encoded alone, too: {differ[0]}"
    return (f"vLLM's rows are transformers' for each item encoded alone ({measured}); transformers' rows for the "
            f"items together are not ({between}): {NEIGHBOURS_EXPLAINED}")


def items_alone_diagnosis(problems: Sequence[str]) -> str:
    """What a decoding comparison against transformers with each item encoded alone
    (`problems`, empty where vLLM matches it) says of a failed multi-item case: ""
    where vLLM fails that too, so it explains nothing."""
    if problems:
        return ""
    return f"vLLM matches transformers token for token with each item encoded alone: {NEIGHBOURS_EXPLAINED}"


def rounding_diagnosis(reference, exact, candidate, failed: bool) -> str:
    """What transformers in float64 (`exact`) says of a decoding comparison between its
    float32 `reference` and vLLM's `candidate` (`parity.Result`s): how far each is from
    it, and, where the comparison `failed`, whose rounding the gap is."""
    from .parity import ATOL, ROUNDING_BUDGET, rounding_error

    ref_error, ref_where = rounding_error(reference, exact)
    got_error, got_where = rounding_error(candidate, exact, who="vLLM's")
    measured = (f"against transformers in float64: its float32 reference is {ref_error:.2e} off at {ref_where}, "
                f"vLLM {got_error:.2e} at {got_where}")
    if math.isinf(ref_error):
        return f"{measured}; a near-tie: float32 rounding alone changes transformers' tokens, so no float32 run can be held to them"
    if not failed:
        return measured
    if got_error <= ATOL and ref_error > ROUNDING_BUDGET:
        return (f"{measured}; vLLM is within the {ATOL:.0e} tolerance of float64 and the reference is not "
                f"well-conditioned (over {ROUNDING_BUDGET:.1e}): the difference is the reference's own rounding, not vLLM's")
    if ref_error <= ROUNDING_BUDGET:
        return f"{measured}; the reference is well-conditioned (within {ROUNDING_BUDGET:.1e} of float64): the difference is vLLM's"
    return (f"{measured}; vLLM too is beyond the {ATOL:.0e} tolerance of float64: this checkpoint amplifies "
            "float32 rounding too much for either result to settle the case")


WORKER_PREFIX = re.compile(r"^(\[rank\d+\]:|\([\w-]+ pid=\d+\)(\s+[A-Z]+\s+\d\d-\d\d \d\d:\d\d:\d\d \[[^\]]*\])?)\s*")
"""vLLM prefixes a worker's traceback lines with its rank, or, logged from a worker
process, with the process and the log record's level, time and place."""
EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)?(Error|Exception)\b")
LOG_RECORD = re.compile(r"^([WIEF]\d{4} \d\d:\d\d:\d\d|(DEBUG|INFO|WARNING|ERROR)\s|Traceback )")
"""A line that begins a record of its own (glog's, as torch logs; Python's logging; a traceback)."""
POINTS_ELSEWHERE = re.compile(r"root cause|stack trace above", re.IGNORECASE)
"""How vLLM's wrappers of a worker's exception end ("See stack trace for root cause")."""


def last_exception(output: str, limit: int = 400) -> str:
    """The last exception a process printed, with the lines that continue its message
    (pydantic's reason, transformers' missing-backend advice come on the next ones); the
    last one that is not a wrapper pointing at another, where a worker process logged
    that other (tensor-parallel workers log the root cause, the engine wraps it)."""
    lines = [WORKER_PREFIX.sub("", line).strip() for line in output.strip().splitlines() if line.strip()]
    starts = [i for i, line in enumerate(lines) if EXCEPTION_LINE.match(line)]
    if not starts:
        return (lines or ["no output"])[-1][:limit]
    causes = [i for i in starts if not POINTS_ELSEWHERE.search(lines[i])]
    first = (causes or starts)[-1]
    message = [lines[first]]
    for line in lines[first + 1 : first + 3]:
        if LOG_RECORD.match(line):  # another record, logged after it (torch's, a process's)
            break
        message.append(line)
    return " ... ".join(message)[:limit]


def not_passed(verdicts: Iterable[Verdict]) -> tuple[list[Verdict], list[Verdict]]:
    """The verdicts that failed or were not checked, then those not applicable (n/a), each
    in order: what a summary of a run names, the first list before the second."""
    verdicts = list(verdicts)
    return ([v for v in verdicts if v.outcome not in (PASS, NOT_APPLICABLE)],
            [v for v in verdicts if v.outcome == NOT_APPLICABLE])


def brief(detail: str, chars: int) -> str:
    """`detail` on one line, its first `chars` characters: a table cell's cause."""
    return " ".join(detail.split())[:chars]


def first_of(named: Sequence[Verdict], what: str, chars: int) -> str:
    """A table cell's account of a run's verdicts `named` (those `not_passed` gives): how
    many are `what` ("not passed", "not applicable"), then the first with its cause."""
    first = named[0]
    return (f"{len(named)} verdict(s) {what}, first {first.case} {first.stage}: {first.outcome}: "
            f"{brief(first.detail, chars)}")


def case_cell(verdicts: Iterable[Verdict], chars: int) -> str:
    """A table cell's account of one case: "pass"; or each stage not passed, under its
    outcome ("processing, decoding fail"), then the first one's cause; or, where
    transformers itself could not run the case, the first stage it left n/a, with why."""
    failed, unrun = not_passed(verdicts)
    if failed:
        runs = [f"{', '.join(v.stage for v in run)} {outcome}"
                for outcome, run in itertools.groupby(failed, key=lambda v: v.outcome)]
        return f"{', '.join(runs)}; {failed[0].stage}: {brief(failed[0].detail, chars)}"
    if unrun:
        return f"n/a: transformers cannot run it ({unrun[0].stage}: {brief(unrun[0].detail, chars)})"
    return PASS


def compared_with_nothing(verdicts: Iterable[Verdict]) -> list[tuple[str, str]]:
    """(implementation, stage) where no case passed and transformers itself could not run
    one: that stage of the engine was compared with nothing (a checkpoint transformers
    cannot run at all passes its prompts' processing, and nothing else)."""
    by_stage: dict[tuple[str, str], list[Verdict]] = {}
    for v in verdicts:
        by_stage.setdefault((v.impl, v.stage), []).append(v)
    return [key for key, group in by_stage.items()
            if all(v.outcome != PASS for v in group)
            and any(v.outcome == NOT_APPLICABLE and v.detail.startswith(TRANSFORMERS_REFUSED) for v in group)]


def exit_code(verdicts: Iterable[Verdict]) -> int:
    """1 if any stage failed; else 2 if any was not checked, or none passed, or one was
    compared with nothing (`compared_with_nothing`); else 0. A case transformers itself
    refuses (n/a) is reported and neither passes nor fails, where another case of its
    stage passes."""
    verdicts = list(verdicts)
    outcomes = {v.outcome for v in verdicts}
    if FAIL in outcomes:
        return EXIT_FAILED
    if NOT_CHECKED in outcomes or PASS not in outcomes or compared_with_nothing(verdicts):
        return EXIT_NOT_CHECKED
    return EXIT_PASSED


def verdict_grid(verdicts: Sequence[Verdict]) -> tuple[list[str], dict[tuple[str, str], dict[str, Verdict]]]:
    """(the stages present, in order; (impl, case) -> stage -> verdict), as tables show them."""
    stages = [s for s in STAGES if any(v.stage == s for v in verdicts)]
    rows: dict[tuple[str, str], dict[str, Verdict]] = {}
    for v in verdicts:
        rows.setdefault((v.impl, v.case), {})[v.stage] = v
    return stages, rows


def table(verdicts: Sequence[Verdict]) -> str:
    """impl x case rows, a column per stage; details follow the table."""
    stages, rows = verdict_grid(verdicts)
    head = ["impl", "case", *stages]
    body = [[impl, case, *(cells[s].outcome if s in cells else "-" for s in stages)] for (impl, case), cells in rows.items()]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*head), fmt.format(*("-" * w for w in widths)), *(fmt.format(*r) for r in body)]
    grouped: dict[tuple[str, str, str, str], list[str]] = {}
    for v in verdicts:
        if v.detail:
            grouped.setdefault((v.stage, v.impl, v.outcome, v.detail), []).append(v.case)
    details = [f"[{stage}] {impl} / {', '.join(cases)}: {outcome}: {detail}" for (stage, impl, outcome, detail), cases in grouped.items()]
    return "\n".join(lines + ([""] + details if details else []))


def to_json(model: str, verdicts: Sequence[Verdict]) -> str:
    return json.dumps({"model": model, "exit_code": exit_code(verdicts), "verdicts": [asdict(v) for v in verdicts]}, indent=1)
