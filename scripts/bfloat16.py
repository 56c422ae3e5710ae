"""bfloat16, the dtype vLLM gives most checkpoints, on every type hf_bridge passes in float32:
each type COVERAGE.md lists as passing every case, built as the sweep builds it, through
`hf-bridge validate --dtype bfloat16`'s `run(...)` on its standard cases, against
transformers in bfloat16 (identical prompt ids, greedy tokens by vLLM's own tests' top-5
rule, log-probs within 3 times transformers' own bfloat16 rounding, its distance from its
float32 result; the encoder stage compares rows in float32 only, so it is n/a here).

    .venv/bin/python scripts/bfloat16.py --out BFLOAT16.md        # all (about 25 minutes)
    .venv/bin/python scripts/bfloat16.py --types kimi_k25 gemma3n  # printed only
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from mixed_modalities import DETAIL_CHARS, checkpoint, table_script_parser, write_table

TYPES = ("aria", "audioflamingo3", "aya_vision", "chameleon", "cohere2_vision", "cohere_compass", "cosmos3_edge", "deepseek_ocr2",
         "deepseek_vl", "deepseek_vl_hybrid", "ernie4_5_vl_moe", "exaone4_5", "fuyu", "gemma3", "gemma3n", "gemma4",
         "gemma4_unified", "glm46v", "glm4v", "glm4v_moe", "glmasr", "got_ocr2", "granite4_vision",
         "hyperclovax_vision_v2", "idefics2", "idefics3", "internvl", "janus", "kimi_k25", "lfm2_vl", "lighton_ocr",
         "llama4", "llava", "llava_next", "llava_next_video", "llava_onevision", "minicpmv4_6", "minicpmv4_7",
         "mistral3", "muse_glimmer", "musicflamingo", "nemotron_h_omni", "ovis2", "paddleocr_vl", "paligemma", "perception_lm",
         "phi4_multimodal", "qwen2_5_omni", "qwen2_5_vl", "qwen2_audio", "qwen2_vl", "qwen3_5", "qwen3_5_moe",
         "qwen3_asr", "qwen3_omni_moe", "qwen3_vl", "qwen3_vl_moe", "smolvlm", "step3p7", "video_llama_3",
         "video_llava", "vipllava")
"""Every type COVERAGE.md lists as passing every case transformers can run through hf_bridge."""

MEASURED = re.compile(r"max \|log-prob difference\| (\S+) where compared \(tolerance (\S+),")


def check(model_dir: Path) -> str:
    """One type's cell: pass, with its decoding cases' near-ties and the largest share of the
    tolerance a log-prob difference took; or the exit code and each verdict not passed."""
    from hf_bridge.validate.command import run
    from hf_bridge.validate.stages import brief, not_passed

    report = run(model_dir, "hf_bridge", dtype="bfloat16")
    failed, _ = not_passed(report.verdicts)
    if failed or report.exit_code:
        return f"exit {report.exit_code}: " + ("; ".join(
            f"{v.case} {v.stage}: {v.outcome}: {brief(v.detail, DETAIL_CHARS)}" for v in failed) or report.summary)
    decoded = [v for v in report.verdicts if v.stage == "decoding" and MEASURED.search(v.detail)]
    if not decoded:
        return f"exit {report.exit_code}: no decoding case compared"
    shares = [float(m[1]) / float(m[2]) for m in (MEASURED.search(v.detail) for v in decoded)]
    ties = sum("near-tie" in v.detail for v in decoded)
    return (f"pass: {len(decoded)} case(s), {ties} through a near-tie; log-probs at most "
            f"{max(shares):.2f} of the tolerance")


def main() -> None:
    parser = table_script_parser(__doc__)
    parser.add_argument("--types", nargs="+", default=list(TYPES))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as temporary:
        scratch = args.scratch or Path(temporary)
        for name in args.types:
            verdict = check(checkpoint(name, scratch)).replace("|", "\\|")
            print(f"{name}: {verdict}", flush=True)
            rows.append(f"| {name} | {verdict} |")
    if args.out:
        write_table(args.out, "bfloat16", "bfloat16.py", __doc__,
                    "A near-tie: where the greedy tokens first differ, each side's token is in the other's top 5, and "
                    "the sequences are not compared past it. The share: the largest log-prob difference over its "
                    "case's tolerance (1.00 is the limit).", ("type",), rows,
                    rule="Decoding in bfloat16, by the rule above.")


if __name__ == "__main__":
    main()
