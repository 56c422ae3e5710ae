"""What each zoo architecture x case is expected to do through hf_bridge.

Anything not listed must pass parity. `NA` cases are ones transformers itself cannot
run (the test asserts its error); `XFAIL` cases are known divergences, each with its
cause, run as `xfail(strict=True)` so a fix is noticed.
"""

BIDIRECTIONAL = (
    "vLLM's CPU attention has no bidirectional image mask: the model attends "
    "bidirectionally within each image (its forward reads token_type_ids), so hidden "
    "states at image positions, and prompt log-probs from there on, differ"
)

NA: dict[tuple[str, str], str] = {}
"""(arch, case) -> regex of transformers' own error."""

XFAIL: dict[tuple[str, str], str] = {
    ("gemma3", "one_image"): BIDIRECTIONAL,
    ("gemma3", "two_images"): BIDIRECTIONAL,
}
