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
BIDIRECTIONAL_PREFIX = (
    "vLLM's attention is causal: PaliGemma attends bidirectionally over its whole prefix "
    "(images and prompt, from token_type_ids), so every prompt position's hidden state differs"
)
TEXT_ONLY_PROMPTS_SKIP_PROCESSOR = (
    "vLLM hands a text-only prompt to the model without running the multimodal processor, "
    "so the separator Chameleon's processor appends to every prompt is missing (one token)"
)

NA: dict[tuple[str, str], str] = {
    ("paligemma", "text_only"): r"`images` are expected as arguments to a `PaliGemmaProcessor`",
    ("fuyu", "two_images"): r"Image features and image tokens do not match",
}
"""(arch, case) -> regex of transformers' own error."""

XFAIL: dict[tuple[str, str], str] = {
    ("gemma3", "one_image"): BIDIRECTIONAL,
    ("gemma3", "two_images"): BIDIRECTIONAL,
    ("paligemma", "one_image"): BIDIRECTIONAL_PREFIX,
    ("paligemma", "two_images"): BIDIRECTIONAL_PREFIX,
    ("chameleon", "text_only"): TEXT_ONLY_PROMPTS_SKIP_PROCESSOR,
}
