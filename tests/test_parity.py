"""Parity with transformers for every zoo architecture: one image, two images, text, video.

Parity: identical prompt token ids, identical greedy tokens (8 new, float32), chosen
and prompt log-probs within 1e-3 of the HF forward. References come from an untouched
transformers in a subprocess (`hf_bridge.validate.reference`).

Set `HF_BRIDGE_PARITY_REPORT=<file>` to record every outcome as JSON lines (used by
`scripts/parity_table.py`, also with `HF_BRIDGE_DISABLE=1` for vLLM's in-tree backend).
"""

from __future__ import annotations

import json
import os
import re

import pytest

from hf_bridge.validate import parity
from hf_bridge.validate.reference import NotApplicable, references
from hf_bridge.zoo import SPECS
from parity_expectations import NA, XFAIL

CASES = ["one_image", "two_images", "text_only", "video"]


def _has_video(arch: str) -> bool:
    return SPECS[arch].has_video


def _params():
    for arch in [a for a, spec in SPECS.items() if spec.servable]:
        for case in CASES:
            if case == "video" and not _has_video(arch):
                continue
            marks = []
            if (arch, case) in XFAIL and not os.environ.get("HF_BRIDGE_PARITY_REPORT"):
                marks.append(pytest.mark.xfail(strict=True, reason=XFAIL[(arch, case)]))
            yield pytest.param(arch, case, marks=marks, id=f"{arch}-{case}")


def _record(arch: str, case: str, outcome: str, detail: str = "") -> None:
    path = os.environ.get("HF_BRIDGE_PARITY_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"arch": arch, "case": case, "outcome": outcome, "detail": detail}) + "\n")


def limits(arch: str) -> dict[str, int]:
    return {"image": 2, "video": 1} if _has_video(arch) else {"image": 2}


@pytest.mark.engine
@pytest.mark.parametrize("arch,case", list(_params()))
def test_parity(arch, case, zoo, engines):
    from transformers import AutoProcessor

    model_dir = zoo(arch)
    the_case = parity.standard_cases(SPECS[arch].min_image_side)[case]
    (reference,) = references(model_dir, [the_case])
    if isinstance(reference, NotApplicable):
        _record(arch, case, "n/a", reference.error)
        assert (arch, case) in NA, f"transformers failed unexpectedly: {reference.error}"
        assert re.search(NA[(arch, case)], reference.error), reference.error
        return
    assert (arch, case) not in NA, "transformers now runs this case: remove it from NA"
    assert not parity.is_degenerate(reference.tokens), f"degenerate zoo continuation {reference.tokens}"

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
    assert not problems, problems
