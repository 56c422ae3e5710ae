"""Prompts that mix modalities (an image and a video, an image and audio, all three),
which the standard cases never do: each zoo architecture and sweep type whose processor
takes two or more of them, every combination through `hf-bridge validate`'s `run(...)`
with the items held in memory (one 140 x 90 image, four 80 x 64 frames, one second of
16 kHz audio), every stage against transformers given the same prompt, through hf_bridge.

    .venv/bin/python scripts/mixed_modalities.py --out MIXED_MODALITIES.md   # all (about 25 minutes)
    .venv/bin/python scripts/mixed_modalities.py --types internvl gemma3n     # printed only
"""

from __future__ import annotations

import argparse
import functools
import itertools
import tempfile
import time
from pathlib import Path

ZOO = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "llava_onevision", "internvl", "smolvlm")
"""Zoo architectures whose processor takes images and video."""
SWEEP_TYPES = ("glm4v", "glm46v", "qwen3_5", "video_llama_3", "perception_lm", "cosmos3_edge", "exaone4_5",
               "hyperclovax_vision_v2", "llava_next_video", "video_llava", "minicpmv4_7", "muse_glimmer",
               "qwen2_5_omni", "gemma3n", "gemma4", "gemma4_unified", "cohere_compass", "ernie4_5_vl_moe", "glm4v_moe",
               "kimi_k25", "minicpmv4_6", "minimax_m3_vl", "nemotron_h_omni", "phi4_multimodal", "qwen3_5_moe",
               "qwen3_omni_moe", "qwen3_vl_moe")
"""Types outside the zoo taking two or more modalities, built as the sweep builds them: every
such type COVERAGE.md lists that hf_bridge serves (it refuses GLM-5-Next's and Qwen4-Exp's
sparse attention and Inkling's shared states at start)."""
PER_REQUEST = {"gemma4": {"num_frames": 4}, "gemma4_unified": {"num_frames": 4}}
"""Processor settings given per request where a type's defaults refuse the items: Gemma 4's
video processors sample 32 frames, more than the four given."""
DETAIL_CHARS = 200


@functools.cache
def items() -> dict[str, dict]:
    """The items of each modality, drawn once: every combination takes the same ones."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    seconds = np.arange(16000) / 16000
    clip = (0.3 * np.sin(2 * np.pi * 440 * seconds) + 0.05 * rng.standard_normal(16000)).astype(np.float32)
    return {
        "image": {"images": [Image.fromarray(rng.integers(0, 255, (90, 140, 3), dtype=np.uint8))]},
        "video": {"videos": [rng.integers(0, 255, (4, 64, 80, 3), dtype=np.uint8)]},
        "audio": {"audios": [(clip, 16000)]},
    }


def modalities(model_dir: Path) -> list[str]:
    """The modalities the checkpoint's processor has a part for, in `items`' order (an
    audio part is a `feature_extractor` or, as Phi-4-multimodal's, an `audio_processor`)."""
    from hf_bridge.probes import processor_modalities
    from hf_bridge.validate.checkpoint import load_processor

    parts = processor_modalities(load_processor(model_dir))
    return [m for m in items() if m in parts]


def checkpoint(name: str, scratch: Path) -> Path:
    from hf_bridge.clean_interpreter import CleanCall
    from hf_bridge.zoo import SPECS, build
    from hf_bridge.zoo.shrink import build_sweep_model

    if name in SPECS:
        return build(name)
    model_dir = scratch / name
    if not model_dir.exists():  # in a clean interpreter: an engine in this process decorates transformers' classes
        CleanCall(build_sweep_model, name, model_dir, doing=f"building the sweep's {name}").result()
    return model_dir


def check(model_dir: Path, combination: tuple[str, ...], per_request: dict | None = None) -> str:
    """The cell of one combination, a case of its own (`stages.case_cell`)."""
    from hf_bridge.validate.command import run
    from hf_bridge.validate.stages import case_cell

    given = {key: value for modality in combination for key, value in items()[modality].items()}
    report = run(model_dir, "hf_bridge", prompt="Compare these.", mm_processor_kwargs=per_request, **given)
    return case_cell(report.verdicts, DETAIL_CHARS)


def main() -> None:
    parser = table_script_parser(__doc__)
    parser.add_argument("--types", nargs="+", default=[*ZOO, *SWEEP_TYPES])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as temporary:
        scratch = args.scratch or Path(temporary)
        for name in args.types:
            model_dir, per_request = checkpoint(name, scratch), PER_REQUEST.get(name)
            for size in (2, 3):
                for combination in itertools.combinations(modalities(model_dir), size):
                    verdict = check(model_dir, combination, per_request).replace("|", "\\|")
                    given = " + ".join(combination) + (f" (per request `{per_request}`)" if per_request else "")
                    print(f"{name} / {given}: {verdict}", flush=True)
                    rows.append(f"| {name} | {given} | {verdict} |")
    if args.out:
        write_table(args.out, "Prompts that mix modalities", "mixed_modalities.py", __doc__,
                    "n/a: transformers itself raised on the prompt, so nothing was compared.", ("architecture", "items"), rows)


def table_script_parser(doc: str) -> argparse.ArgumentParser:
    """A table script's command line: where to keep the sweep's builds, and where to write its table."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--scratch", type=Path, help="keep the sweep's builds here (default: a temporary directory)")
    parser.add_argument("--out", type=Path, help="write the table here (markdown)")
    return parser


STRICT = "Decoding strict: identical prompt ids and greedy tokens, log-probs within 1e-3, float32."


def write_table(out: Path, title: str, script: str, doc: str, notes: str, columns: tuple[str, ...], rows: list[str],
                rule: str = STRICT, impls: tuple[str, ...] = ("hf_bridge",)) -> None:
    """A script's markdown table: what its docstring's first paragraph (or `doc`, one
    paragraph) says it runs, the rule decoding is judged by, `notes`, then a row per check,
    a verdict column per implementation of `impls` last."""
    header = (*columns, *impls)
    out.write_text(
        f"# {title}\n\n"
        f"`scripts/{script}` ({time.strftime('%Y-%m-%d')}): {' '.join(doc.split(chr(10) * 2)[0].split())} "
        f"{rule} {notes}\n\n"
        f"| {' | '.join(header)} |\n|{'---|' * len(header)}\n" + "\n".join(rows) + "\n"
    )


if __name__ == "__main__":
    main()
