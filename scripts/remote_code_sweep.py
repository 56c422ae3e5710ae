"""Every zoo architecture hf_bridge serves, written as a checkpoint with its own code
(`hf_bridge.zoo.remote_code`: its classes beside the weights, a head transform only that
code knows) two ways, a config class of its own (a new model type) and transformers'
config with `auto_map` naming the model classes only, through `hf-bridge validate
--trust-remote-code`: every stage of the parity cases against transformers running the
same code.

    .venv/bin/python scripts/remote_code_sweep.py --out REMOTE_CODE.md   # all (about 25 minutes)
    .venv/bin/python scripts/remote_code_sweep.py --archs llava gemma3     # printed only
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def cases(arch: str) -> list[str]:
    from hf_bridge.zoo import SPECS

    return ["one_image", "two_images", "text_only"] + (["video"] if SPECS[arch].has_video else [])


CONFIGS = {"own config": True, "transformers config": False}
"""The table's columns: `remote_code_copy`'s `own_config`."""


def check(arch: str, root: Path, impl: str = "hf_bridge", own_config: bool = True) -> tuple[int, list[str]]:
    """(validate's exit code, each verdict that neither passed nor was n/a) for `arch`'s
    remote-code copy under `root` (written there once)."""
    from hf_bridge.validate.command import run
    from hf_bridge.validate.stages import not_passed
    from hf_bridge.zoo import build
    from hf_bridge.zoo.remote_code import remote_code_copy

    model_dir = root / (arch if own_config else f"{arch}_transformers_config")
    if not model_dir.exists():
        remote_code_copy(build(arch), model_dir, own_config=own_config)
    report = run(model_dir, impl, case_names=cases(arch), trust_remote_code=True)
    others = [f"{v.case} {v.stage}: {v.outcome}: {v.detail}" for v in not_passed(report.verdicts)[0]]
    return report.exit_code, others


def main() -> None:
    from hf_bridge.zoo import SPECS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archs", nargs="+", default=[a for a, spec in SPECS.items() if spec.servable])
    parser.add_argument("--out", type=Path, help="write the table here as Markdown")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for arch in args.archs:
            verdicts, notes = [], []
            for column, own_config in CONFIGS.items():
                started = time.monotonic()
                code, others = check(arch, Path(root), own_config=own_config)
                verdicts.append("pass" if code == 0 else f"exit {code}")
                notes += [f"{column}: {o[:200]}" for o in others]
                print(f"{arch}, {column}: {verdicts[-1]} ({time.monotonic() - started:.0f} s) {'; '.join(others)}", flush=True)
            rows.append((arch, ", ".join(cases(arch)), *verdicts, "; ".join(notes)))
    if args.out:
        lines = [
            "# Checkpoints with their own code",
            "",
            f"`scripts/remote_code_sweep.py` ({time.strftime('%Y-%m-%d')}): each zoo architecture hf_bridge serves, written as a "
            "checkpoint with its own code (`hf_bridge.zoo.remote_code`), through `hf-bridge validate --trust-remote-code` "
            "(hf_bridge; processing, encoder and decoding, strict). Two copies each: a config class of the checkpoint's "
            "own (a new model type), and transformers' config whose `auto_map` names the model classes only. "
            "Exit 1: a stage failed, named with its cause.",
            "",
            f"| architecture | cases | {' | '.join(CONFIGS)} | verdicts not passed |",
            "|---|---|" + "---|" * len(CONFIGS) + "---|",
            *(f"| {' | '.join(row)} |" for row in rows),
            "",
        ]
        args.out.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
