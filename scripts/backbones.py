"""Decoders no VLM type in transformers ships yet, behind the zoo's LLaVA tower
(`hf_bridge/zoo/backbones.py`): every stage through `hf-bridge validate`, against
transformers, through hf_bridge and vLLM's in-tree Transformers backend.

    .venv/bin/python scripts/backbones.py --out BACKBONES.md          # all (about 95 minutes)
    .venv/bin/python scripts/backbones.py --only jamba --impls hf_bridge   # printed only
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from mixed_modalities import write_table

CARRYING_STATE = (
    "bamba", "falcon_h1", "granitemoehybrid", "jamba", "nemotron_h", "qwen3_next", "lfm2", "lfm2_moe",
    "olmo_hybrid", "kimi_linear", "minimax", "zamba", "zamba2", "mamba", "mamba2", "falcon_mamba", "recurrent_gemma",
    "qwen3_5_text", "qwen3_5_moe_text",
    # added 2026-12-01, with the attention-only ones below
    "rwkv", "xlstm",
)
"""Decoders with layers that carry a convolution or recurrent state (Mamba, linear attention,
short convolutions), alone or beside attention."""
ATTENTION_ONLY = (
    "llama", "qwen2", "qwen3", "qwen3_moe", "mistral", "gemma2", "gemma3_text", "phi3", "granite", "olmo2",
    "cohere2", "glm4", "exaone4", "ernie4_5", "smollm3", "olmo3", "seed_oss", "apertus", "deepseek_v3", "gpt_oss",
    "mixtral", "qwen2_moe", "glm4_moe", "minimax_m2", "hunyuan_v1_moe",
    # added 2026-11-30: every other decoder-only text type transformers 5.19 ships a causal LM for
    "afmoe", "arcee", "bitnet", "cohere", "cohere2_moe", "cwm", "dbrx", "deepseek_v2", "diffllama", "doge", "dots1",
    "ernie4_5_moe", "exaone_moe", "falcon", "flex_olmo", "gemma", "gemma3n_text", "gemma4_text", "glm", "glm4_moe_lite",
    "gpt_neox", "granite_swa", "granitemoe", "granitemoe_swa", "granitemoeshared", "helium", "hunyuan_v1_dense", "hy_v3",
    "jais2", "jetmoe", "laguna", "llama4_text", "longcat_flash", "mellum", "mimo_v2_flash", "ministral", "ministral3",
    "nemotron", "olmo", "olmoe", "phi", "phimoe", "solar_open", "stablelm", "starcoder2", "vaultgemma", "youtu", "zaya",
    # added 2026-12-01: the decoder-only causal LMs the list above had left out, those whose
    # attention transformers computes itself (Falcon, BLOOM, GPT-J, MPT...) among them
    "axk1", "axk2", "biogpt", "bloom", "codegen", "ctrl", "deepseek_v32", "deepseek_v4", "glm_moe_dsa", "gpt2",
    "gpt_bigcode", "gpt_neo", "gpt_neox_japanese", "gptj", "hrm_text", "hy_v4", "hyperclovax", "minicpm3",
    "modernbert-decoder", "mpt", "nanochat", "openai-gpt", "opt", "persimmon", "xglm",
)
"""Decoders VLMs are built on or could be, for comparison."""
CASES = ("text_only", "one_image", "two_images")
IMPLS = ("hf_bridge", "intree")
DETAIL_CHARS = 200
NOT_BUILT: dict[str, str] = {}
"""Each text type whose checkpoint did not build -> why, so that no implementation runs a half-written one."""


def check(text_type: str, scratch: Path, impl: str) -> tuple[int, str, float]:
    """(exit code, what did not pass, seconds) of validating the LLaVA over `text_type`."""
    from transformers import AutoConfig

    from hf_bridge.validate import command
    from hf_bridge.validate.stages import STAGES, TRANSFORMERS_REFUSED, brief, compared_with_nothing, first_of, not_passed
    from hf_bridge.zoo.backbones import build_backbone_model

    model_dir = scratch / text_type
    if text_type not in NOT_BUILT and not model_dir.exists():
        step = "not built"
        try:
            build_backbone_model(text_type, model_dir)
            step = "transformers cannot read back the config it saved"  # DBRX's, nested in LLaVA's
            AutoConfig.from_pretrained(model_dir)
        except Exception as exc:  # noqa: BLE001 - recorded with its cause
            NOT_BUILT[text_type] = f"{step}: {type(exc).__name__}: {brief(str(exc), DETAIL_CHARS)}"
    if text_type in NOT_BUILT:
        return 3, NOT_BUILT[text_type], 0.0
    start = time.perf_counter()
    report = command.run(model_dir, impl, case_names=list(CASES))
    others, unrun = not_passed(report.verdicts)
    said = first_of(others, "not passed", DETAIL_CHARS) if others else ""
    if not others and unrun:
        refused = [v for v in unrun if v.detail.startswith(TRANSFORMERS_REFUSED)]
        first = (refused or unrun)[0]
        nothing = sorted({stage for _, stage in compared_with_nothing(report.verdicts)}, key=STAGES.index)
        others_pass = " (the other stages pass)" if len(nothing) < len({v.stage for v in report.verdicts}) else ""
        unchecked = f"{', '.join(nothing)} compared with nothing{others_pass}: " if nothing else ""
        said = f"n/a: {unchecked}{brief(first.detail, DETAIL_CHARS)}"
    return report.exit_code, said, time.perf_counter() - start


def layer_kinds(model_dir: Path) -> str:
    """The decoder's layer types, as transformers' cache reads them."""
    from transformers import AutoConfig
    from transformers.cache_utils import get_layer_types_and_kwargs

    try:
        types, _ = get_layer_types_and_kwargs(AutoConfig.from_pretrained(model_dir).get_text_config())
    except Exception:  # noqa: BLE001 - a config transformers cannot read its layers from
        return "?"
    return ", ".join(dict.fromkeys(types))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+")
    parser.add_argument("--impls", nargs="+", choices=IMPLS, default=list(IMPLS))
    parser.add_argument("--out", type=Path, help="write the table here (markdown)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for group, types in (("carries state", CARRYING_STATE), ("attention only", ATTENTION_ONLY)):
            for text_type in types:
                if args.only and text_type not in args.only:
                    continue
                verdicts = []
                for impl in args.impls:
                    code, others, seconds = check(text_type, Path(scratch), impl)
                    verdict = "pass" if code == 0 else others if code == 2 and others.startswith("n/a") else f"exit {code}: {others}"
                    verdicts.append(verdict.replace("|", "\\|"))
                    print(f"{text_type} / {impl}: {verdicts[-1]} ({seconds:.0f} s)", flush=True)
                kinds = "?" if text_type in NOT_BUILT else layer_kinds(Path(scratch) / text_type)
                rows.append(f"| {text_type} | {group} | {kinds} | {' | '.join(verdicts)} |")
    if args.out:
        write_table(args.out, "Decoders behind a tower", "backbones.py",
                    "the zoo's LLaVA (CLIP tower, its processor) over transformers' default config of each text type, "
                    "shrunk as the sweep shrinks text, with its `BACKBONE_SETTINGS` where the default would not build or "
                    f"would lose a kind of layer (`hf_bridge/zoo/backbones.py`), cases {', '.join(CASES)}, every stage "
                    "through `hf-bridge validate --impl` against transformers.",
                    "Exit 1: a stage failed, named with its cause; exit 2: one could not be checked; exit 3: the "
                    "checkpoint did not build, or transformers could not read it back; n/a: transformers itself cannot "
                    "run the shrunk model's cases, and the stages it names were compared with nothing.",
                    ("text type", "kind", "layer types"), rows, impls=tuple(args.impls))


if __name__ == "__main__":
    main()
