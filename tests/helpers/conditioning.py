"""A parity fixture must leave the tolerance to the implementations: its float32
reference's own rounding (measured against transformers in float64) may take at most
`parity.ROUNDING_SHARE` of `parity.ATOL`, or a correct float32 implementation that rounds
the other way fails parity by rounding alone."""

from __future__ import annotations

from hf_bridge.validate import parity
from hf_bridge.validate.reference import rounding_problems


def assert_well_conditioned(model_dir, case: parity.Case, reference: parity.Result) -> None:
    (problem,) = rounding_problems(model_dir, [case], [reference])
    assert not problem, f"{problem}; rebuild it with a smaller init scale (ZooSpec.init_std)"
