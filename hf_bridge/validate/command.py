"""`hf-bridge validate MODEL`: where vLLM and transformers part ways, stage by stage.

Each implementation runs in its own interpreter (the in-tree backend needs
`HF_BRIDGE_DISABLE=1` before vLLM loads its plugins, and an engine decorates HF classes
in place); transformers' side (encoder rows and references) runs in another
(`transformers_side.py`). A worker starts at once and prepares (imports vLLM, builds its
processors) while transformers' side computes, or while the worker before it checks, and
waits for its release before checking anything. It prints one `VERDICT {...}` line per
verdict as soon as it has it, so a worker that dies still leaves what it checked, and
the rest is reported as not checked, with the worker's error.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..help_format import SetDefaultsHelpFormatter
from . import stages
from .cases import IMAGE_SIDE, VALIDATE_CASES, cases_of
from .checkpoint import feature_ids, load_processor, refuse_untrusted_code, remote_code_trusted, trusts_remote_code
from .report import Report
from .reference import missing_references, store_references
from .stages import FAIL, NOT_APPLICABLE, NOT_CHECKED, PASS, TRANSFORMERS_REFUSED, Verdict
from .transformers_side import RowsWanted, TransformersSide

IMPLS = {
    "hf_bridge": ("transformers", {}),
    "intree": ("transformers", {"HF_BRIDGE_DISABLE": "1"}),
    "native": ("vllm", {}),
}
"""`--impl` name -> (vLLM's `model_impl`, environment of its worker)."""
VERDICT_PREFIX = "VERDICT "
VIEW_PREFIX = "VIEW "
"""A worker's line holding one case's prompt as its processor placed it (HTML)."""
WORKER_TIMEOUT = 900
DTYPES = ("float32", "bfloat16")
"""The engine's and transformers' dtype: float32 for parity, bfloat16 as vLLM serves most checkpoints."""
NO_MEDIA = "no media"
"""Why a stage does not apply to a case without items."""
TEXT_ONLY_PROCESSING = f"{NO_MEDIA}: vLLM tokenizes the prompt without its multimodal processor (decoding compares the ids)"


def selected_cases(
    model_dir: str | Path,
    names: Sequence[str] | None = None,
    text: str | None = None,
    images: Sequence[str] = (),
    videos: Sequence[str] = (),
    cases_file: str | Path | None = None,
    mm_processor_kwargs: dict[str, Any] | None = None,
    audios: Sequence[str] = (),
    max_tokens: int | None = None,
) -> list:
    """The cases to run: the user's own (`images`/`videos`/`audios` with `text`, and each line of
    `cases_file`), then the standard cases named, or, without cases of the user's, every
    standard case this checkpoint's processor can run (with the user's text where given);
    each generating `max_tokens` greedy tokens where given (else `parity.MAX_NEW_TOKENS`).
    `mm_processor_kwargs` go to the processor in every case that sets none of its own."""
    from . import parity

    available = cases_of(model_dir, VALIDATE_CASES)
    own = []
    if images or videos or audios:
        try:
            own.append(parity.Case.from_files("user", text or parity.Case.text, images, videos, audios))
        except (ValueError, FileNotFoundError) as error:
            raise SystemExit(f"hf-bridge validate: {error}") from None
    if cases_file:
        own += cases_from_file(cases_file)
    takes = {VALIDATE_CASES[c] for c in available}
    for case in own:
        lacking = [m for m in case.media_counts if m not in takes]
        if lacking:
            raise SystemExit(f"hf-bridge validate: case {case.name!r} has {' and '.join(lacking)} input, which this checkpoint's processor does not take")
    unknown = sorted(set(names or []) - set(available))
    if unknown:
        raise SystemExit(f"hf-bridge validate: case(s) {', '.join(unknown)} unavailable for this checkpoint; it can run {', '.join(available)}")
    standard = {**parity.standard_cases(IMAGE_SIDE), **parity.shape_cases()}
    chosen = [standard[n] for n in (names or ([] if own else available))]
    chosen = [dataclasses.replace(c, text=text) for c in chosen] if text else chosen
    cases = own + chosen
    try:
        given = processor_kwargs_json(mm_processor_kwargs or {})
    except ValueError as error:
        raise SystemExit(f"hf-bridge validate: {error}") from None
    if given:
        cases = [c if c.processor_kwargs else dataclasses.replace(c, processor_kwargs=given) for c in cases]
    if max_tokens is not None:
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise SystemExit(f"hf-bridge validate: --max-tokens must be a whole number of tokens, at least 1; got {max_tokens!r}")
        cases = [dataclasses.replace(c, new_tokens=max_tokens) for c in cases]
    repeated = sorted({c.name for c in cases if [d.name for d in cases].count(c.name) > 1})
    if repeated:
        raise SystemExit(f"hf-bridge validate: case name(s) {', '.join(repeated)} used twice; give each case its own name")
    return cases


CASE_FILE_KEYS = ("name", "prompt", "images", "videos", "audios", "mm_processor_kwargs")


def cases_from_file(path: str | Path) -> list:
    """Cases from a JSONL file: one object per line, `{"name": ..., "prompt": ...,
    "images": [paths], "videos": [paths], "audios": [paths], "mm_processor_kwargs": {...}}`;
    paths relative to the file."""
    from . import parity

    path = Path(path).expanduser()
    cases = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            unknown = set(entry) - set(CASE_FILE_KEYS)
            if unknown:
                raise ValueError(f"unknown key(s) {', '.join(sorted(unknown))}; keys are {', '.join(CASE_FILE_KEYS)}")
            resolve = [[str(path.parent / p) for p in entry.get(key, [])] for key in ("images", "videos", "audios")]
            case = parity.Case.from_files(entry.get("name", f"line{number}"), entry.get("prompt", parity.Case.text), *resolve)
            if "mm_processor_kwargs" in entry:
                case = dataclasses.replace(case, processor_kwargs=processor_kwargs_json(entry["mm_processor_kwargs"]))
            cases.append(case)
        except (ValueError, FileNotFoundError) as error:
            raise SystemExit(f"hf-bridge validate: {path}:{number}: {error}") from None
    return cases


def processor_kwargs_json(kwargs: object) -> str:
    """`kwargs` (an object of keyword arguments for the HF processor) as a case keeps it."""
    if not isinstance(kwargs, dict):
        raise ValueError(f"mm_processor_kwargs must be a JSON object of the processor's keyword arguments, "
                         f"e.g. {{\"do_image_splitting\": false}}; got {kwargs!r}")
    return json.dumps(kwargs, sort_keys=True) if kwargs else ""


@dataclasses.dataclass(frozen=True)
class EngineCheck:
    """How an engine runs and its decoding is judged: in `dtype`, against transformers in
    the same dtype, over `tensor_parallel_size` workers, eagerly unless `compiled` (vLLM's
    default mode). In float32 by strict parity, or with `lenient` by vLLM's own tests'
    rule, and with `exact_reference` also measured against transformers in float64; in
    bfloat16, where 1e-3 is out of reach, by `parity.compare_bfloat16`, whose scale is
    transformers' own bfloat16 rounding (its distance from its float32 result)."""

    dtype: str = "float32"
    lenient: bool = False
    exact_reference: bool = False
    tensor_parallel_size: int = 1
    compiled: bool = False

    def __post_init__(self):
        if not isinstance(self.tensor_parallel_size, int) or self.tensor_parallel_size < 1:
            raise ValueError(f"--tensor-parallel-size must be a whole number of workers, at least 1; got {self.tensor_parallel_size!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r} is not one validate checks; it checks {', '.join(DTYPES)}")
        if self.dtype != "float32" and (self.exact_reference or self.lenient):
            option = "--exact-reference" if self.exact_reference else "--lenient"
            raise ValueError(f"{option} is a float32 rule, and --dtype {self.dtype} has its own (tokens by vLLM's top-5 rule, "
                             "log-probs within 3 times transformers' own bfloat16 rounding); drop one of the two")

    @property
    def reference_dtypes(self) -> tuple[str, ...]:
        """transformers' results it needs: its float32 one sets a bfloat16 check's scale."""
        if self.dtype != "float32":
            return (self.dtype, "float32")
        return ("float32", "float64") if self.exact_reference else ("float32",)

    @property
    def compares_rows(self) -> bool:
        """The encoder stage compares rows in float32 only (tolerance 1e-3 relative)."""
        return self.dtype == "float32"

    def key(self) -> str:
        return json.dumps(dataclasses.asdict(self))


NO_FEATURE_POSITIONS = ("transformers' prompt holds none of the tokens the config names for encoder rows "
                        "(`image_token_id`, `video_token_id`, `audio_token_id` or `*_token_index`), so no row was compared")
ROWS_IN_FLOAT32_ONLY = "rows are compared in float32 only (1e-3 relative); run without --dtype to compare them"


# -- in a worker process ------------------------------------------------------------------


def emit(verdict: Verdict) -> None:
    print(VERDICT_PREFIX + json.dumps(verdict.__dict__), flush=True)


def emit_view(impl: str, case: str, inspection) -> None:
    print(VIEW_PREFIX + json.dumps({"impl": impl, "case": case, "html": inspection._repr_html_()}), flush=True)


VLLM_CALL_DATA = " on data="
"""Where vLLM's "Failed to apply <processor> on data=... with kwargs=..." turns to the data."""


def processor_raised(error: BaseException) -> str:
    """What vLLM's processor raised. vLLM's wrapper of the HF processor's error names the
    call with its data's whole repr (arrays of pixels), and the processor's own error,
    which says what is wrong, stands in its place."""
    from ..probes import root_cause

    message = str(error)
    if VLLM_CALL_DATA in message and error.__cause__ is not None:
        cause = root_cause(error)
        message = f"{message.split(VLLM_CALL_DATA)[0]}: {type(cause).__name__}: {cause}"
    return f"vLLM's processor raised {type(error).__name__}: {message}"


def check_processing(impl: str, model_dir: str, cases, encoder_rows: Path | None, hf_processor, processor) -> None:
    """vLLM's prompt ids and item ranges (from `processor`, vLLM's) against the HF
    processor's, and the embedding positions its items announce against the rows the HF
    encoder returns, per case."""
    from .. import inspect as inspection
    from . import parity
    from .encoder import load_rows

    row_counts = load_rows(encoder_rows)[1] if encoder_rows is not None else {}
    features = feature_ids(model_dir)
    for case in cases:
        if not case.media_counts:
            emit(Verdict(impl, case.name, "processing", NOT_APPLICABLE, TEXT_ONLY_PROCESSING))
            continue
        try:
            hf = parity.hf_inputs(hf_processor, case, return_mm_token_type_ids=True)
        except Exception as error:  # noqa: BLE001 - transformers' own refusal makes the case n/a
            emit(Verdict(impl, case.name, "processing", NOT_APPLICABLE, f"{TRANSFORMERS_REFUSED}{type(error).__name__}: {error}"))
            continue
        try:
            request = parity.vllm_request(hf_processor, case)
            # twice through a fresh front-end processor cache: processed afresh, then served from it
            cache = inspection.processor_cache(processor)
            view, cached = (
                inspection.inspect_prompt(processor, request["prompt"], request.get("multi_modal_data"), request.get("mm_processor_kwargs"), cache=cache)
                for _ in range(2)
            )
        except Exception as error:  # noqa: BLE001 - vLLM's processing refused what HF accepts
            emit(Verdict(impl, case.name, "processing", FAIL, processor_raised(error)))
            continue
        emit_view(impl, case.name, inspection.Inspection.of(processor, view))
        types = hf.get("mm_token_type_ids")
        counted = row_counts.get(case.name)
        counted_rows = counted if isinstance(counted, int) else None
        hf_ids = hf["input_ids"][0].tolist()
        hf_mismatch = stages.transformers_mismatch(hf_ids, list(features.values()), counted_rows)
        if hf_mismatch and sum(sum(i.is_embed) for i in view.items) == counted_rows:
            # vLLM's items agree with the encoder; transformers' own prompt does not (Fuyu, two images)
            emit(Verdict(impl, case.name, "processing", NOT_APPLICABLE, hf_mismatch))
            continue
        problems = stages.processing_problems(
            hf_ids,
            None if types is None else types[0].tolist(),
            view.prompt_ids,
            [stages.ItemRange(i.modality, i.offset, i.is_embed) for i in view.items],
            case.media_counts,
            list(features.values()),
            counted_rows,
        )
        problems += stages.cache_problems(*([(stages.ItemRange(i.modality, i.offset, i.is_embed), i.data) for i in v.items] for v in (view, cached)))
        unmeasured = counted if isinstance(counted, str) else ""
        detail = "; ".join(problems) or (f"encoder rows not counted: {unmeasured}" if unmeasured else "")
        emit(Verdict(impl, case.name, "processing", FAIL if problems else PASS, detail))


def check_engine(impl: str, model_dir: str, cases, stage_names: list[str], encoder_rows: Path | None, hf_processor,
                 check: EngineCheck = EngineCheck()) -> None:
    """Each case through one engine, run as `check` says: the rows its decoder received
    against transformers' (encoder, float32 only), and decoding (`_decoding_verdict`)."""
    from . import parity
    from .encoder import RowCapture, feature_positions, load_rows
    from .engine import make_llm, shutdown
    from .reference import NotApplicable, references

    results = references(model_dir, cases, dtype=check.dtype)
    beside = references(model_dir, cases, dtype=check.reference_dtypes[1]) if len(check.reference_dtypes) > 1 else [None] * len(cases)
    hf_rows, _, rows_alone = load_rows(encoder_rows) if encoder_rows is not None else ({}, {}, {})
    token_ids = feature_ids(model_dir)
    limits = parity.media_limits(cases)

    def start():
        llm = make_llm(
            model_dir,
            model_impl=IMPLS[impl][0],
            dtype=check.dtype,
            tensor_parallel_size=check.tensor_parallel_size,
            enforce_eager=not check.compiled,
            limit_mm_per_prompt=limits,
            enable_prefix_caching=False,  # every case's rows pass through the encoder and the capture
        )
        return llm, RowCapture(llm) if "encoder" in stage_names and check.compares_rows else None

    llm, capture = start()
    for case, reference, other_result in zip(cases, results, beside):
        try:
            got, raised = parity.vllm_result(llm, hf_processor, case, check.dtype), None
        except Exception as error:  # noqa: BLE001 - the engine refused the request
            got, raised = None, f"vLLM raised {type(error).__name__}: {error}"
        if raised:  # an in-process engine that raised is not reused, and is freed before the next starts
            shutdown(llm)
            llm = capture = None
            gc.collect()
            llm, capture = start()
        if capture is not None:
            positions = feature_positions(got.prompt_ids, token_ids) if got else []
            emit(_encoder_verdict(impl, case, hf_rows.get(case.name), capture.take(positions), raised, rows_alone.get(case.name),
                                  transformers_ran=not isinstance(reference, NotApplicable)))
        elif "encoder" in stage_names:
            emit(Verdict(impl, case.name, "encoder", NOT_APPLICABLE, ROWS_IN_FLOAT32_ONLY if case.media_counts else NO_MEDIA))
        if "decoding" in stage_names:
            config = llm.llm_engine.vllm_config  # the engine's own account of how it ran
            emit(_decoding_verdict(impl, model_dir, case, check, reference, other_result, got, raised, hf_processor,
                                   config.parallel_config.tensor_parallel_size, not config.model_config.enforce_eager))


def _decoding_verdict(impl: str, model_dir: str, case, check: EngineCheck, reference, other_result, got, raised: str | None,
                      hf_processor, workers: int, compiled: bool = False) -> Verdict:
    """`got` (None where the engine `raised`) against transformers' `reference` in the
    check's dtype: strict parity (prompt ids, greedy tokens, log-probs within 1e-3),
    `check.lenient`: vLLM's own tests' rule (`parity.compare_lenient`), in bfloat16
    `parity.compare_bfloat16`. `other_result` is transformers' float32 result in bfloat16,
    its float64 one with `check.exact_reference`, where the verdict also says how far both
    sides are from it (`stages.rounding_diagnosis`)."""
    from . import parity
    from .reference import NotApplicable, neighbours_diagnosis

    if isinstance(reference, NotApplicable):
        return Verdict(impl, case.name, "decoding", NOT_APPLICABLE, f"{TRANSFORMERS_REFUSED}{reference.error}")
    if check.dtype != "float32" and isinstance(other_result, NotApplicable):
        return Verdict(impl, case.name, "decoding", NOT_CHECKED,
                       f"transformers fails in float32 ({other_result.error}), which sets the {check.dtype} check's scale")
    if raised:
        problems, found = [raised], ""
    elif check.dtype != "float32":
        problems, found = parity.compare_bfloat16(reference, other_result, got)
        found = f"in {check.dtype}, against transformers in {check.dtype}: {found}"
    elif check.lenient:
        problems, found = parity.compare_lenient(reference, got)
        found = f"lenient rule: {found}"
    else:
        problems, found = parity.compare(reference, got), ""
    detail = "; ".join(problems) or found
    if problems and got is not None and check.dtype == "float32" and not check.lenient:
        detail = "; ".join(filter(None, [detail, neighbours_diagnosis(model_dir, case, got),
                                         parity.placeholder_diagnosis(reference, hf_processor)]))
    if check.exact_reference and isinstance(other_result, NotApplicable):
        detail += f"; not measured against float64: transformers fails in float64 ({other_result.error})"
    elif check.exact_reference and got is not None:
        detail = "; ".join(filter(None, [detail, stages.rounding_diagnosis(reference, other_result, got, bool(problems))]))
    if workers > 1:
        detail = "; ".join(filter(None, [f"over {workers} tensor-parallel workers", detail]))
    if compiled:
        detail = "; ".join(filter(None, ["compiled", detail]))
    return Verdict(impl, case.name, "decoding", FAIL if problems else PASS, detail)


def _encoder_verdict(impl: str, case, reference, rows, raised: str | None, rows_alone=None, transformers_ran: bool = False) -> Verdict:
    """`transformers_ran`: transformers generated the case's references, so where its forward
    raised on the encoder stage's inputs, the rows went unchecked, not n/a."""
    if not case.media_counts:
        return Verdict(impl, case.name, "encoder", NOT_APPLICABLE, NO_MEDIA)
    if isinstance(reference, str) and reference.startswith(TRANSFORMERS_REFUSED) and transformers_ran:
        return Verdict(impl, case.name, "encoder", NOT_CHECKED,
                       f"{reference}; yet transformers generated this case's references, so its rows could not be taken")
    if isinstance(reference, str) or reference is None:
        return Verdict(impl, case.name, "encoder", NOT_APPLICABLE if reference else NOT_CHECKED, reference or "no transformers rows")
    if raised:
        return Verdict(impl, case.name, "encoder", FAIL, raised)
    if len(reference) == 0:  # rows are taken at the feature tokens' positions: a pass would compare nothing
        return Verdict(impl, case.name, "encoder", NOT_CHECKED, NO_FEATURE_POSITIONS)
    problems, measured = stages.encoder_problems(reference, rows)
    if problems and rows_alone is not None:
        problems.append(stages.rows_alone_diagnosis(reference, rows_alone, rows))
    return Verdict(impl, case.name, "encoder", FAIL if problems else PASS, "; ".join(filter(None, problems)) or measured)


def worker(impl: str, model_dir: str, stage_names: list[str], case_keys: list[str], encoder_rows: Path | None,
           check: EngineCheck = EngineCheck()) -> None:
    from .. import inspect as inspection
    from . import parity

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # RowCapture reaches the model in process
    cases = [parity.Case(**json.loads(key)) for key in case_keys]
    hf_processor = load_processor(model_dir)
    processor = None
    if "processing" in stage_names:
        processor = inspection.build_processor(model_dir, model_impl=IMPLS[impl][0], trust_remote_code=trusts_remote_code())
    else:
        import vllm  # noqa: F401 - its import is most of a start-up; done before the release
    sys.stdin.readline()  # the release (`Worker.release`); an empty or closed stdin releases at once
    if processor is not None:
        check_processing(impl, model_dir, cases, encoder_rows, hf_processor, processor)
    if "encoder" in stage_names or "decoding" in stage_names:
        check_engine(impl, model_dir, cases, stage_names, encoder_rows, hf_processor, check)


# -- in the command's process -------------------------------------------------------------


class Worker:
    """One implementation's worker, started at once: it prepares, then waits for `release`
    (transformers' side done, the worker before it finished) before checking anything."""

    def __init__(self, impl: str, model_dir: str, stage_names: list[str], cases: list, encoder_rows: Path | None,
                 scratch: Path, check: EngineCheck = EngineCheck()):
        self.impl, self.stage_names, self.case_names = impl, stage_names, [c.name for c in cases]
        command = [sys.executable, "-m", "hf_bridge.validate.command", "--worker", impl, model_dir,
                   "--stages", ",".join(stage_names), "--cases", json.dumps([c.key() for c in cases]), "--check", check.key()]
        if encoder_rows is not None:
            command += ["--encoder-rows", str(encoder_rows)]
        # files, not pipes: nobody reads a worker's output while it waits for its release
        self._stdout, self._stderr = (open(scratch / f"{impl}.{name}", "w+") for name in ("stdout", "stderr"))
        env = dict(os.environ, **IMPLS[impl][1])
        self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=self._stdout, stderr=self._stderr, text=True, env=env)

    def release(self) -> None:
        """Lets it check (once transformers' side is done and the worker before it finished)."""
        try:
            self._process.stdin.write("go\n")
            self._process.stdin.close()
        except BrokenPipeError:  # it died preparing: `finish` reports why
            pass

    def finish(self) -> tuple[list[Verdict], dict[tuple[str, str], str]]:
        """Releases it and waits: its verdicts, those it did not reach not checked, and the
        prompts as its processor placed them ((impl, case) -> HTML)."""
        self.release()
        try:
            died = self._process.wait(timeout=WORKER_TIMEOUT) != 0
            stderr = self._read(self._stderr)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
            died, stderr = True, f"timed out after {WORKER_TIMEOUT} s"
        stdout = self._read(self._stdout)
        verdicts = [Verdict(**json.loads(line[len(VERDICT_PREFIX):])) for line in stdout.splitlines() if line.startswith(VERDICT_PREFIX)]
        views = [json.loads(line[len(VIEW_PREFIX):]) for line in stdout.splitlines() if line.startswith(VIEW_PREFIX)]
        strips = {(v["impl"], v["case"]): v["html"] for v in views}
        if died:  # a tensor-parallel worker logs its exception to stdout, the engine's wrapper goes to stderr
            cause = stages.last_exception(f"{stdout}\n{stderr}")
            reached = {(v.case, v.stage) for v in verdicts}
            verdicts += [
                Verdict(self.impl, case, stage, NOT_CHECKED, f"the {self.impl} worker stopped: {cause}")
                for stage in self.stage_names for case in self.case_names if (case, stage) not in reached
            ]
        return verdicts, strips

    def stop(self) -> None:
        """Ends it where it still runs (the command gave up), and closes its output."""
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._stdout.close()
        self._stderr.close()

    @staticmethod
    def _read(file) -> str:
        file.flush()
        file.seek(0)
        return file.read()


def run(
    model: str | Path,
    impl: str = "hf_bridge",
    stage_names: Sequence[str] = stages.STAGES,
    case_names: Sequence[str] | None = None,
    prompt: str | None = None,
    images: Any = (),
    videos: Any = (),
    cases_file: str | Path | None = None,
    lenient: bool = False,
    exact_reference: bool = False,
    mm_processor_kwargs: dict[str, Any] | None = None,
    trust_remote_code: bool = False,
    audios: Any = (),
    dtype: str = "float32",
    tensor_parallel_size: int = 1,
    max_tokens: int | None = None,
    compiled: bool = False,
) -> Report:
    """Validate checkpoint directory `model` against transformers, as `hf-bridge validate`
    does, and return the report (it shows itself in a notebook). The cases are those of
    `selected_cases`; `lenient` judges decoding by vLLM's own tests' rule; `exact_reference`
    also runs transformers in float64 and says, per decoding verdict, how far each side is
    from it; `dtype="bfloat16"` runs the engine and transformers in bfloat16, as vLLM
    serves most checkpoints, and judges decoding by `parity.compare_bfloat16` (the encoder
    stage compares rows in float32 only); `tensor_parallel_size` shards the engine over that
    many workers (vLLM's flag), as it will serve; `compiled` runs the engine in vLLM's
    default compiled mode instead of eagerly; `max_tokens` greedy tokens are generated
    and compared per case (8 by default); `mm_processor_kwargs` go to both processors in every case (as vLLM's
    `mm_processor_kwargs` per request), except cases of `cases_file` that set their own;
    `trust_remote_code` runs a checkpoint's own code, in every process, as transformers'
    flag of that name does; `audios` are audio files of the user's case, beside `images`
    and `videos`. Each of the user's items may be a file's path or, as `LLM.generate` takes
    it, held in memory: a PIL image or a uint8 (height, width, 3) array; a video's frames,
    or (frames, metadata); audio samples, or (samples, sampling_rate)
    (`media_in_memory`)."""
    from ..probes import audio_sampling_rate
    from ..progress import progress
    from . import media_in_memory
    from .checkpoint import checkpoint_dir

    model_dir = str(checkpoint_dir(model, "hf-bridge validate"))
    impls = list(IMPLS) if impl == "all" else [impl]
    unknown = [s for s in stage_names if s not in stages.STAGES]
    if unknown:
        raise SystemExit(f"hf-bridge validate: unknown stage(s) {', '.join(unknown)}; stages are {', '.join(stages.STAGES)}")
    try:
        check = EngineCheck(dtype, lenient, exact_reference, tensor_parallel_size, compiled)
    except ValueError as error:
        raise SystemExit(f"hf-bridge validate: {error}") from None
    with remote_code_trusted(trust_remote_code), tempfile.TemporaryDirectory() as scratch:
        refuse_untrusted_code(model_dir, "hf-bridge validate")
        try:
            images, videos, audios = media_in_memory.as_files(images, videos, audios, lambda: audio_sampling_rate(load_processor(model_dir)))
        except ValueError as error:
            raise SystemExit(f"hf-bridge validate: {error}") from None
        cases = selected_cases(model_dir, case_names, prompt, images, videos, cases_file, mm_processor_kwargs, audios, max_tokens)
        report = Report(model_dir, [], images={c.name: case_pngs(c) for c in cases}, audios=case_wavs(model_dir, cases))
        scratch = Path(scratch)
        wanted, rows = transformers_side_wanted(model_dir, cases, stage_names, check, scratch)
        encoder_rows = rows.path if rows is not None else None
        workers = [Worker(impls[0], model_dir, list(stage_names), cases, encoder_rows, scratch, check)]
        side = None
        try:
            # after the worker: a process's first clean call waits for its server's imports, beside the worker's
            side = TransformersSide(model_dir, wanted, rows=rows) if wanted or rows is not None else None
            if side is not None:
                with progress(f"transformers: {side.work}, while the {impls[0]} worker starts"):
                    store_references(model_dir, cases, side.result())
            for number, name in enumerate(impls):
                if number + 1 < len(impls):  # the next prepares while this one checks
                    workers.append(Worker(impls[number + 1], model_dir, list(stage_names), cases, encoder_rows, scratch, check))
                with progress(f"{name}: {', '.join(stage_names)}"):
                    verdicts, strips = workers[number].finish()
                report.verdicts += verdicts
                report.strips.update(strips)
        finally:
            for started in [side, *workers]:
                if started is not None:
                    started.stop()
    return report


def transformers_side_wanted(model_dir: str, cases: list, stage_names: Sequence[str], check: EngineCheck,
                             scratch: Path) -> tuple[dict[str, list[str]], RowsWanted | None]:
    """What transformers' side of the run computes: the references decoding lacks, and the
    encoder rows the processing and encoder stages compare with (None where they do not run)."""
    wanted = missing_references(model_dir, cases, check.reference_dtypes) if "decoding" in stage_names else {}
    rows = None
    if "encoder" in stage_names or "processing" in stage_names:
        rows = RowsWanted(scratch / "encoder_rows.npz", cases, feature_ids(model_dir))
    return wanted, rows


def case_pngs(case) -> list[bytes]:
    """A case's test images, then each video's frames, as PNG."""
    import io

    from PIL import Image

    pictures = list(case.images) + [Image.fromarray(frame) for video in case.videos for frame in video]
    pngs = []
    for picture in pictures:
        buffer = io.BytesIO()
        picture.save(buffer, format="PNG")
        pngs.append(buffer.getvalue())
    return pngs


def case_wavs(model_dir: str, cases) -> dict[str, list[bytes]]:
    """Each audio case's clips as WAV, the samples both sides get (at the feature
    extractor's rate), so the report plays what was tested."""
    from ..probes import audio_sampling_rate
    from ..server import wav_bytes

    if not any(c.num_audios for c in cases):
        return {}
    rate = audio_sampling_rate(load_processor(model_dir))
    return {case.name: [wav_bytes(clip, rate) for clip in case.audios(rate)] for case in cases if case.num_audios}


def json_object(text: str) -> dict[str, Any]:
    """A command-line JSON object, refused with the reason."""
    try:
        value = json.loads(text)
        processor_kwargs_json(value)  # refuses anything but an object
    except ValueError as error:  # JSONDecodeError among them
        raise argparse.ArgumentTypeError(f"{error} (from {text!r})") from None
    return value


def validate(args: argparse.Namespace) -> int:
    report = run(
        args.model, args.impl, args.stages.split(","), args.cases.split(",") if args.cases else None, args.prompt,
        args.image or (), args.video or (), args.cases_file, args.lenient, args.exact_reference, args.mm_processor_kwargs,
        args.trust_remote_code, args.audio or (), args.dtype, args.tensor_parallel_size, args.max_tokens, args.compiled,
    )
    print(report)
    if args.json:
        Path(args.json).write_text(report.to_json())
    if args.html:
        Path(args.html).write_text(report.page())
    return report.exit_code


def add_parser(sub) -> None:
    v = sub.add_parser(
        "validate",
        help="check, stage by stage, that vLLM matches transformers on a checkpoint",
        description=(
            "Run a local checkpoint through vLLM (hf_bridge, the in-tree Transformers backend, or vLLM's native "
            "model) and through transformers, on synthetic cases its processor can take, and report per stage "
            "where they part ways: processing (prompt ids, item ranges, is_embed against the HF processor and "
            "model), encoder (the rows each decoder receives at the items' positions, relative tolerance 1e-3), "
            "decoding (identical prompt ids and greedy tokens, log-probs within 1e-3, float32). Exit code 0: every "
            "stage checked passed; 1: a stage failed; 2: a stage could not be checked."
        ),
        formatter_class=SetDefaultsHelpFormatter,
    )
    v.add_argument("model", help="checkpoint directory (config, weights, processor), or a hub id where the hub is reachable")
    v.add_argument("--impl", choices=[*IMPLS, "all"], default="hf_bridge", help="the vLLM implementation to check")
    v.add_argument("--stages", default=",".join(stages.STAGES), help="comma-separated stages to run")
    v.add_argument("--cases", help=f"comma-separated standard cases (default: all the processor can take, of {', '.join(VALIDATE_CASES)})")
    v.add_argument("--prompt", help="the user's text in every case, instead of each case's own")
    v.add_argument(
        "--max-tokens", type=int, metavar="N",
        help="greedy tokens both sides generate and decoding compares, in every case (default 8): more reach "
        "positions a short run does not (a RoPE scaled past its original length, a sliding window)",
    )
    v.add_argument("--image", action="append", metavar="PATH", help="your own image (repeatable): one case of your images, videos, audio files and --prompt, run instead of the standard cases unless --cases names some")
    v.add_argument("--video", action="append", metavar="PATH", help="your own video file (repeatable; read with OpenCV), in that case")
    v.add_argument(
        "--audio", action="append", metavar="PATH",
        help="your own audio file (repeatable; WAV, or any format soundfile reads where installed), in that case, "
        "resampled once to the feature extractor's rate for both sides",
    )
    v.add_argument("--cases-file", metavar="JSONL", help='your own cases, one JSON object per line: {"name": ..., "prompt": ..., "images": [...], "videos": [...], "audios": [...], "mm_processor_kwargs": {...}} (paths relative to the file)')
    v.add_argument(
        "--mm-processor-kwargs", type=json_object, metavar="JSON",
        help='keyword arguments for the HF processor in every case (one of --cases-file sets its own), as vLLM\'s '
        'flag of that name takes them, e.g. \'{"do_pan_and_scan": true}\': transformers\' processor gets them in its '
        "call, vLLM's with each request",
    )
    v.add_argument(
        "--lenient", action="store_true",
        help="judge decoding by vLLM's own tests' rule: where greedy tokens first differ, each side's token must be in the "
        "other's top 5 (a near-tie, reported as such); log-prob differences are reported, not judged",
    )
    v.add_argument(
        "--exact-reference", action="store_true",
        help="also run transformers in float64 (twice the float32 memory) and say, per decoding verdict, how far "
        "transformers' float32 result and vLLM's each are from it: a failure the reference's own rounding explains "
        "is named as such; the verdicts themselves are unchanged",
    )
    v.add_argument(
        "--trust-remote-code", action="store_true",
        help="run the checkpoint's own Python code (its `auto_map`), in transformers and in vLLM, as their flags of "
        "that name do: for a model transformers does not ship; read that code first",
    )
    v.add_argument(
        "--dtype", choices=DTYPES, default="float32",
        help="run the engine and transformers in this dtype. bfloat16, as vLLM serves most checkpoints, cannot meet "
        "1e-3: decoding is judged against transformers in bfloat16, the tokens by the --lenient rule and the log-probs "
        "within 3 times transformers' own bfloat16 rounding (its distance from its float32 result); the encoder stage, "
        "which compares rows in float32, does not apply",
    )
    v.add_argument(
        "--tensor-parallel-size", type=int, default=1, metavar="N",
        help="shard the engine over N workers, as vLLM's flag of that name does, to check the model as it will be "
        "served; on a CPU without VLLM_CPU_OMP_THREADS_BIND, each worker is bound to its share of this process's cores",
    )
    v.add_argument(
        "--compiled", action="store_true",
        help="run the engine in vLLM's default compiled mode, as `vllm serve` does unless told --enforce-eager: its "
        "compile decorator traces the decoder, and on a CPU its start-up profiles with dummy media, which eager "
        "start-up there skips. Slower to start",
    )
    v.add_argument("--json", help="also write the verdicts as JSON here")
    v.add_argument("--html", help="also write a self-contained HTML page here: the verdicts, each case's images and its prompt's tokens as placed")
    v.set_defaults(func=validate)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worker", nargs=2, metavar=("IMPL", "MODEL_DIR"), required=True)
    parser.add_argument("--stages", required=True)
    parser.add_argument("--cases", required=True, help="JSON list of `parity.Case` keys")
    parser.add_argument("--encoder-rows", type=Path)
    parser.add_argument("--check", required=True, help="JSON of an `EngineCheck`")
    args = parser.parse_args(argv)
    impl, model_dir = args.worker
    worker(impl, model_dir, args.stages.split(","), json.loads(args.cases), args.encoder_rows, EngineCheck(**json.loads(args.check)))


if __name__ == "__main__":
    main()
