"""`hf-bridge validate`: verdicts per stage, exit codes, and a failure it must find.

The pure rules (`hf_bridge/validate/stages.py`) by property; the command end to end on
zoo checkpoints: Mistral3 passes every stage through hf_bridge; Aya Vision, whose HF
class never applies its `logit_scale`, fails decoding on the in-tree backend (which
applies it) with its encoder rows intact, while hf_bridge passes, and vLLM's native
model cannot load the tiny checkpoint, which must read as not checked, never as a pass.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers.media_file_writers import write_clip, write_turned_photo
from helpers.scripts import load_script
from hf_bridge.validate import stages
from hf_bridge.validate.parity import ROUNDING_BUDGET
from hf_bridge.validate.stages import FAIL, NOT_APPLICABLE, NOT_CHECKED, PASS, ItemRange, Verdict

IMAGE, IMAGE_TOKEN = 1, 7


@st.composite
def placed_prompts(draw):
    """A prompt of text (token 3) and image items (`[IMG]` rows plus one padding token
    each side), with HF's ids and types as the processor would give them."""
    ids, types, items = [], [], []
    for _ in range(draw(st.integers(0, 3))):
        ids += [3] * draw(st.integers(0, 3))
        types += [0] * (len(ids) - len(types))
        rows = draw(st.integers(1, 6))
        items.append(ItemRange("image", len(ids), [False, *[True] * rows, False]))
        ids += [8, *[IMAGE_TOKEN] * rows, 9]
        types += [IMAGE] * (rows + 2)
    ids += [3, 4]
    types += [0, 0]
    return ids, types, items


@given(placed_prompts())
def test_matching_processing_has_no_problems(prompt):
    ids, types, items = prompt
    assert stages.processing_problems(ids, types, ids, items, {"image": len(items)} if items else {}, [IMAGE_TOKEN]) == []


@given(placed_prompts(), st.data())
def test_every_departure_is_named(prompt, data):
    ids, types, items = prompt
    expected = {"image": len(items)} if items else {}
    shorter = ids[:-1]
    assert "prompt ids differ" in stages.processing_problems(ids, types, shorter, items, expected, [])[0]
    if items:
        dropped = items[:-1]
        problems = stages.processing_problems(ids, types, ids, dropped, expected, [IMAGE_TOKEN])
        assert any("item(s) placed" in p for p in problems)
        assert any("lie outside every item" in p for p in problems)
        assert any("is_embed marks" in p for p in problems)
        item = data.draw(st.sampled_from(items))
        shifted = [ItemRange("image", item.offset + 1, item.is_embed) if i is item else i for i in items]
        problems = stages.processing_problems(ids, types, ids, shifted, expected, [IMAGE_TOKEN])
        assert any("is_embed marks" in p and "first disagreement" in p for p in problems)


@given(st.lists(st.sampled_from([PASS, FAIL, NOT_CHECKED, NOT_APPLICABLE]), max_size=8))
def test_exit_code_never_passes_what_was_not_checked(outcomes):
    verdicts = [Verdict("hf_bridge", f"c{i}", "decoding", o) for i, o in enumerate(outcomes)]
    code = stages.exit_code(verdicts)
    if FAIL in outcomes:
        assert code == 1
    elif NOT_CHECKED in outcomes or PASS not in outcomes:  # all n/a checked nothing
        assert code == 2
    else:
        assert code == 0


@given(st.lists(st.sampled_from([PASS, FAIL, NOT_CHECKED, NOT_APPLICABLE]), max_size=8))
def test_the_verdicts_a_summary_names_are_every_one_not_passed_in_order(outcomes):
    """The sweeps' tables name a case's failed or unchecked verdicts first, else its n/a ones."""
    verdicts = [Verdict("hf_bridge", f"c{i}", "decoding", o) for i, o in enumerate(outcomes)]
    failed, unrun = stages.not_passed(iter(verdicts))
    assert failed == [v for v in verdicts if v.outcome in (FAIL, NOT_CHECKED)]
    assert unrun == [v for v in verdicts if v.outcome == NOT_APPLICABLE]
    assert stages.brief(" a\n  b   c ", 4) == "a b "


@given(st.lists(st.sampled_from([PASS, FAIL, NOT_CHECKED, NOT_APPLICABLE]), min_size=3, max_size=3))
def test_a_case_cell_names_each_stage_not_passed_under_its_own_outcome(outcomes):
    """The tables of mixed modalities and media lengths give a case one cell. A stage not
    checked beside one that failed must not read as failed too, nor a pass hide an n/a."""
    verdicts = [Verdict("hf_bridge", "user", stage, o, f"{stage} said\nwhy") for stage, o in zip(stages.STAGES, outcomes)]
    cell = stages.case_cell(verdicts, 40)
    failed = [v for v in verdicts if v.outcome in (FAIL, NOT_CHECKED)]
    if failed:
        named, cause = cell.split("; ")
        read, waiting = [], []  # "processing, encoder fail, decoding not checked": an outcome closes a run
        for part in named.split(", "):
            stage, _, outcome = part.partition(" ")
            waiting.append(stage)
            if outcome:
                read += [(s, outcome) for s in waiting]
                waiting = []
        assert read == [(v.stage, v.outcome) for v in failed] and not waiting
        assert cause == f"{failed[0].stage}: {failed[0].stage} said why"
    elif NOT_APPLICABLE in outcomes:
        first = next(v for v in verdicts if v.outcome == NOT_APPLICABLE)
        assert cell == f"n/a: transformers cannot run it ({first.stage}: {first.stage} said why)"
    else:
        assert cell == PASS
    mixed = [Verdict("hf_bridge", "user", "encoder", FAIL, "rows differ"),
             Verdict("hf_bridge", "user", "decoding", NOT_CHECKED, "the engine stopped")]
    assert stages.case_cell(mixed, 40) == "encoder fail, decoding not checked; encoder: rows differ"
    same = [Verdict("hf_bridge", "user", s, FAIL, "vLLM's processor raised") for s in stages.STAGES]
    assert stages.case_cell(same, 12) == "processing, encoder, decoding fail; processing: vLLM's proce"
    assert stages.first_of(mixed, "not passed", 4) == "2 verdict(s) not passed, first user encoder: fail: rows"


REFUSED = "transformers: RuntimeError: The size of tensor a (2) must match the size of tensor b (0) at non-singleton dimension 1"


def test_a_stage_transformers_could_run_in_no_case_was_compared_with_nothing():
    """A checkpoint transformers itself cannot run (MiMo-V2-Flash shrunk to 2 query heads over
    4 key heads) passed its image prompts' processing, every encoder and decoding verdict
    n/a, and validate said "every stage checked passed" (exit 0): the table of decoders
    behind a tower counted it a pass for both backends. Now exit 2, naming the stages."""
    from hf_bridge.validate.report import Report

    verdicts = [Verdict("hf_bridge", "text_only", "processing", NOT_APPLICABLE, "no media"),
                Verdict("hf_bridge", "text_only", "decoding", NOT_APPLICABLE, REFUSED),
                Verdict("hf_bridge", "one_image", "processing", PASS),
                Verdict("hf_bridge", "one_image", "encoder", NOT_APPLICABLE, REFUSED),
                Verdict("hf_bridge", "one_image", "decoding", NOT_APPLICABLE, REFUSED)]
    assert stages.compared_with_nothing(verdicts) == [("hf_bridge", "decoding"), ("hf_bridge", "encoder")]
    assert stages.exit_code(verdicts) == 2
    assert Report("m", verdicts).summary == (
        "a stage could not be checked (reason above): transformers itself could not run any case of hf_bridge "
        "decoding, hf_bridge encoder, so the engine's side was compared with nothing")


def test_a_case_transformers_refuses_beside_one_it_runs_still_passes():
    """PaliGemma's processor refuses text alone: its images decode, so the stage was compared.
    A stage n/a for want of media was never transformers' to run."""
    verdicts = [Verdict("hf_bridge", "text_only", "processing", NOT_APPLICABLE, "no media"),
                Verdict("hf_bridge", "text_only", "encoder", NOT_APPLICABLE, "no media"),
                Verdict("hf_bridge", "text_only", "decoding", NOT_APPLICABLE,
                        "transformers: ValueError: `images` are expected as arguments to a `PaliGemmaProcessor` instance."),
                Verdict("hf_bridge", "one_image", "decoding", PASS)]
    assert stages.compared_with_nothing(verdicts) == []
    assert stages.exit_code(verdicts) == 0
    assert stages.exit_code([Verdict("hf_bridge", "text_only", "encoder", NOT_APPLICABLE, "no media"),
                             Verdict("hf_bridge", "text_only", "decoding", PASS)]) == 0


@pytest.mark.engine
def test_validate_says_a_checkpoint_transformers_cannot_run_was_not_checked(tmp_path):
    """The same, end to end: the LLaVA over MiMo-V2-Flash's decoder with 2 query heads over
    its sliding-window layers' 4 key heads, which transformers' `repeat_kv` cannot group."""
    from hf_bridge.clean_interpreter import CleanCall
    from hf_bridge.zoo.backbones import build_backbone_model

    model_dir = tmp_path / "mimo_v2_flash"
    CleanCall(build_backbone_model, "mimo_v2_flash", model_dir, 0, dict(num_attention_heads=2, num_key_value_heads=2),
              doing="building the LLaVA over MiMo-V2-Flash").result()
    done, report = _validate(model_dir, tmp_path, "--cases", "one_image")
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    assert _outcomes(report) == {("hf_bridge", "one_image", "processing"): PASS,
                                 ("hf_bridge", "one_image", "encoder"): NOT_APPLICABLE,
                                 ("hf_bridge", "one_image", "decoding"): NOT_APPLICABLE}
    assert "transformers itself could not run any case of hf_bridge encoder, hf_bridge decoding" in done.stdout


def _validate(model_dir, tmp_path, *options):
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "hf_bridge.cli", "validate", str(model_dir), "--json", str(report), *options],
        capture_output=True, text=True, timeout=1200,
    )
    return done, json.loads(report.read_text()) if report.exists() else None


def _outcomes(report):
    return {(v["impl"], v["case"], v["stage"]): v["outcome"] for v in report["verdicts"]}


@pytest.fixture(scope="module")
def mistral3_validated(zoo, tmp_path_factory):
    """`hf-bridge validate` on the zoo's Mistral3, every stage and case, with --html."""
    tmp_path = tmp_path_factory.mktemp("mistral3")
    done, report = _validate(zoo("mistral3"), tmp_path, "--html", str(tmp_path / "report.html"))
    return done, report, tmp_path / "report.html"


@pytest.mark.engine
def test_validate_passes_mistral3_through_hf_bridge(mistral3_validated):
    done, report, _ = mistral3_validated
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert _outcomes(report) == {
        ("hf_bridge", "one_image", "processing"): PASS,
        ("hf_bridge", "two_images", "processing"): PASS,
        ("hf_bridge", "text_only", "processing"): NOT_APPLICABLE,
        ("hf_bridge", "one_image", "encoder"): PASS,
        ("hf_bridge", "two_images", "encoder"): PASS,
        ("hf_bridge", "text_only", "encoder"): NOT_APPLICABLE,
        ("hf_bridge", "one_image", "decoding"): PASS,
        ("hf_bridge", "two_images", "decoding"): PASS,
        ("hf_bridge", "text_only", "decoding"): PASS,
        **{("hf_bridge", case, stage): PASS for case in ("odd_aspect", "large_image") for stage in stages.STAGES},
    }
    # 3 rows of 4 and 4 rows of 3 [IMG] positions (test_placeholder_ranges), measured
    assert "[encoder] hf_bridge / two_images: pass: 24 rows x 64: max |diff|" in done.stdout
    assert "every stage checked passed" in done.stdout


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--window-size=1400,2400", "--virtual-time-budget=10000",
]


def _colour_count(picture, rgb) -> int:
    return sum(n for n, colour in picture.getcolors(maxcolors=1 << 24) if colour[:3] == rgb)


@pytest.mark.engine
@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="needs Debian's chromium, which .ci/run installs")
def test_html_report_shows_the_token_strip_and_the_images(mistral3_validated, tmp_path):
    from PIL import Image

    from hf_bridge.display import EMBED, KIND_COLOURS, PADDING
    from hf_bridge.validate.report import OUTCOME_COLOURS

    _, _, page = mistral3_validated
    text = page.read_text()
    assert "http://" not in text and "https://" not in text and "<script" not in text  # self-contained
    assert text.count('<img alt="two_images image') == 2 and text.count('class="strip"') == 4  # every case with media

    shot = tmp_path / "report.png"
    done = subprocess.run(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert shot.exists(), done.stderr[-2000:]
    picture = Image.open(shot).convert("RGB")
    rgb = {name: tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5)) for name, colour in {**KIND_COLOURS, "pass": OUTCOME_COLOURS["pass"]}.items()}
    counts = {name: _colour_count(picture, colour) for name, colour in rgb.items()}
    distinct = len(picture.getcolors(maxcolors=1 << 24))
    seen = f"pixels per colour {counts}, {distinct} distinct colours; chromium: {done.stderr[-1500:]}"
    # the strip: embedding positions and [IMG_BREAK]/[IMG_END] grid padding, in their colours
    assert counts[EMBED] > 2000 and counts[PADDING] > 500, seen
    assert counts["pass"] > 2000, seen  # the verdict cells
    # the images: textured noise, tens of thousands of distinct colours; text and flat fills have few
    assert distinct > 10_000, seen


@pytest.mark.engine
def test_validate_stages_narrow_what_is_run(zoo, tmp_path):
    done, report = _validate(zoo("mistral3"), tmp_path, "--stages", "processing", "--cases", "one_image")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert _outcomes(report) == {("hf_bridge", "one_image", "processing"): PASS}


@pytest.mark.engine
def test_validate_finds_the_in_tree_logit_scale_failure(zoo, tmp_path):
    done, report = _validate(zoo("aya_vision"), tmp_path, "--impl", "all", "--cases", "one_image")
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    outcomes = _outcomes(report)
    assert outcomes[("hf_bridge", "one_image", "processing")] == PASS
    assert outcomes[("hf_bridge", "one_image", "decoding")] == PASS
    assert outcomes[("intree", "one_image", "decoding")] == FAIL
    detail = next(v["detail"] for v in report["verdicts"] if (v["impl"], v["stage"]) == ("intree", "decoding"))
    assert "log-probs differ" in detail
    # the encoder's rows agree on both backends: the failure lies after the encoder
    assert outcomes[("hf_bridge", "one_image", "encoder")] == outcomes[("intree", "one_image", "encoder")] == PASS
    # every stage of native is reported, and none as a pass
    assert {stage for (impl, _, stage) in outcomes if impl == "native"} == set(stages.STAGES)
    assert PASS not in {o for (impl, _, _), o in outcomes.items() if impl == "native"}
    assert "[decoding] intree / one_image: fail" in done.stdout


@pytest.mark.engine
def test_validate_in_bfloat16_finds_the_logit_scale_failure_the_top_5_rule_passes(zoo, tmp_path):
    """`--dtype bfloat16`, as vLLM serves most checkpoints: the in-tree backend's Aya Vision
    keeps every greedy token (a `logit_scale` does not move the argmax), so vLLM's top-5
    rule alone passes it; its log-probs, 5.65 apart, are far beyond 3 times transformers'
    own bfloat16 rounding, and hf_bridge's are within it. Where bfloat16 runs on other
    kernels (an AMD EPYC without AMX), hf_bridge's first generated token is a near-tie,
    -2.202 against transformers' -2.205, each in the other's top 5; the prompt's log-probs
    are still compared, and within it."""
    done, report = _validate(zoo("aya_vision"), tmp_path, "--impl", "all", "--cases", "one_image", "--dtype", "bfloat16")
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    verdicts = {(v["impl"], v["stage"]): v for v in report["verdicts"]}
    assert verdicts["hf_bridge", "processing"]["outcome"] == verdicts["hf_bridge", "decoding"]["outcome"] == PASS
    assert re.fullmatch(r"in bfloat16, against transformers in bfloat16: (near-tie at generated position \d+: [^;]*; not compared past it; )?"
                        r"max \|log-prob difference\| \S+ where compared \(tolerance .*from its float32 ones\)",
                        verdicts["hf_bridge", "decoding"]["detail"]), verdicts["hf_bridge", "decoding"]["detail"]
    assert verdicts["intree", "decoding"]["outcome"] == FAIL
    assert re.fullmatch(r"log-probs differ by up to 5\.\d\de\+00 where compared \(tolerance .*from its float32 ones\)",
                        verdicts["intree", "decoding"]["detail"]), verdicts["intree", "decoding"]["detail"]
    from hf_bridge.validate.command import ROWS_IN_FLOAT32_ONLY as encoder

    assert (verdicts["hf_bridge", "encoder"]["outcome"], verdicts["hf_bridge", "encoder"]["detail"]) == (NOT_APPLICABLE, encoder)
    assert PASS not in {v["outcome"] for (impl, _), v in verdicts.items() if impl == "native"}


@pytest.mark.engine
@pytest.mark.slow
def test_validate_checks_the_model_sharded_over_two_tensor_parallel_workers(zoo, tmp_path, monkeypatch):
    """`--tensor-parallel-size 2`, as a large model is served: every stage passes on LLaVA,
    the rows taken from the first worker, and the verdict says the engine's own worker count."""
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)  # validate gives each worker its share of the cores
    done, report = _validate(zoo("llava"), tmp_path, "--cases", "one_image", "--tensor-parallel-size", "2")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    verdicts = {v["stage"]: v for v in report["verdicts"]}
    assert {stage: v["outcome"] for stage, v in verdicts.items()} == {stage: PASS for stage in stages.STAGES}
    assert verdicts["decoding"]["detail"] == "over 2 tensor-parallel workers"


@pytest.mark.engine
def test_validate_checks_the_model_in_vllms_default_compiled_mode(zoo, tmp_path):
    """`--compiled`, as `vllm serve` runs a model unless told to be eager: every stage
    passes, the rows taken ahead of the compiled decoder, and the verdict says so from the
    engine's own config (an engine left eager would not)."""
    done, report = _validate(zoo("llava"), tmp_path, "--cases", "one_image", "--compiled")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    verdicts = {v["stage"]: v for v in report["verdicts"]}
    assert {stage: v["outcome"] for stage, v in verdicts.items()} == {stage: PASS for stage in stages.STAGES}
    assert verdicts["decoding"]["detail"] == "compiled"
    assert verdicts["encoder"]["detail"].startswith("16 rows x 64")


def test_workers_on_a_cpu_get_their_share_of_the_cores(monkeypatch):
    """vLLM's own CPU binding gives each worker a NUMA node, and refuses a one-node machine."""
    from hf_bridge.validate.engine import cpu_environment

    cores = sorted(os.sched_getaffinity(0))
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    cpu_environment(1)
    assert "VLLM_CPU_OMP_THREADS_BIND" not in os.environ
    cpu_environment(2)
    shares = [[int(c) for c in share.split(",")] for share in os.environ["VLLM_CPU_OMP_THREADS_BIND"].split("|")]
    assert len(shares) == 2 and all(shares) and set().union(*shares) <= set(cores)
    assert sorted(c for share in shares for c in share) == cores[: len(cores) // 2 * 2] or len(cores) == 1
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|0")
    cpu_environment(2)
    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "0|0"  # the user's own binding stands


@pytest.mark.engine
def test_validate_compares_as_many_tokens_as_asked(zoo, tmp_path):
    """`--max-tokens 24`: both sides generate 24 greedy tokens and decoding compares all of
    them (the reference cached for the run holds 24); 8 stays the default, its cache keys as before."""
    import dataclasses

    from hf_bridge.validate import command, parity
    from hf_bridge.validate.reference import missing_references, references

    model_dir = zoo("llava")
    done, report = _validate(model_dir, tmp_path, "--cases", "one_image", "--stages", "decoding", "--max-tokens", "24")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert _outcomes(report) == {("hf_bridge", "one_image", "decoding"): PASS}
    (case,) = command.selected_cases(model_dir, ["one_image"], max_tokens=24)
    standard = parity.standard_cases(64)["one_image"]
    assert case == dataclasses.replace(standard, new_tokens=24) and standard.key() == dataclasses.replace(standard, new_tokens=8).key()
    assert missing_references(model_dir, [case]) == {}, "the run computed and cached the 24-token reference"
    (reference,) = references(model_dir, [case])
    assert len(reference.tokens) == len(reference.token_logprobs) == 24 and not parity.is_degenerate(reference.tokens)
    with pytest.raises(SystemExit, match=re.escape("--max-tokens must be a whole number of tokens, at least 1; got 0")):
        command.selected_cases(model_dir, ["one_image"], max_tokens=0)


@pytest.mark.parametrize("options, message", [
    (dict(lenient=True), "--lenient is a float32 rule, and --dtype bfloat16 has its own"),
    (dict(exact_reference=True), "--exact-reference is a float32 rule, and --dtype bfloat16 has its own"),
    (dict(dtype="float16"), "dtype 'float16' is not one validate checks; it checks float32, bfloat16"),
    (dict(dtype="float32", tensor_parallel_size=0), "--tensor-parallel-size must be a whole number of workers, at least 1; got 0"),
])
def test_engine_checks_that_cannot_run_are_refused(zoo, options, message):
    from hf_bridge.validate.command import run

    with pytest.raises(SystemExit, match=re.escape(f"hf-bridge validate: {message}")):
        run(zoo("llava"), **{"dtype": "bfloat16", **options})


@pytest.mark.engine
def test_validate_names_a_processor_that_announces_more_than_the_tower_gives(zoo, tmp_path):
    """LLaVA's processor told one more token per image than its CLIP tower returns: the
    processing stage names the counts, and nothing crashes (transformers' own forward
    refuses the case, so encoder and decoding are n/a, text still decodes)."""
    from hf_bridge.zoo.variant import variant

    assert json.loads((zoo("llava") / "processor_config.json").read_text())["num_additional_image_tokens"] == 1
    model_dir = variant(zoo("llava"), tmp_path / "llava-announces-one-more", processor={"num_additional_image_tokens": 2})

    done, report = _validate(model_dir, tmp_path, "--cases", "one_image,text_only")

    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    outcomes = _outcomes(report)
    assert outcomes[("hf_bridge", "one_image", "processing")] == FAIL
    detail = next(v["detail"] for v in report["verdicts"] if (v["case"], v["stage"]) == ("one_image", "processing"))
    assert "vLLM's items announce 17 embedding position(s), the HF model's get_*_features returns 16" in detail
    assert outcomes[("hf_bridge", "one_image", "decoding")] == NOT_APPLICABLE
    assert outcomes[("hf_bridge", "text_only", "decoding")] == PASS


def test_last_exception_keeps_the_lines_that_continue_it():
    stderr = (
        "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
        "  Value error, Model architecture X is not supported\n  For further information visit ...\n"
    )
    assert stages.last_exception(stderr) == (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig ... "
        "Value error, Model architecture X is not supported ... For further information visit ..."
    )
    ranked = "[rank0]:   File \"x.py\", line 448\n[rank0]: ValueError: no module named 'vision_tower.embeddings'\nLoading shards:   0%\n"
    assert stages.last_exception(ranked).startswith("ValueError: no module named 'vision_tower.embeddings' ... Loading shards")
    assert stages.last_exception("just a line\n") == "just a line"
    assert stages.last_exception("") == "no output"
    # a tensor-parallel worker logs the root cause (to stdout), the engine wraps it (stderr):
    # the report named a warning printed after the wrapper, which no pattern took for an exception
    worker = ("(Worker_TP1 pid=23629) ERROR 11-30 18:27:15 [multiproc_executor.py:953] ValueError: "
              "tensor_parallel_size=2 cannot serve this lfm2_vl model. Use tensor_parallel_size=1.\n"
              "W1130 18:28:26.426000 24243 torch/_opaque_base.py:6] torch._opaque_base is deprecated\n")
    engine = ("Exception: WorkerProc initialization failed due to an exception in a background process. See stack "
              "trace for root cause.\nresource_tracker.py:254: UserWarning: resource_tracker: There appear to be 1 leaked\n"
              "  warnings.warn('resource_tracker: There appear to be %d '\n")
    assert stages.last_exception(f"{worker}\n{engine}") == (
        "ValueError: tensor_parallel_size=2 cannot serve this lfm2_vl model. Use tensor_parallel_size=1.")
    assert stages.last_exception(engine).startswith("Exception: WorkerProc initialization failed")


def test_report_shows_itself_as_text_and_html():
    from hf_bridge.validate.report import OUTCOME_COLOURS, Report

    verdicts = [
        Verdict("hf_bridge", "one_image", "processing", PASS),
        Verdict("intree", "one_image", "decoding", FAIL, "greedy tokens differ: [1] vs [2]"),
        Verdict("hf_bridge", "audio", "decoding", PASS),
    ]
    report = Report("/m", verdicts, images={"one_image": [b"png"]}, strips={("hf_bridge", "one_image"): "<i>strip</i>"},
                    audios={"audio": [b"wav"]})
    assert report.exit_code == 1
    assert repr(report).endswith("a stage failed (named above)")
    assert "[decoding] intree / one_image: fail: greedy tokens differ" in repr(report)
    shown = report._repr_html_()
    assert OUTCOME_COLOURS[FAIL] in shown and OUTCOME_COLOURS[PASS] in shown
    assert 'src="data:image/png;base64,cG5n"' in shown and "<i>strip</i>" in shown
    assert '<audio controls title="audio clip 0" src="data:audio/wav;base64,d2F2"></audio>' in shown
    assert "no media" not in shown.split("<h3>case audio</h3>")[1]
    assert json.loads(report.to_json())["exit_code"] == 1
    assert report.page().startswith("<!DOCTYPE html>")


def _write_media(directory):
    """Two images of different sizes and a 4-frame video, as files a user would have."""
    from hf_bridge.validate.parity import test_image

    test_image(90, 60, seed=3).save(directory / "wide.png")
    test_image(50, 80, seed=4).save(directory / "tall.jpg", quality=95)
    write_clip(directory / "clip.mp4", fps=2, num_frames=4)


def test_user_cases_from_files_and_jsonl(zoo, tmp_path):
    from hf_bridge.validate import command, parity

    _write_media(tmp_path)
    (tmp_path / "cases.jsonl").write_text(
        json.dumps({"name": "pair", "prompt": "Which is taller?", "images": ["wide.png", "tall.jpg"]}) + "\n\n"
        + json.dumps({"name": "clip", "videos": ["clip.mp4"]}) + "\n"
    )
    model_dir = zoo("qwen2_vl")
    cases = command.selected_cases(model_dir, None, "Look.", [str(tmp_path / "wide.png")], [], tmp_path / "cases.jsonl")
    assert [(c.name, c.num_images, c.num_videos, c.text) for c in cases] == [
        ("user", 1, 0, "Look."), ("pair", 2, 0, "Which is taller?"), ("clip", 0, 1, parity.Case.text)
    ]
    pair = cases[1]
    assert [im.size for im in pair.images] == [(90, 60), (50, 80)]
    assert cases[2].videos[0].shape == (4, 112, 112, 3)
    assert parity.Case(**json.loads(pair.key())) == pair  # as a worker rebuilds it
    # the standard cases join only when named
    named = command.selected_cases(model_dir, ["text_only"], None, [str(tmp_path / "wide.png")])
    assert [c.name for c in named] == ["user", "text_only"]
    # a changed file is a new case for the reference cache
    before = pair.key()
    parity.test_image(90, 60, seed=5).save(tmp_path / "wide.png")
    assert command.cases_from_file(tmp_path / "cases.jsonl")[0].key() != before


@pytest.mark.parametrize(
    "line, message",
    [
        ({"name": "x", "images": ["missing.png"]}, "cases.jsonl:1: no such media file"),
        ({"name": "x", "image": ["a.png"]}, "cases.jsonl:1: unknown key(s) image; keys are name, prompt, images, videos, audios, mm_processor_kwargs"),
        ({"name": "x", "audios": ["noise.wav"]}, "noise.wav: not a WAV file scipy reads (File format b'nois' not understood"),
        ({"name": "x", "audios": ["talk.mp3"]}, "talk.mp3: only WAV files are read without soundfile; convert it to WAV"),
        ({"name": "x", "audios": ["talk.ogg"]}, "talk.ogg: not an audio file soundfile reads (Error opening"),
        ({"name": "x", "images": ["noise.png"]}, "noise.png: not an image file PIL reads (cannot identify image file"),
        ({"name": "x", "images": ["cut.png"]}, "cut.png: not an image file PIL reads (image file is truncated)"),
        ({"name": "x", "videos": ["noise.mp4"]}, "noise.mp4: OpenCV read no frames (not a video, or a codec it lacks)"),
        ({"name": "x", "mm_processor_kwargs": ["size"]}, "cases.jsonl:1: mm_processor_kwargs must be a JSON object of the processor's keyword arguments"),
    ],
)
def test_bad_user_cases_are_refused_with_their_line(tmp_path, monkeypatch, line, message):
    from hf_bridge.validate import command
    from hf_bridge.validate.parity import test_image

    (tmp_path / "noise.wav").write_bytes(b"noise, not RIFF")
    (tmp_path / "talk.mp3").write_bytes(b"ID3")
    (tmp_path / "talk.ogg").write_bytes(b"OggS, cut short")
    (tmp_path / "noise.png").write_bytes(b"noise, not PNG")
    (tmp_path / "noise.mp4").write_bytes(b"noise, not MP4")
    whole = io.BytesIO()
    test_image(64, 64, seed=1).save(whole, format="PNG")
    (tmp_path / "cut.png").write_bytes(whole.getvalue()[: len(whole.getvalue()) // 2])
    if line.get("audios") == ["talk.mp3"]:
        monkeypatch.setitem(sys.modules, "soundfile", None)  # a machine without it
    (tmp_path / "cases.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(SystemExit, match=re.escape(message)):
        command.cases_from_file(tmp_path / "cases.jsonl")


@pytest.mark.parametrize("dtype", ["int16", "uint8", "int32", "float32"])
def test_an_audio_file_is_read_as_vllm_reads_and_resamples_a_clip(tmp_path, dtype):
    """A stereo WAV at 22.05 kHz, as PCM of each width scipy writes or as float: its
    channels averaged, scaled to [-1, 1] and resampled to the feature extractor's rate
    exactly as vLLM's scipy resampler does; a file already at that rate is kept sample
    for sample. The case keeps the file through its key, as a worker rebuilds it."""
    import numpy as np
    from scipy.io import wavfile
    from vllm.multimodal.audio import resample_audio_scipy

    from hf_bridge.validate import parity

    left, right = parity.test_audio(seconds=0.5, seed=1, sampling_rate=22050), parity.test_audio(seconds=0.5, seed=2, sampling_rate=22050)
    stereo = np.stack([left, right], axis=1).clip(-1, 1)
    if dtype == "float32":
        stored, full_scale = stereo.astype(np.float32), stereo.astype(np.float32)
    else:
        info = np.iinfo(dtype)
        half = (info.max - info.min + 1) / 2
        offset = half if info.min == 0 else 0
        stored = np.round(stereo * (half - 1) + offset).astype(dtype)
        full_scale = (stored.astype(np.float64) - offset) / half
    wavfile.write(tmp_path / "clip.wav", 22050, stored)
    case = parity.Case.from_files("mine", "Transcribe.", audios=[str(tmp_path / "clip.wav")])
    assert (case.num_audios, case.media_counts) == (1, {"audio": 1})
    (clip,) = case.audios(16000)
    expected = resample_audio_scipy(full_scale.mean(axis=1), orig_sr=22050, target_sr=16000)
    assert clip.dtype == np.float32 and clip.shape == expected.shape == (8000,)
    np.testing.assert_allclose(clip, expected, atol=1e-6)
    assert abs(clip).max() > 0.3  # scaled to full range, not to the type's raw values
    wavfile.write(tmp_path / "at_rate.wav", 16000, stored)
    (kept,) = parity.Case.from_files("kept", "Transcribe.", audios=[str(tmp_path / "at_rate.wav")]).audios(16000)
    np.testing.assert_allclose(kept, full_scale.mean(axis=1), atol=1e-6)
    assert parity.Case(**json.loads(case.key())) == case


def test_processor_kwargs_reach_both_processors_in_every_case_that_sets_none(zoo, tmp_path):
    """`--mm-processor-kwargs` goes to every case but one of the cases file that sets its
    own; a case keeps them through its key (a worker rebuilds it, the reference cache
    tells it apart), transformers' processor gets them in its call, vLLM's per request."""
    from transformers import AutoProcessor

    from hf_bridge.validate import command, parity

    _write_media(tmp_path)
    own = {"size": {"shortest_edge": 3136, "longest_edge": 3136}}
    (tmp_path / "cases.jsonl").write_text(json.dumps({"name": "small", "images": ["wide.png"], "mm_processor_kwargs": own}) + "\n")
    larger = {"size": {"shortest_edge": 12544, "longest_edge": 50176}}
    model_dir = zoo("qwen2_vl")
    cases = command.selected_cases(model_dir, ["one_image"], None, cases_file=tmp_path / "cases.jsonl", mm_processor_kwargs=larger)
    assert [(c.name, c.mm_processor_kwargs) for c in cases] == [("small", own), ("one_image", larger)]
    assert [parity.Case(**json.loads(c.key())) for c in cases] == cases
    assert cases[1].key() != parity.standard_cases(command.IMAGE_SIDE)["one_image"].key()
    processor = AutoProcessor.from_pretrained(model_dir)
    patches = [parity.hf_inputs(processor, c)["image_grid_thw"].prod().item() for c in cases]
    default = [parity.hf_inputs(processor, dataclasses.replace(c, processor_kwargs=""))["image_grid_thw"].prod().item() for c in cases]
    assert patches == [8, 80] and default == [24, 24], (patches, default)  # at most 3136 pixels; at least 12544
    assert [parity.vllm_request(processor, c)["mm_processor_kwargs"] for c in cases] == [own, larger]
    assert "mm_processor_kwargs" not in parity.vllm_request(processor, parity.standard_cases(64)["one_image"])


@pytest.mark.parametrize("text, message", [
    ("{do_pan_and_scan: true}", "Expecting property name enclosed in double quotes"),
    ('["do_pan_and_scan"]', "mm_processor_kwargs must be a JSON object of the processor's keyword arguments"),
])
def test_bad_processor_kwargs_are_refused_on_the_command_line(text, message):
    from hf_bridge.validate import command

    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
        command.json_object(text)


@pytest.mark.engine
def test_validate_with_processor_kwargs_checks_what_they_change(zoo, tmp_path):
    """Gemma3's pan-and-scan is off unless the processor call turns it on (its processor's
    own defaults override the saved image processor): with it, a wide image is the image
    and two crops, each its own run of image tokens between text inside one item, and
    hf_bridge's placement and rows match transformers'."""
    pan_and_scan = load_script("processor_settings").PAN_AND_SCAN  # small crops for the zoo's small images
    done, report = _validate(zoo("gemma3"), tmp_path, "--cases", "odd_aspect", "--stages", "processing,encoder",
                             "--mm-processor-kwargs", json.dumps(pan_and_scan))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert _outcomes(report) == {("hf_bridge", "odd_aspect", s): PASS for s in ("processing", "encoder")}
    (encoder,) = [v for v in report["verdicts"] if v["stage"] == "encoder"]
    assert encoder["detail"].startswith("12 rows x"), encoder  # 3 x 4 tokens; without pan-and-scan 4


@pytest.mark.engine
def test_cases_after_two_that_raised_run_on_a_sound_engine(zoo, tmp_path):
    """The in-tree backend cannot split Idefics3's untiled images (its own error, kept as
    the verdict); each raise rebuilds the in-process engine, and the text case after two of
    them passes. (The engine that raised used to be freed only by the collector, after its
    successor started, tearing down the successor's parallel state: "pipeline model
    parallel group is not initialized".)"""
    done, report = _validate(zoo("idefics3"), tmp_path, "--impl", "intree", "--cases", "one_image,two_images,text_only",
                             "--stages", "encoder,decoding", "--mm-processor-kwargs", '{"do_image_splitting": false}')
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    outcomes = _outcomes(report)
    for case in ("one_image", "two_images"):
        assert outcomes[("intree", case, "decoding")] == FAIL
        detail = next(v["detail"] for v in report["verdicts"] if (v["case"], v["stage"]) == (case, "decoding"))
        assert "vLLM raised ValueError: Idefics3Processor returned 1 row(s) of image data" in detail, detail
    assert outcomes[("intree", "text_only", "decoding")] == PASS


def test_media_the_processor_does_not_take_is_refused(zoo, tmp_path):
    from scipy.io import wavfile

    from hf_bridge.validate import command, parity

    _write_media(tmp_path)
    with pytest.raises(SystemExit, match="case 'user' has video input, which this checkpoint's processor does not take"):
        command.selected_cases(zoo("mistral3"), videos=[str(tmp_path / "clip.mp4")])
    wavfile.write(tmp_path / "clip.wav", 16000, parity.test_audio())
    with pytest.raises(SystemExit, match="case 'user' has audio input, which this checkpoint's processor does not take"):
        command.selected_cases(zoo("mistral3"), audios=[str(tmp_path / "clip.wav")])
    with pytest.raises(SystemExit, match=re.escape("hf-bridge validate: no such media file: ") + ".*missing.wav"):
        command.selected_cases(zoo("mistral3"), audios=[str(tmp_path / "missing.wav")])


@pytest.mark.engine
def test_validate_runs_the_users_own_images(zoo, tmp_path):
    """The user's two files through every stage, decoding by the lenient rule, vLLM's own
    tests', which reports the largest log-prob difference it found."""
    _write_media(tmp_path)
    done, report = _validate(
        zoo("mistral3"), tmp_path, "--image", str(tmp_path / "wide.png"), "--image", str(tmp_path / "tall.jpg"),
        "--prompt", "Which one is taller?", "--lenient",
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert _outcomes(report) == {("hf_bridge", "user", stage): PASS for stage in stages.STAGES}
    assert "[decoding] hf_bridge / user: pass: lenient rule: max |log-prob difference|" in done.stdout


def _write_photo_and_transparent_images(directory):
    """A JPEG whose EXIF says to turn it a quarter (as phones save portraits), and
    images with transparency in each form a file holds it: RGBA, gray with alpha, a
    palette's transparent colour."""
    import numpy as np
    from PIL import Image

    from hf_bridge.validate.parity import test_image

    write_turned_photo(directory / "portrait.jpg")
    pixels = np.asarray(test_image(70, 50, seed=6).convert("RGBA")).copy()
    pixels[..., 3] = np.random.default_rng(6).integers(0, 256, (50, 70))
    pixels[0, 0, 3] = 0
    Image.fromarray(pixels, "RGBA").save(directory / "logo.png")
    Image.fromarray(pixels, "RGBA").convert("LA").save(directory / "gray_alpha.png")
    Image.fromarray(pixels[..., :3]).convert("P").save(directory / "palette.png", transparency=3)
    return ["portrait.jpg", "logo.png", "gray_alpha.png", "palette.png"]


def test_user_images_are_read_as_vllm_decodes_them(tmp_path):
    """Both sides of a check get an image file as vLLM's `ImageMediaIO` decodes it (as it
    serves an `image_url`): turned by its EXIF orientation, transparency over white. vLLM's
    parser then changes nothing, so the HF processor and vLLM's see the same pixels."""
    from pathlib import Path

    import numpy as np
    from vllm.multimodal.image import convert_image_mode, normalize_image
    from vllm.multimodal.media.image import ImageMediaIO

    from hf_bridge.media_files import read_image

    names = _write_photo_and_transparent_images(tmp_path)
    for name in names:
        ours, vllms = read_image(str(tmp_path / name)), ImageMediaIO().load_file(Path(tmp_path / name)).media
        assert ours.mode == "RGB" and np.array_equal(np.asarray(ours), np.asarray(vllms)), name
        parsed = convert_image_mode(normalize_image(ours), "RGB")  # what vLLM's parser does to a PIL image
        assert np.array_equal(np.asarray(parsed), np.asarray(ours)), name
    assert read_image(str(tmp_path / "portrait.jpg")).size == (60, 120)
    assert read_image(str(tmp_path / "logo.png")).getpixel((0, 0)) == (255, 255, 255)


def test_a_user_video_is_read_with_its_own_frame_rate_as_vllm_reads_it(zoo, tmp_path):
    """Every frame and the file's metadata, as vLLM's OpenCV loader gives them with
    `num_frames=-1`; a processor that samples frames by time gets the file's 30 fps, where
    validate had claimed 2 for every file and so read a 1.5 s clip as 22.5 s."""
    from pathlib import Path

    import numpy as np
    from vllm.multimodal.media.image import ImageMediaIO
    from vllm.multimodal.media.video import VideoMediaIO

    from hf_bridge import media_files
    from hf_bridge.validate import command, parity

    write_clip(tmp_path / "clip.mp4", fps=30, num_frames=45)
    frames, metadata = media_files.read_video(str(tmp_path / "clip.mp4"))
    vllms_frames, vllms_metadata = VideoMediaIO(ImageMediaIO(), num_frames=-1).load_file(Path(tmp_path / "clip.mp4")).media
    assert np.array_equal(frames, vllms_frames)
    assert metadata == {k: v for k, v in vllms_metadata.items() if k != "do_sample_frames"}
    assert (metadata["fps"], metadata["duration"], metadata["total_num_frames"]) == (30.0, 1.5, 45)

    (case,) = command.selected_cases(zoo("qwen2_vl"), None, "What happens?", videos=[str(tmp_path / "clip.mp4")])
    processor = _sampling_by_time(zoo("qwen2_vl"))
    assert parity.media_kwargs(processor, case)["video_metadata"] == [metadata]
    _, served = parity.vllm_request(processor, case)["multi_modal_data"]["video"]
    assert served == {**metadata, "do_sample_frames": True}


def _sampling_by_time(model_dir):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(model_dir, do_sample_frames=True, fps=2)


@pytest.mark.engine
def test_validate_checks_a_turned_photo_and_transparent_images_as_served(zoo, tmp_path):
    """A phone photo reached vLLM turned by its EXIF orientation and transformers not:
    Qwen2-VL's greedy tokens differed from the second, a failure that was the harness's."""
    names = _write_photo_and_transparent_images(tmp_path)
    images = [option for name in names for option in ("--image", str(tmp_path / name))]
    done, report = _validate(zoo("qwen2_vl"), tmp_path, *images, "--prompt", "What is it?", "--stages", "processing,decoding")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert _outcomes(report) == {("hf_bridge", "user", stage): PASS for stage in ("processing", "decoding")}


def test_media_held_in_memory_are_written_as_vllm_parses_them(tmp_path, monkeypatch):
    """A notebook's items (`run(images=[Image.open(...)])`): each file holds the item as
    vLLM's parser hands it to the HF processor, is named by its content (a rerun finds its
    references cached), and what is not an item is refused naming the fix."""
    import numpy as np
    import torch
    from PIL import Image
    from vllm.multimodal.image import convert_image_mode, normalize_image

    from hf_bridge.probes import video_metadata
    from hf_bridge.validate import media_in_memory
    from hf_bridge.validate.parity import Case

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    names = _write_photo_and_transparent_images(tmp_path)
    held = [Image.open(tmp_path / name) for name in names]  # the photo still carries its orientation tag
    pixels = np.asarray(held[1])[..., :3].copy()
    frames = [Image.fromarray(np.full((16, 24, 3), i * 40, np.uint8)) for i in range(3)]
    metadata = {"fps": 3.0, "duration": 1.0, "total_num_frames": np.int64(3), "frames_indices": np.arange(3)}
    clip = np.sin(np.arange(800) / 7).astype(np.float64) / 2
    images, videos, audios = media_in_memory.as_files(
        [*held, pixels, str(tmp_path / "logo.png")], [frames, (np.stack(frames), metadata)], [(clip, 8000), clip], lambda: 4000)
    case = Case.from_files("user", "What is it?", images, videos, audios)
    for got, item in zip(case.images, held):
        parsed = convert_image_mode(normalize_image(item), "RGB")  # what vLLM's parser does to a PIL image
        assert got.mode == "RGB" and np.array_equal(np.asarray(got), np.asarray(parsed))
    assert case.images[0].size == (60, 120)
    assert np.array_equal(np.asarray(case.images[len(held)]), pixels) and images[-1] == str(tmp_path / "logo.png")
    (frames_0, metadata_0), (frames_1, metadata_1) = case.videos_with_metadata()
    assert np.array_equal(frames_0, np.array(frames)) and np.array_equal(frames_1, np.array(frames))
    assert metadata_0 == video_metadata(3) and metadata_1 == {**metadata, "total_num_frames": 3, "frames_indices": [0, 1, 2]}
    assert audios[0] != audios[1]  # the same samples at two rates
    assert np.array_equal(case.audios(8000)[0], clip.astype(np.float32))
    assert np.array_equal(Case.from_files("user", "", audios=audios[1:]).audios(4000)[0], clip.astype(np.float32))
    assert media_in_memory.as_files(held[0]) == (images[:1], [], []) and media_in_memory.as_files(pixels)[0] == [images[len(held)]]
    assert media_in_memory.as_files(videos=(np.stack(frames), metadata))[1] == videos[1:]

    refusals = [
        ({"images": [torch.zeros(16, 16, 3)]}, "image 0 is a torch Tensor of shape (16, 16, 3) and dtype torch.float32; "
         "give a file's path, a PIL image or a uint8 (height, width, 3) array of RGB pixels (a torch tensor of 3 dimensions is an image's embeddings to vLLM)"),
        ({"images": [np.zeros((3, 16, 16), np.uint8)]}, "image 0 is a numpy ndarray of shape (3, 16, 16) and dtype uint8"),
        ({"videos": [np.zeros((2, 8, 8, 3))]}, "video 0 has frames a numpy ndarray of shape (2, 8, 8, 3) and dtype float64; give a file's path, "
         "a uint8 (frames, height, width, 3) array"),
        ({"audios": [(np.zeros((80, 2)), 8000)]}, "audio 0 has samples a numpy ndarray of shape (80, 2) and dtype float64; "
         "give a file's path, or 1-D float samples in [-1, 1] (average the channels first)"),
        ({"audios": [(clip, 8000.0)]}, "audio 0's sampling rate is 8000.0; give (samples, sampling_rate), the rate in Hz as an int"),
        ({"audios": [np.zeros(80, np.int16)]}, "audio 0 has samples a numpy ndarray of shape (80,) and dtype int16"),
        ({"videos": frames[0]}, "video 0 has frames a Image; give a file's path"),
    ]
    for items, message in refusals:
        with pytest.raises(ValueError, match=re.escape(message)):
            media_in_memory.as_files(**items, sampling_rate=lambda: 16000)


@pytest.mark.engine
def test_validate_runs_items_a_notebook_holds(zoo, tmp_path, monkeypatch):
    """`run(...)` with a PIL image opened from a phone photo (its orientation tag unapplied,
    as vLLM's parser applies it), a transparent one, and a video's frames with their
    metadata: every stage passes on Qwen2-VL, and bad items end the run naming the fix."""
    import numpy as np
    from PIL import Image

    from hf_bridge.validate.command import run

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    names = _write_photo_and_transparent_images(tmp_path)
    write_clip(tmp_path / "clip.mp4", fps=30, num_frames=6)
    from hf_bridge.media_files import read_video

    frames, metadata = read_video(str(tmp_path / "clip.mp4"))
    report = run(zoo("qwen2_vl"), prompt="What happens?", images=[Image.open(tmp_path / n) for n in names[:2]],
                 videos=[(list(frames), metadata)], stage_names=("processing", "decoding"))
    assert {(v.case, v.stage): v.outcome for v in report.verdicts} == {("user", "processing"): PASS, ("user", "decoding"): PASS}, report
    with pytest.raises(SystemExit, match=re.escape("hf-bridge validate: image 0 is a numpy ndarray of shape (2, 2)")):
        run(zoo("qwen2_vl"), images=np.zeros((2, 2), np.uint8))


@pytest.mark.engine
def test_a_case_of_an_image_and_a_video_passes_where_one_entry_encodes_both(zoo, tmp_path, monkeypatch):
    """InternVL encodes video frames with `get_image_features`, from the one `pixel_values`
    its processor gives an image's tiles and a video's frames together: the processing
    stage counted those rows once per modality (56 for the prompt's 28 positions) and
    failed, saying transformers could not run a case whose decoding it passed."""
    import numpy as np
    from PIL import Image

    from hf_bridge.validate.command import run

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 255, (90, 140, 3), dtype=np.uint8))
    frames = rng.integers(0, 255, (4, 64, 80, 3), dtype=np.uint8)
    report = run(zoo("internvl"), prompt="Compare these.", images=[image], videos=[frames])
    assert {v.stage: v.outcome for v in report.verdicts} == {"processing": PASS, "encoder": PASS, "decoding": PASS}, report


@pytest.mark.engine
def test_exact_reference_measures_both_sides_against_float64(zoo, tmp_path):
    """`--exact-reference`: the decoding verdict says how far transformers' float32 result
    and vLLM's are from transformers in float64; on a well-conditioned zoo checkpoint both
    are far inside the tolerance, and the verdict is the strict one."""
    done, report = _validate(zoo("llava"), tmp_path, "--cases", "one_image", "--stages", "decoding", "--exact-reference")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    (verdict,) = report["verdicts"]
    assert verdict["outcome"] == PASS, verdict
    measured = re.fullmatch(r"against transformers in float64: its float32 reference is (\S+) off at (prompt|generated) position \d+, "
                            r"vLLM (\S+) at (prompt|generated) position \d+", verdict["detail"])
    assert measured, verdict["detail"]
    assert 0 < float(measured.group(1)) <= ROUNDING_BUDGET and 0 < float(measured.group(3)) <= ROUNDING_BUDGET, verdict["detail"]


def _result(tokens, top, prompt=(1, 2, 3)):
    from hf_bridge.validate.parity import Result

    return Result(list(prompt), tokens, [-0.5] * len(tokens), [-1.0] * (len(prompt) - 1), top)


def test_lenient_rule_accepts_a_near_tie_and_nothing_more():
    from hf_bridge.validate.parity import compare_lenient

    top = [[(7, -0.5), (8, -0.6)], [(9, -0.5), (4, -0.7)]]
    assert compare_lenient(_result([7, 9], top), _result([7, 9], top))[0] == []
    problems, found = compare_lenient(_result([7, 9], top), _result([8, 4], [[(8, -0.5), (7, -0.6)], [(4, -0.1)]]))
    assert problems == [] and found.startswith("near-tie at generated position 0: transformers chose 7")
    problems, _ = compare_lenient(_result([7, 9], top), _result([5, 9], [[(5, -0.1), (6, -0.2)], [(9, -0.5)]]))
    assert problems and "not each in the other's top 5" in problems[0]
    problems, _ = compare_lenient(_result([7, 9], top), _result([7, 9], top, prompt=(1, 2, 4)))
    assert problems and problems[0].startswith("prompt ids differ")


def test_rounding_diagnosis_says_whose_rounding_a_failure_is():
    from hf_bridge.validate.parity import Result, compare

    exact = Result([1, 2, 3], [7, 8], [-0.5, -0.6], [-1.0, -2.0])
    sloppy = Result([1, 2, 3], [7, 8], [-0.5, -0.6], [-1.0, -2.0008])  # the float32 reference, 8e-4 off
    close = Result([1, 2, 3], [7, 8], [-0.5, -0.6], [-1.0, -1.9997])
    assert compare(sloppy, close)  # strict parity fails: 1.1e-3 apart
    said = stages.rounding_diagnosis(sloppy, exact, close, failed=True)
    assert said.startswith("against transformers in float64: its float32 reference is 8.00e-04 off at prompt position 2, vLLM 3.00e-04")
    assert said.endswith("the difference is the reference's own rounding, not vLLM's")
    # a well-conditioned reference puts the failure on vLLM
    off = Result([1, 2, 3], [7, 8], [-0.5, -0.6], [-1.0, -2.002])
    assert stages.rounding_diagnosis(exact, exact, off, failed=True).endswith("the difference is vLLM's")
    # both far from float64: neither settles it
    assert "too much for either result to settle the case" in stages.rounding_diagnosis(sloppy, exact, off, failed=True)
    # vLLM choosing tokens float64 does not choose is measured as such, never as a small number
    other = Result([1, 2, 3], [7, 9], [-0.5, -0.6], [-1.0, -2.0])
    assert "vLLM inf at float64 chose other tokens: [7, 8] against vLLM's [7, 9]" in stages.rounding_diagnosis(exact, exact, other, failed=True)
    # a near-tie: float32 rounding alone changes transformers' tokens
    assert "a near-tie" in stages.rounding_diagnosis(other, exact, exact, failed=True)
    # a pass is measured, not explained
    assert stages.rounding_diagnosis(exact, exact, exact, failed=False).endswith("vLLM 0.00e+00 at prompt position 2")


def test_cache_problems_name_the_item_and_field_that_differ():
    import numpy as np

    item = ItemRange("image", 3, [False, True, True])
    fresh = [(item, {"pixel_values": np.ones((1, 3)), "image_sizes": [4, 4]})]
    assert stages.cache_problems(fresh, fresh) == []
    stale = [(item, {"pixel_values": np.zeros((1, 3)), "image_sizes": [4, 4]})]
    assert stages.cache_problems(fresh, stale) == [
        "image item 0: its data from the processor cache differs from a fresh run's in pixel_values"
    ]
    moved = [(ItemRange("image", 4, [False, True, True]), fresh[0][1])]
    assert "range or is_embed mask" in stages.cache_problems(fresh, moved)[0]
    assert stages.cache_problems(fresh, []) == ["0 item(s) from the processor cache, 1 processed afresh"]


def test_strict_comparison_names_the_first_divergence():
    from hf_bridge.validate.parity import Result, compare

    reference = Result([1, 2, 3], [7, 8, 9], [-0.5, -0.6, -0.7], [-1.0, -2.0])
    drifted = Result([1, 2, 3], [7, 8, 4], [-0.5, -0.6, -0.9], [-1.0, -2.5])
    assert compare(reference, drifted) == [
        "greedy tokens differ from generated position 2: [7, 8, 9] vs [7, 8, 4]",
        "generated log-probs differ by up to 2.00e-01 (tolerance 1e-03); first beyond it at generated position 2",
        "prompt log-probs differ by up to 5.00e-01 (tolerance 1e-03); first beyond it at prompt position 2",
    ]


def test_encoder_problems_name_the_first_row_beyond_tolerance():
    import numpy as np

    reference = np.ones((4, 3))
    rows = reference.copy()
    assert stages.encoder_problems(reference, rows)[0] == []
    rows[2, 1] += 0.5
    (problem,), _ = stages.encoder_problems(reference, rows)
    assert problem.startswith("rows differ: 4 rows x 3: max |diff| 5.00e-01") and problem.endswith("first row beyond it: 2 of the feature positions")


def test_rows_alone_diagnosis_says_whose_rows_a_failure_is():
    """Given transformers' rows for the items together and each alone: nothing where they
    agree; where they do not, whether vLLM's rows are the lone items' (then the failure
    is transformers' batching) or differ from those too (then it is not)."""
    import numpy as np

    together = np.ones((4, 3))
    alone = together.copy()
    alone[0] += 1.0  # the first item's rows change with its neighbour
    assert stages.rows_alone_diagnosis(together, together, alone) == ""  # transformers agrees with itself
    explained = stages.rows_alone_diagnosis(together, alone, alone.copy())
    assert explained.startswith("vLLM's rows are transformers' for each item encoded alone (4 rows x 3: max |diff| 0.00e+00")
    assert "transformers' rows for the items together are not (4 rows x 3: max |diff| 1.00e+00" in explained
    assert explained.endswith(stages.NEIGHBOURS_EXPLAINED)
    neither = alone.copy()
    neither[3, 2] += 0.5
    assert stages.rows_alone_diagnosis(together, alone, neither).startswith(
        "against transformers' rows for each item encoded alone, too: rows differ: 4 rows x 3: max |diff| 5.00e-01")
    assert stages.items_alone_diagnosis([]) == (
        f"vLLM matches transformers token for token with each item encoded alone: {stages.NEIGHBOURS_EXPLAINED}")
    assert stages.items_alone_diagnosis(["prompt ids differ: 3 vs 4 tokens"]) == ""  # it explains nothing


def test_items_alone_are_the_processor_output_of_a_one_item_prompt(zoo):
    """`parity.items_alone` (the items-alone reference's inputs): per item, in prompt order,
    exactly what the processor makes of a prompt holding that item only."""
    import torch

    from hf_bridge.validate import parity
    from hf_bridge.validate.checkpoint import load_processor

    processor = load_processor(zoo("llava"))
    case = parity.standard_cases(64)["two_images"]
    alone = list(parity.items_alone(processor, case, return_tensors="pt"))
    assert [modality for modality, _ in alone] == ["image", "image"]
    one_image_prompt = parity.prompt_text(processor, dataclasses.replace(case, num_images=1))
    for (_, inputs), image in zip(alone, case.images):
        expected = processor(text=[one_image_prompt], images=[image], return_tensors="pt")
        assert inputs["input_ids"].tolist() == expected["input_ids"].tolist()
        assert torch.equal(inputs["pixel_values"], expected["pixel_values"])
    assert not torch.equal(alone[0][1]["pixel_values"], alone[1][1]["pixel_values"])


def test_references_beside_the_rows_are_those_of_a_model_that_computed_nothing_else(zoo):
    """transformers' side computes validate's encoder rows and its float32 references on one
    model load: the rows leave the model as they found it (their hook removed), so the
    references are bitwise those of a fresh model."""
    from hf_bridge.features import feature_token_ids
    from hf_bridge.validate import parity
    from hf_bridge.validate.checkpoint import load_processor
    from hf_bridge.validate.encoder import hf_rows
    from hf_bridge.validate.transformers_side import compute_references

    model_dir = str(zoo("llava"))
    processor = load_processor(model_dir)
    case = parity.standard_cases(64)["two_images"]
    wanted = {"float32": [case.key()]}
    model = parity.load_generation_model(model_dir)
    rows, counts, alone = hf_rows(model, processor, [case], feature_token_ids(model.config))
    assert rows[case.name].shape[0] == counts[case.name] == alone[case.name].shape[0] > 0
    assert not model.get_decoder()._forward_pre_hooks
    beside = compute_references(model_dir, wanted, processor, float32_model=model)
    assert "error" not in beside["float32"][case.key()] and len(set(beside["float32"][case.key()]["tokens"])) > 1
    assert beside == compute_references(model_dir, wanted, processor)


@pytest.fixture(scope="module")
def emu3_checkpoint(generic):
    """Emu3 built by the sweep's shrinker: its processor pads a prompt's images to one size
    and its VQ encoder (convolutions and attention) reads the padding."""
    return generic("emu3")


@pytest.mark.engine
def test_validate_explains_an_encoder_that_reads_its_neighbours_padding(emu3_checkpoint, tmp_path):
    """Emu3's two images of different sizes: transformers encodes each differently beside
    the other than alone. hf_bridge encodes each alone, so the two-image case still fails
    strict parity against transformers, and validate says why, with the proof: vLLM's rows
    are exactly transformers' for each image alone, and its tokens are transformers' with
    each image encoded alone. One image passes every stage, and so does a prompt without
    images, which gets the BOS Emu3's processor puts first (`text_only_prompts.py`)."""
    done, report = _validate(emu3_checkpoint, tmp_path, "--cases", "one_image,two_images,text_only")

    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    outcomes = _outcomes(report)
    assert [outcomes[("hf_bridge", "one_image", s)] for s in stages.STAGES] == [PASS, PASS, PASS]
    assert [outcomes[("hf_bridge", "two_images", s)] for s in stages.STAGES] == [PASS, FAIL, FAIL]
    assert outcomes[("hf_bridge", "text_only", "decoding")] == PASS  # prompt ids first: transformers' BOS is there
    detail = {v["stage"]: v["detail"] for v in report["verdicts"] if v["case"] == "two_images"}
    rows = re.search(r"vLLM's rows are transformers' for each item encoded alone \(\d+ rows x \d+: max \|diff\| \S+, relative (\S+) ", detail["encoder"])
    assert rows and float(rows.group(1)) <= stages.ENCODER_RTOL, detail["encoder"]
    apart = re.search(r"transformers' rows for the items together are not \(\d+ rows x \d+: max \|diff\| \S+, relative (\S+) ", detail["encoder"])
    assert apart and float(apart.group(1)) > 0.1, detail["encoder"]  # transformers' batching, far beyond rounding
    assert detail["decoding"].startswith("greedy tokens differ"), detail["decoding"]
    assert detail["decoding"].endswith(stages.items_alone_diagnosis([])), detail["decoding"]


def test_a_generated_media_placeholder_is_found():
    """The sweep rejects a seed whose reference writes a media placeholder: transformers then
    marks it as media by id, vLLM embeds it as the plain token (`parity.generated_placeholders`).
    Gemma 4 Unified's seed 0 wrote `<|audio_token|>` at its seventh token, and its next one
    differed by 0.58 in log-prob."""
    from hf_bridge.validate.parity import generated_placeholders
    from hf_bridge.zoo import shrink
    from hf_bridge.zoo.tokenizer import build_tokenizer

    spec = shrink.generic_spec("ernie4_5_vl_moe")
    processor = spec.make_processor(build_tokenizer(spec.special_tokens, add_bos=False, extra_attributes=spec.tokenizer_attributes))
    markers = processor.tokenizer.convert_tokens_to_ids([processor.image_start_token, processor.image_token, processor.video_token])
    assert generated_placeholders([5, 6, markers[1], 7, markers[2]], processor) == [2, 4]
    assert generated_placeholders([5, markers[0], 7], processor) == []  # a marker is not a placeholder


def test_rows_the_forward_pads_are_counted_as_the_forward_places_them(generic):
    """Gemma 3n's `get_audio_features` returns fewer rows (7 here) than its prompt's 188
    audio positions, and its forward pads them: the processing stage had reported that
    transformers itself could not run the case. The count is the forward's; a count the
    entry gives as many rows for stands as it was."""
    import torch
    from transformers import AutoProcessor, Gemma3nForConditionalGeneration

    from hf_bridge.features import feature_token_ids
    from hf_bridge.validate import parity
    from hf_bridge.validate.encoder import hf_rows

    model_dir = generic("gemma3n")
    model = Gemma3nForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    cases = [parity.standard_cases(64)[name] for name in ("audio", "one_image")]
    rows, counts, _ = hf_rows(model, processor, cases, feature_token_ids(model.config))
    assert counts == {"audio": 188, "one_image": 256}
    assert {name: rows[name].shape[0] for name in counts} == counts


def test_rows_the_forward_drops_padding_from_are_counted_as_the_forward_places_them(generic):
    """Gemma 4's processor pads two clips to one length, its `get_audio_features` returns a
    row for every padded frame, and its forward drops the padding's rows: the processing
    stage had reported that transformers itself could not run the case (33 positions, 50
    rows), while its decoding passed."""
    from hf_bridge.features import feature_token_ids
    from hf_bridge.validate import parity
    from hf_bridge.validate.checkpoint import load_processor
    from hf_bridge.validate.encoder import feature_positions, hf_rows

    model_dir = generic("gemma4")
    model = parity.load_generation_model(model_dir)
    processor = load_processor(model_dir)
    case = parity.Case("two_clips", 64, num_audios=2, text="Transcribe both.")
    prompt = parity.hf_inputs(processor, case)["input_ids"][0].tolist()
    positions = len(feature_positions(prompt, feature_token_ids(model.config)))
    rows, counts, alone = hf_rows(model, processor, [case], feature_token_ids(model.config))
    assert counts[case.name] == rows[case.name].shape[0] == alone[case.name].shape[0] == positions > 0


def test_a_flat_models_rows_are_those_its_first_layer_receives(generic):
    """Phi-4-multimodal is its own decoder: its forward hands the prompt's embeddings to its
    first layer, never a decoder's `inputs_embeds`. The encoder stage took nothing there
    and was n/a for every case. Its rows, and those of two clips encoded alone (which its
    forward encodes inline), are taken where hf_bridge takes them."""
    from hf_bridge.features import feature_token_ids
    from hf_bridge.validate import parity
    from hf_bridge.validate.checkpoint import load_processor
    from hf_bridge.validate.encoder import feature_positions, hf_rows

    model_dir = generic("phi4_multimodal", 1)
    model = parity.load_generation_model(model_dir)
    processor = load_processor(model_dir)
    cases = [parity.standard_cases(64)["audio"], parity.Case("two_clips", 64, num_audios=2, text="Transcribe both.")]
    rows, _, alone = hf_rows(model, processor, cases, feature_token_ids(model.config))
    for case in cases:
        prompt = parity.hf_inputs(processor, case)["input_ids"][0].tolist()
        assert not isinstance(rows[case.name], str), rows[case.name]
        assert rows[case.name].shape[0] == len(feature_positions(prompt, feature_token_ids(model.config))) > 0
    assert alone["two_clips"].shape == rows["two_clips"].shape
    assert not model.base_model.layers[0]._forward_pre_hooks


def test_encoder_rows_compared_at_no_position_are_not_checked():
    """A case with items whose prompt holds none of the tokens the config names (the
    tokens of Qwen2.5-Omni's and Qwen3-Omni's checkpoints were read from the whole
    model's config, which names none) compared no row, and passed: "0 rows x 64"."""
    import numpy as np

    from hf_bridge.validate import command, parity

    case = parity.standard_cases(64)["audio"]
    verdict = command._encoder_verdict("hf_bridge", case, np.zeros((0, 64), np.float32), np.zeros((0, 64), np.float32), None)
    assert (verdict.outcome, verdict.detail) == (stages.NOT_CHECKED, command.NO_FEATURE_POSITIONS)


def test_feature_tokens_of_a_whole_model_are_its_thinkers(tmp_path):
    """Qwen2.5-Omni's tokens are in its `thinker_config` alone, the config of the model that
    generates its text, which hf_bridge builds."""
    from transformers import Qwen2_5OmniConfig

    from hf_bridge.features import feature_token_ids
    from hf_bridge.validate.checkpoint import feature_ids

    config = Qwen2_5OmniConfig()
    config.save_pretrained(tmp_path)
    assert feature_token_ids(config) == {}
    thinker = config.thinker_config
    assert feature_ids(tmp_path) == feature_token_ids(thinker) and set(feature_ids(tmp_path)) == {"image", "video", "audio"}


def test_encoder_rows_come_from_the_forward_the_references_run(generic):
    """Cosmos3-Edge's forward refuses images without `mm_token_type_ids` (its M-RoPE
    positions), which its processor leaves off unless asked. transformers' side once ran
    the encoder stage's forward without them, so the stage was n/a (transformers' own
    refusal) while decoding, whose references ask for them, passed: every image case's
    rows went unchecked. Both now take the inputs `parity.model_inputs` gives."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from hf_bridge.features import feature_token_ids
    from hf_bridge.validate import parity
    from hf_bridge.validate.encoder import hf_rows

    model_dir = generic("cosmos3_edge")
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    case = parity.standard_cases(64)["two_images"]
    assert "mm_token_type_ids" not in parity.hf_inputs(processor, case)  # what made the stage n/a
    assert "mm_token_type_ids" in parity.model_inputs(model, processor, case)
    rows, counts, alone = hf_rows(model, processor, [case], feature_token_ids(model.config))
    assert not isinstance(rows[case.name], str), rows[case.name]
    assert rows[case.name].shape[0] == counts[case.name] == alone[case.name].shape[0] > 0


@pytest.mark.engine
def test_feature_tokens_are_read_from_transformers_config_after_vllm_registered_its_own(generic, tmp_path, monkeypatch):
    """Once vLLM loads a Qwen3-ASR checkpoint, `AutoConfig` in that process builds vLLM's own
    class, which nests the audio token a level down. `validate` read the feature tokens
    through it, found none, and failed the encoder stage of every audio case wherever the
    processing stage ran first, as it does by default ("vLLM placed 0 rows"). It reads
    them from transformers' own class, as the HF model is built."""
    import numpy as np
    from transformers import AutoConfig
    from vllm.transformers_utils.config import get_config

    from hf_bridge.features import feature_token_ids
    from hf_bridge.validate import command
    from hf_bridge.validate.checkpoint import load_config

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model_dir = generic("qwen3_asr")
    get_config(model_dir, trust_remote_code=False)  # as vLLM's engine and processor load it
    assert type(AutoConfig.from_pretrained(model_dir)).__module__.startswith("vllm.")  # the cause
    config = load_config(model_dir)
    assert type(config).__module__.startswith("transformers.") and feature_token_ids(config) == {"audio": config.audio_token_id}

    clip = np.sin(np.arange(16000) / 5).astype(np.float32) / 3  # a second at the feature extractor's rate
    report = command.run(model_dir, "hf_bridge", audios=[(clip, 16000)], prompt="Transcribe it.", stage_names=("encoder",))
    (verdict,) = report.verdicts
    assert (verdict.case, verdict.outcome, report.exit_code) == ("user", "pass", 0), verdict.detail
    assert verdict.detail.startswith("13 rows x "), verdict.detail


def test_encoder_rows_transformers_refused_but_generated_from_are_not_checked():
    """Where transformers' forward raised on the encoder stage's inputs but generated the
    case's references, the stage could not compare what transformers can run: not checked
    (exit 2), never n/a, which would let the stage pass unseen. Where transformers refuses
    the case outright, n/a stands."""
    from hf_bridge.validate import command, parity

    case = parity.standard_cases(64)["one_image"]
    refused = "transformers: ValueError: mm_token_type_ids is missing"
    unseen = command._encoder_verdict("hf_bridge", case, refused, None, None, transformers_ran=True)
    assert unseen.outcome == stages.NOT_CHECKED and unseen.detail.startswith(refused), unseen
    assert command._encoder_verdict("hf_bridge", case, refused, None, None, transformers_ran=False).outcome == stages.NOT_APPLICABLE


def test_a_processing_failure_is_named_by_the_processors_error_not_its_data(zoo):
    """vLLM wraps the HF processor's error in one that reprs the call's data (a video's
    pixels); the verdict, cut to a table cell by `scripts/processor_settings.py`, showed only those."""
    from hf_bridge.inspect import build_processor
    from hf_bridge.validate.command import processor_raised
    from hf_bridge.validate.parity import test_video

    info = build_processor(zoo("qwen2_vl")).info
    with pytest.raises(ValueError) as raised:
        info.ctx.call_hf_processor(info.get_hf_processor(), {"text": "<|video_pad|>", "videos": [test_video()]},
                                   {"do_sample_frames": True, "fps": 1})
    assert "array(" in str(raised.value)
    message = processor_raised(raised.value)
    assert message.startswith("vLLM's processor raised ValueError: Failed to apply Qwen2VLProcessor: ValueError: "
                              "Asked to sample `fps` frames per second but no video metadata was provided"), message
    assert "array(" not in message
    assert processor_raised(TypeError("one line")) == "vLLM's processor raised TypeError: one line"
