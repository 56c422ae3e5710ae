"""transformers' side of a check, in one clean interpreter: the references a run lacks
(`reference.py` caches them) and, for `hf-bridge validate`, the rows the HF model hands
its decoder (`encoder.hf_rows`), from one model load and one start-up.

Clean, because once vLLM's in-tree Transformers backend (which validate also runs) has
built an engine in a process, it has decorated HF model classes in place for
torch.compile, so an HF model in that process is not plain transformers any more
(hf_bridge decorates a twin instead: `compile_twin.py`). It runs beside its caller, who
may start vLLM meanwhile: `TransformersSide.result` waits for it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from . import parity
from .checkpoint import load_config

MODULE = "hf_bridge.validate.transformers_side"


@dataclasses.dataclass(frozen=True)
class RowsWanted:
    """`encoder.hf_rows` of `cases` at `feature_ids`' positions, to be saved to `path`."""

    path: Path
    cases: list[parity.Case]
    feature_ids: dict[str, int]


class TransformersSide:
    """transformers' side started in a clean interpreter: the references `wanted`
    ({dtype: [case keys]}; with `items_alone`, each item encoded alone) and, where given,
    the encoder `rows`."""

    def __init__(self, model_dir: str | Path, wanted: dict[str, list[str]], *, items_alone: bool = False,
                 rows: RowsWanted | None = None):
        work = [f"encoder rows for {len(rows.cases)} case(s)"] if rows is not None else []
        work += [f"{len(keys)} reference(s) in {dtype}" for dtype, keys in wanted.items()]
        attention = parity.reference_attention(load_config(model_dir)).get("attn_implementation")
        if work and attention:
            work[-1] += (f", with {attention} attention (the model soft-caps attention scores, which transformers' "
                         "default SDPA attention drops)")
        self.work = " and ".join(work) or "nothing"
        """What it computes, in words (a progress line)."""
        command = [sys.executable, "-m", MODULE, str(model_dir), json.dumps(wanted)]
        if items_alone:
            command.append("--items-alone")
        if rows is not None:
            command += ["--rows", str(rows.path), "--feature-ids", json.dumps(rows.feature_ids),
                        "--row-cases", json.dumps([c.key() for c in rows.cases])]
        self._process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def result(self) -> dict[str, dict[str, dict]]:
        """Waits for it; the references, {dtype: {case key: `parity.Result` fields, or
        {"error": transformers' own error}}}. Raises where the run itself failed."""
        stdout, stderr = self._process.communicate()
        if self._process.returncode != 0:
            raise RuntimeError(f"transformers' side of the check failed:\n{stderr[-4000:]}")
        return json.loads(stdout.strip().splitlines()[-1])

    def stop(self) -> None:
        """Ends it early (the caller gave up)."""
        if self._process.poll() is None:
            self._process.kill()
            self._process.communicate()


def compute_references(model_dir: str, wanted: dict[str, list[str]], processor, items_alone: bool = False,
                       float32_model=None) -> dict[str, dict[str, dict]]:
    """The references `wanted`, in this interpreter; `float32_model`, where loaded already, serves float32."""
    from .encoder import rows_placed_alone

    results: dict[str, dict[str, dict]] = {}
    for dtype, keys in wanted.items():
        model = float32_model if dtype == "float32" and float32_model is not None else parity.load_generation_model(model_dir, dtype)
        results[dtype] = {}
        for key in keys:
            case = parity.Case(**json.loads(key))
            try:
                with rows_placed_alone(model, processor, case) if items_alone else contextlib.nullcontext():
                    result = parity.hf_reference(model_dir, case, model=model, processor=processor)
                results[dtype][key] = dataclasses.asdict(result)
            except Exception as exc:  # recorded: transformers' own error makes the case N/A
                results[dtype][key] = {"error": f"{type(exc).__name__}: {exc}"}
        del model
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model_dir")
    parser.add_argument("references", help='JSON: {dtype ("float32", "float64" or "bfloat16"): [JSON of `parity.Case` fields, ...]}')
    parser.add_argument("--items-alone", action="store_true", help="encode each item alone (`encoder.rows_placed_alone`)")
    parser.add_argument("--rows", type=Path, help="save `encoder.hf_rows` here (.npz)")
    parser.add_argument("--feature-ids", help="JSON: modality -> token id, for --rows")
    parser.add_argument("--row-cases", help="JSON list of `parity.Case` keys, for --rows")
    args = parser.parse_args(argv)

    from .checkpoint import load_processor
    from .encoder import hf_rows, save_rows

    wanted = json.loads(args.references)
    processor = load_processor(args.model_dir)
    model = parity.load_generation_model(args.model_dir) if args.rows or "float32" in wanted else None
    if args.rows:
        cases = [parity.Case(**json.loads(key)) for key in json.loads(args.row_cases)]
        save_rows(args.rows, *hf_rows(model, processor, cases, json.loads(args.feature_ids)))
    print(json.dumps(compute_references(args.model_dir, wanted, processor, args.items_alone, model)))


if __name__ == "__main__":
    main()
