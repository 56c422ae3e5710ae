"""Generate the parity table (architecture x case) from test results, for hf_bridge and
for vLLM's in-tree backend (`HF_BRIDGE_DISABLE=1`), side by side.

    .venv/bin/python scripts/parity_table.py              # runs tests/test_parity.py twice
    .venv/bin/python scripts/parity_table.py --update-readme
    .venv/bin/python scripts/parity_table.py --reports ours.jsonl in_tree.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = ["one_image", "two_images", "text_only", "video"]
MARKER = "<!-- parity-table -->"


def run_suite(report: Path, disable: bool) -> None:
    env = dict(os.environ, HF_BRIDGE_PARITY_REPORT=str(report), HF_BRIDGE_DISABLE="1" if disable else "0")
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_parity.py"],
                   cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def load(report: Path) -> dict[tuple[str, str], dict]:
    rows = {}
    for line in report.read_text().splitlines():
        entry = json.loads(line)
        rows[(entry["arch"], entry["case"])] = entry
    return rows


def cell(entry: dict | None, known: bool = False) -> str:
    """What happened (never the expectation's text); known divergences are marked xfail."""
    if entry is None:
        return "-"
    outcome, detail = entry["outcome"], entry["detail"]
    if outcome == "pass":
        return "pass"
    if outcome == "n/a":
        return f"n/a ({detail[:60]})"
    short = detail.split(";")[0][:70]
    return f"xfail ({outcome}): {short}" if known else f"**{outcome}**: {short}"


def table(ours: dict, in_tree: dict) -> str:
    sys.path.insert(0, str(ROOT / "tests"))
    from parity_expectations import XFAIL

    archs = list(dict.fromkeys(a for a, _ in [*ours, *in_tree]))
    lines = ["| architecture | case | hf_bridge | in-tree backend |", "|---|---|---|---|"]
    for arch in archs:
        for case in CASES:
            if (arch, case) not in ours and (arch, case) not in in_tree:
                continue
            lines.append(
                f"| {arch} | {case} | {cell(ours.get((arch, case)), (arch, case) in XFAIL)} "
                f"| {cell(in_tree.get((arch, case)))} |"
            )
    passed = sum(e["outcome"] == "pass" for e in ours.values())
    passed_in_tree = sum(e["outcome"] == "pass" for e in in_tree.values())
    lines.append("")
    lines.append(f"hf_bridge passes {passed}/{len(ours)}; the in-tree backend passes {passed_in_tree}/{len(in_tree)}.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reports", nargs=2, type=Path, metavar=("OURS", "IN_TREE"))
    parser.add_argument("--update-readme", action="store_true")
    args = parser.parse_args()
    if args.reports:
        ours_file, in_tree_file = args.reports
    else:
        tmp = Path(tempfile.mkdtemp())
        ours_file, in_tree_file = tmp / "hf_bridge.jsonl", tmp / "in_tree.jsonl"
        run_suite(ours_file, disable=False)
        run_suite(in_tree_file, disable=True)
    text = table(load(ours_file), load(in_tree_file))
    print(text)
    if args.update_readme:
        readme = ROOT / "README.md"
        head = readme.read_text().split(MARKER)[0]
        readme.write_text(f"{head}{MARKER}\n{text}\n")


if __name__ == "__main__":
    main()
