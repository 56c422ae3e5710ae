"""`scripts/bfloat16.py` runs every type the float32 sweep passes, and reads validate's
own bfloat16 verdicts: the types are COVERAGE.md's, and the share it prints is parsed from
the text `parity.compare_bfloat16` writes."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import bfloat16  # noqa: E402


def test_the_types_are_those_coverage_lists_as_passing_every_case():
    listed = re.search(r"^- hf_bridge: \d+ \((.*)\)$", (ROOT / "COVERAGE.md").read_text(), re.M)[1]
    assert bfloat16.TYPES == tuple(listed.split(", "))


def test_the_share_is_read_from_the_verdict_compare_bfloat16_writes():
    from hf_bridge.validate.parity import Result, compare_bfloat16

    def result(logprob):
        return Result(prompt_ids=[1, 2], tokens=[3, 4], token_logprobs=[-1.0, logprob], prompt_logprobs=[-2.0],
                      top_logprobs=[[(3, -1.0), (5, -2.0)], [(4, logprob), (6, -3.0)]])

    problems, found = compare_bfloat16(result(-1.0), result(-1.2), result(-1.05))
    measured = bfloat16.MEASURED.search(found)
    assert problems == [] and measured is not None
    assert (float(measured[1]), float(measured[2])) == (pytest.approx(0.05), pytest.approx(3 * 0.2))
