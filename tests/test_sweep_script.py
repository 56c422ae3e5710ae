"""`scripts/sweep.py --update TABLE --types T --cases C` re-runs some cells of a committed
table and keeps every other cell as the table holds it: the table reads back into the
results it was rendered from, and a re-run cell takes its old row's place."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import sweep  # noqa: E402


def _write(path: Path, entries: list[dict]) -> Path:
    path.write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    return path


@pytest.mark.parametrize("table", ["COVERAGE.md", "COVERAGE_COMPILED.md"])
def test_a_committed_table_reads_back_into_the_results_it_was_rendered_from(table, tmp_path):
    entries = sweep.read_table(ROOT / table)
    assert {e["outcome"] for e in entries} >= {"pass", "fail", "error", "n/a"}
    assert sweep.render(_write(tmp_path / "results.jsonl", entries)) == (ROOT / table).read_text()


def test_a_re_run_case_replaces_its_own_cells_in_its_rows_place(tmp_path):
    results = _write(tmp_path / "results.jsonl", sweep.read_table(ROOT / "COVERAGE.md"))
    video = [json.loads(line) for line in results.read_text().splitlines()
             if json.loads(line)["type"] == "qwen2_5_vl" and json.loads(line)["case"] == "video"]
    assert len(video) == 3  # hf_bridge, in-tree, native
    sweep._forget(results, ["qwen2_5_vl"], {"video"})
    rendered = sweep.render(results)
    assert "| qwen2_5_vl | video |" not in rendered and "| qwen2_5_vl | one_image |" in rendered
    with results.open("a") as f:  # the re-run's cells, appended after every other type's
        f.writelines(json.dumps(entry) + "\n" for entry in video)
    assert sweep.render(results) == (ROOT / "COVERAGE.md").read_text()


def test_a_type_not_built_before_has_every_case_run_when_some_are_asked_for(tmp_path):
    results = _write(tmp_path / "results.jsonl", sweep.read_table(ROOT / "COVERAGE.md"))
    assert {"granite_speech", "florence2"} <= sweep._not_built(results, ["granite_speech", "florence2", "qwen2_5_vl"])
    assert "qwen2_5_vl" not in sweep._not_built(results, ["qwen2_5_vl"])
    sweep._forget(results, ["granite_speech"], {"audio"})
    assert sweep._not_built(results, ["granite_speech"]) == set()
    assert "| granite_speech |" not in sweep.render(results)
