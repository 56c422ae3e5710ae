"""What each zoo architecture x case is expected to do through hf_bridge.

Anything not listed must pass parity. `NA` cases are ones transformers itself cannot
run (the test asserts its error). `XFAIL` cases are known divergences: each names the
exception its known problem raises (`raises`, a `KnownDivergence`) and what must still
hold (`holds`, checked *before* the expected failure, with plain asserts), so a crash
or a new divergence in the same case fails the suite instead of passing as the old one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


class KnownDivergence(AssertionError):
    """Raised by the parity test for a case whose divergence is known and explained."""


class OutputsDiffer(KnownDivergence):
    """Prompt ids are identical; generated tokens or log-probs differ."""


class PromptIdsDiffer(KnownDivergence):
    """The prompt vLLM runs differs from the one transformers runs."""


@dataclass(frozen=True)
class Expected:
    reason: str
    raises: type[KnownDivergence]
    holds: Callable


NA: dict[tuple[str, str], str] = {
    ("paligemma", "text_only"): r"`images` are expected as arguments to a `PaliGemmaProcessor`",
    ("fuyu", "two_images"): r"Image features and image tokens do not match",
}
"""(arch, case) -> regex of transformers' own error."""

XFAIL: dict[tuple[str, str], Expected] = {}
"""None at present: PaliGemma's image cases were the last (its whole prompt attends both
ways), until hf_bridge's CPU attention took prompts whole."""
