"""Seconds per test file, from a suite run with `--durations=0`, for the workers' schedule.

    PYTEST_ADDOPTS=--durations=0 CI=true bash .ci/run > run.log 2>&1
    .venv/bin/python scripts/test_costs.py run.log            # writes tests/file_seconds.json

The suite's two workers take files in collection order (`--dist loadfile`); `conftest.py`
puts the costliest first, so no long file starts last and leaves one worker alone at the end.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

DURATION = re.compile(r"([\d.]+)s (?:setup|call|teardown)\s+tests/(test_\w+\.py)::")
OUT = Path(__file__).parent.parent / "tests" / "file_seconds.json"


def file_seconds(log: str) -> dict[str, float]:
    totals: collections.Counter[str] = collections.Counter()
    for match in DURATION.finditer(log):
        totals[match.group(2)] += float(match.group(1))
    return {name: round(seconds, 1) for name, seconds in totals.most_common()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    seconds = file_seconds(args.log.read_text())
    if not seconds:
        parser.error(f"no durations in {args.log}: run the suite with --durations=0")
    args.out.write_text(json.dumps(seconds, indent=1) + "\n")
    print(f"{len(seconds)} files, {sum(seconds.values()):.0f} s in all -> {args.out}")


if __name__ == "__main__":
    main()
