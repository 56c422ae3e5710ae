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

import contextlib
import dataclasses
import json
from pathlib import Path

from . import parity
from .checkpoint import load_config
from ..clean_interpreter import CleanCall


@dataclasses.dataclass(frozen=True)
class RowsWanted:
    """`encoder.hf_rows` of `cases` at `feature_ids`' positions, to be saved to `path`."""

    path: Path
    cases: list[parity.Case]
    feature_ids: dict[str, int]


class TransformersSide:
    """transformers' side started in a clean interpreter (`clean_interpreter.py`): the
    references `wanted` ({dtype: [case keys]}; with `items_alone`, each item encoded
    alone) and, where given, the encoder `rows`."""

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
        self._call = CleanCall(transformers_side, str(model_dir), wanted, items_alone, rows,
                               doing="transformers' side of the check")

    def result(self) -> dict[str, dict[str, dict]]:
        """Waits for it; the references, {dtype: {case key: `parity.Result` fields, or
        {"error": transformers' own error}}}. Raises where the run itself failed."""
        return json.loads(json.dumps(self._call.result()))  # as the cache holds them: lists, not tuples

    def stop(self) -> None:
        """Ends it early (the caller gave up)."""
        self._call.stop()


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


def transformers_side(model_dir: str, wanted: dict[str, list[str]], items_alone: bool = False,
                      rows: RowsWanted | None = None) -> dict[str, dict[str, dict]]:
    """`TransformersSide`'s work, in this interpreter, which must be clean: one model
    load serves the encoder rows and the float32 references."""
    from .checkpoint import load_processor
    from .encoder import hf_rows, save_rows

    processor = load_processor(model_dir)
    model = parity.load_generation_model(model_dir) if rows is not None or "float32" in wanted else None
    if rows is not None:
        save_rows(rows.path, *hf_rows(model, processor, rows.cases, rows.feature_ids))
    return compute_references(model_dir, wanted, processor, items_alone, model)
