"""Parity with transformers for every zoo architecture: one image, two images, text, video.

Known divergences (`parity_expectations.XFAIL`) are `xfail(strict=True, raises=...)`: the
test first asserts what must still hold, then raises `PromptIdsDiffer` or `OutputsDiffer`
for what differs, so only the known failure can satisfy the mark.

Parity: identical prompt token ids, identical greedy tokens (8 new, float32), chosen
and prompt log-probs within 1e-3 of the HF forward. References come from an untouched
transformers in a subprocess (`hf_bridge.validate.reference`); each fixture's float32
reference is first checked against transformers in float64, so that its own rounding
leaves the tolerance to the implementations (`helpers.conditioning`).

Set `HF_BRIDGE_PARITY_REPORT=<file>` to record every outcome as JSON lines (used by
`scripts/parity_table.py`, also with `HF_BRIDGE_DISABLE=1` for vLLM's in-tree backend).
"""

from __future__ import annotations

import json
import os
import re

import pytest

from hf_bridge.validate import parity
from hf_bridge.validate.reference import NotApplicable, cache_references, references
from hf_bridge.zoo import SPECS
from helpers.conditioning import assert_well_conditioned
from parity_expectations import NA, XFAIL, OutputsDiffer, PromptIdsDiffer

CASES = ["one_image", "two_images", "text_only", "video"]


def _has_video(arch: str) -> bool:
    return SPECS[arch].has_video


def _cases(arch: str) -> list[str]:
    """The parity cases `arch` runs: every case, video only for a video model."""
    return [case for case in CASES if case != "video" or _has_video(arch)]


def _params():
    for arch in [a for a, spec in SPECS.items() if spec.servable]:
        for case in _cases(arch):
            marks = []
            expected = XFAIL.get((arch, case))
            if expected is not None and not os.environ.get("HF_BRIDGE_PARITY_REPORT"):
                marks.append(pytest.mark.xfail(strict=True, raises=expected.raises, reason=expected.reason))
            yield pytest.param(arch, case, marks=marks, id=f"{arch}-{case}")


def _record(arch: str, case: str, outcome: str, detail: str = "") -> None:
    path = os.environ.get("HF_BRIDGE_PARITY_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"arch": arch, "case": case, "outcome": outcome, "detail": detail}) + "\n")


_REFERENCED: set[str] = set()


def architecture_references(arch: str, model_dir) -> None:
    """Every parity case of `arch` through transformers at once, in float32 and in float64:
    one interpreter, one model load per dtype, not one per case (cached beside the model, read per test)."""
    if arch in _REFERENCED:
        return
    standard = parity.standard_cases(SPECS[arch].min_image_side)
    cache_references(model_dir, [standard[name] for name in _cases(arch)], ("float32", "float64"))
    _REFERENCED.add(arch)


def limits(arch: str) -> dict[str, int]:
    return {"image": 2, "video": 1} if _has_video(arch) else {"image": 2}


@pytest.mark.engine
@pytest.mark.parametrize("arch,case", list(_params()))
def test_parity(arch, case, zoo, engines):
    from transformers import AutoProcessor

    model_dir = zoo(arch)
    architecture_references(arch, model_dir)
    the_case = parity.standard_cases(SPECS[arch].min_image_side)[case]
    (reference,) = references(model_dir, [the_case])
    if isinstance(reference, NotApplicable):
        _record(arch, case, "n/a", reference.error)
        assert (arch, case) in NA, f"transformers failed unexpectedly: {reference.error}"
        assert re.search(NA[(arch, case)], reference.error), reference.error
        return
    assert (arch, case) not in NA, "transformers now runs this case: remove it from NA"
    assert not parity.is_degenerate(reference.tokens), f"degenerate zoo continuation {reference.tokens}"
    assert_well_conditioned(model_dir, the_case, reference)

    processor = AutoProcessor.from_pretrained(model_dir)
    try:
        llm = engines.get(model_dir, limit_mm_per_prompt=limits(arch))
        got = parity.vllm_result(llm, processor, the_case)
    except Exception as exc:
        engines.close()  # an in-process engine that raised may hang on its next request
        _record(arch, case, "error", f"{type(exc).__name__}: {exc}"[:300])
        raise
    problems = parity.compare(reference, got)
    _record(arch, case, "fail" if problems else "pass", "; ".join(problems))
    expected = XFAIL.get((arch, case))
    if expected is not None:
        expected.holds(reference, got)  # a plain AssertionError: not the expected failure
    if problems:
        divergence = PromptIdsDiffer if problems[0].startswith("prompt ids differ") else OutputsDiffer
        raise divergence("; ".join(problems))


@pytest.mark.engine
@pytest.mark.parametrize("arch,case", [("paligemma", "one_image"), ("paligemma", "two_images")])
def test_prompt_frame_tokens_end_to_end(arch, case, zoo, engines):
    """PaliGemma's processor puts BOS after the images and a newline at the end: the prompt
    vLLM runs holds them exactly as transformers' does (outside any xfail)."""
    from transformers import AutoProcessor

    model_dir = zoo(arch)
    the_case = parity.standard_cases(SPECS[arch].min_image_side)[case]
    (reference,) = references(model_dir, [the_case])
    processor = AutoProcessor.from_pretrained(model_dir)
    got = parity.vllm_result(engines.get(model_dir, limit_mm_per_prompt=limits(arch)), processor, the_case)
    assert got.prompt_ids == reference.prompt_ids
    tokenizer = processor.tokenizer
    assert reference.prompt_ids[-1] == tokenizer.convert_tokens_to_ids("\n") or tokenizer.decode(reference.prompt_ids[-1:]) == "\n"
    last_image = max(i for i, t in enumerate(reference.prompt_ids) if t == processor.image_token_id)
    assert reference.prompt_ids[last_image + 1] == tokenizer.bos_token_id


BFLOAT16_CASES = [("llava", "two_images"), ("qwen3_vl", "video"), ("idefics3", "one_image")]
"""LLaVA's fixed-size placeholders, Qwen3-VL's M-RoPE video and deepstack side features,
Idefics3's tiles: the paths a dtype could break."""


@pytest.mark.engine
@pytest.mark.parametrize("arch,case", BFLOAT16_CASES, ids=[f"{a}-{c}" for a, c in BFLOAT16_CASES])
def test_bfloat16_engine_against_transformers_in_bfloat16(arch, case, zoo, engines):
    """vLLM casts most checkpoints to bfloat16, where log-probs 1e-3 apart are out of
    reach; there the engine is judged against transformers in bfloat16 by
    `compare_bfloat16`: identical prompt ids, greedy tokens identical up to a near-tie
    (vLLM's own tests' rule), and log-probs within 3 times transformers' own bfloat16
    rounding (its distance from its float32 result)."""
    from transformers import AutoProcessor

    model_dir = zoo(arch)
    the_case = parity.standard_cases(64)[case]
    (reference,) = references(model_dir, [the_case], dtype="bfloat16")
    (float32,) = references(model_dir, [the_case])
    llm = engines.get(model_dir, dtype="bfloat16", limit_mm_per_prompt=limits(arch))
    request = parity.vllm_request(AutoProcessor.from_pretrained(model_dir), the_case)
    (out,) = llm.generate([request], parity.sampling_params(), use_tqdm=False)
    problems, found = parity.compare_bfloat16(reference, float32, parity.result_from_output(out))
    assert problems == [], f"{problems}; {found}"


def test_bfloat16_rule_judges_log_probs_by_the_references_own_rounding():
    """The top-5 rule alone passes an engine whose greedy tokens all agree however far its
    log-probs are (the in-tree backend's Aya Vision scales its logits: 5.65 apart in
    bfloat16, every token the same); the bfloat16 rule does not, and its scale is the
    reference's own rounding, with a floor."""
    def result(shift, tokens=(5, 6, 7), prompt=(-1.0, -2.0)):
        return parity.Result([1, 2, 3], list(tokens), [-0.5 + shift] * 3, [p + shift for p in prompt],
                             [[(t, -0.5), (9, -0.9)] for t in tokens])

    reference, float32 = result(0.0), result(0.05)
    assert parity.compare_lenient(reference, result(5.65))[0] == []
    problems, _ = parity.compare_bfloat16(reference, float32, result(5.65))
    assert problems == ["log-probs differ by up to 5.65e+00 where compared (tolerance 1.50e-01, 3 x the reference's own rounding: "
                        "transformers' bfloat16 log-probs are 5.00e-02 from its float32 ones)"]
    assert parity.compare_bfloat16(reference, float32, result(0.149))[0] == []
    assert parity.compare_bfloat16(reference, float32, result(0.151))[0] != []
    assert parity.compare_bfloat16(reference, result(0.0), result(0.029))[0] == []  # the floor: 3 x 1e-2
    assert parity.compare_bfloat16(reference, result(0.0), result(0.031))[0] != []
    # past the first differing token, log-probs are another continuation's: a near-tie stops the comparison there
    near_tie = parity.Result([1, 2, 3], [5, 9, 4], [-0.5, -0.9, -9.0], [-1.0, -2.0], [[(5, -0.5), (9, -0.9)], [(9, -0.9), (6, -0.95)], [(4, -9.0)]])
    problems, found = parity.compare_bfloat16(reference, float32, near_tie)
    assert problems == [] and "near-tie at generated position 1" in found
    assert parity.compare_bfloat16(reference, float32, result(0.0, tokens=(5, 8, 7)))[0][0].startswith("tokens differ at generated position 1")


@pytest.mark.engine
def test_parity_refuses_an_engine_that_is_not_float32(zoo, engines):
    """A plain `LLM(...)` casts a float32 checkpoint to bfloat16; parity against the
    float32 reference would report a false failure, so it is refused with the fix."""
    from transformers import AutoProcessor

    model_dir = zoo("llava")
    llm = engines.get(model_dir, dtype="bfloat16")
    with pytest.raises(ValueError, match=r'runs in torch\.bfloat16: build it with LLM\(\.\.\., dtype="float32"\)'):
        parity.vllm_result(llm, AutoProcessor.from_pretrained(model_dir), parity.standard_cases(64)["text_only"])


@pytest.mark.engine
@pytest.mark.parametrize(("arch", "keep_head"), [("qwen2_vl", False), ("llava_onevision", False), ("qwen2_vl", True)])
def test_a_checkpoint_with_tied_embeddings_keeps_parity(arch, keep_head, zoo, engines, tmp_path):
    """Many small VLMs tie their head to their input embeddings and store no head
    (Qwen2-VL-2B, LLaVA-OneVision-0.5B); the zoo's do not (`helpers/tied_checkpoint.py`).
    vLLM's head then shares the embedding table, which only a tied head can load from:
    left untied, it keeps the random values it was made with, and every token differs.
    A config that calls a stored head of its own tied is wrong: transformers 5 keeps the
    two apart, and so must the engine (vLLM unties it on finding the head)."""
    from safetensors import safe_open
    from transformers import AutoProcessor

    from helpers.tied_checkpoint import HEAD_WEIGHT, tied_copy

    model_dir = tied_copy(zoo(arch), tmp_path / f"{arch}-tied", keep_head)
    with safe_open(model_dir / "model.safetensors", "pt") as stored:
        assert len([name for name in stored.keys() if name.endswith(HEAD_WEIGHT)]) == keep_head
    standard = parity.standard_cases(SPECS[arch].min_image_side)
    cases = [standard["one_image"], standard["text_only"]]
    processor = AutoProcessor.from_pretrained(model_dir)
    llm = engines.get(model_dir, limit_mm_per_prompt=limits(arch))
    for case, reference in zip(cases, references(model_dir, cases)):
        assert not parity.is_degenerate(reference.tokens), (case.name, reference.tokens)
        assert parity.compare(reference, parity.vllm_result(llm, processor, case)) == [], case.name


@pytest.mark.engine
def test_an_image_of_one_row_is_encoded_beside_a_copy_and_keeps_parity(zoo, engines, hf_bridge_log):
    """Mistral 3 gives an image of at most 28x28 pixels one row (2x2 patches, merged).
    Its `get_image_features` squeezes that one-row output to a vector, then fails to split
    it: transformers cannot run such an image alone, and the error, raised in vLLM's
    worker, stopped the engine (every later request failed). hf_bridge encodes the item
    beside a copy of itself once a one-row call has raised, and keeps the first copy's
    row: the row transformers gives that image beside another. The engine's prompt,
    tokens and log-probs are transformers' on the prompt with that row in place."""
    import torch
    from transformers import AutoProcessor

    model_dir = zoo("mistral3")
    processor = AutoProcessor.from_pretrained(model_dir)
    small = parity.Case("small_image", num_images=1, image_shape=(20, 20))
    model = parity.load_generation_model(model_dir)
    inputs = parity.model_inputs(model, processor, small)
    width = model.config.text_config.hidden_size
    with torch.no_grad(), pytest.raises(RuntimeError, match=rf"sum exactly to {width} .* got split_sizes=\[1\]"):
        model(**inputs)  # transformers alone: the one row squeezed to a vector of the text's width
    beside = processor.image_processor([small.images[0], parity.test_image(64, 48, seed=9)], return_tensors="pt")
    with torch.no_grad():
        row, other = model.model.get_image_features(**beside).pooler_output
        embeds = model.get_input_embeddings()(inputs["input_ids"])
        embeds[inputs["input_ids"] == model.config.image_token_id] = row
    assert row.shape == (1, width) and other.shape[0] > 1
    reference = parity.hf_reference(model_dir, None, model=model, inputs={
        "input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"], "inputs_embeds": embeds})
    assert not parity.is_degenerate(reference.tokens), reference.tokens

    llm = engines.get(model_dir)
    for _ in range(2):  # the second goes to a pair at once
        assert parity.compare(reference, parity.vllm_result(llm, processor, small)) == []
    warned = [r.getMessage() for r in hf_bridge_log.records if "raised on a call for one embedding row" in r.getMessage()]
    assert len(warned) == 1 and "Mistral3Model.get_image_features raised" in warned[0], warned
    (larger,) = references(model_dir, [parity.standard_cases(64)["one_image"]])
    assert parity.compare(larger, parity.vllm_result(llm, processor, parity.standard_cases(64)["one_image"])) == []
