"""The encoder stage of `hf-bridge validate`: each item's rows as the decoder receives them.

transformers: the rows the HF model's forward hands its decoder (`inputs_embeds`) at the
positions of the config's image/video/audio token, captured by a pre-hook on
`get_decoder()`, in a clean interpreter (as references are). vLLM: the rows its model
model's prefill receives (`inputs_embeds`: vLLM feeds multimodal models embeddings) at
the same positions, captured by a forward pre-hook. Both are the encoder's output as
placed, whatever the model's own splitting and merging, so one rule serves hf_bridge,
the in-tree backend and native models.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from . import parity


def hf_rows(model_dir: str | Path, cases: list[parity.Case], feature_ids: dict[str, int]):
    """(case name -> the rows transformers' decoder receives at feature-token positions, or
    the reason there are none; case name -> `encoder_row_count`). Runs in this
    interpreter: call `hf_rows_file`."""
    import torch

    from .checkpoint import load_processor

    processor = load_processor(model_dir)
    model = parity.load_generation_model(model_dir)
    captured: list[torch.Tensor] = []

    def keep_inputs_embeds(module, args, kwargs):
        if kwargs.get("inputs_embeds") is not None:
            captured.append(kwargs["inputs_embeds"].detach())

    model.get_decoder().register_forward_pre_hook(keep_inputs_embeds, with_kwargs=True)
    out: dict[str, np.ndarray | str] = {}
    counts: dict[str, int | str] = {}
    for case in cases:
        captured.clear()
        try:
            inputs = parity.hf_inputs(processor, case)
            inputs.pop("labels", None)
        except Exception as error:  # noqa: BLE001 - transformers' own refusal: nothing to compare
            out[case.name] = counts[case.name] = f"transformers: {type(error).__name__}: {error}"
            continue
        counts[case.name] = encoder_row_count(model, inputs, case)
        try:
            with torch.no_grad():
                model(**inputs)
        except Exception as error:  # noqa: BLE001 - transformers' own refusal: nothing to compare
            out[case.name] = f"transformers: {type(error).__name__}: {error}"
            continue
        if not captured:
            out[case.name] = "the HF model did not call its decoder with inputs_embeds"
            continue
        ids = inputs["input_ids"][0]
        positions = feature_positions(ids.tolist(), feature_ids)
        out[case.name] = captured[0][0][positions].float().numpy()
    return out, counts


TEXT_FIELDS = frozenset({"input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids", "labels"})


def encoder_row_count(model, inputs, case: parity.Case) -> int | str:
    """How many rows the HF model's own `get_<modality>_features` returns for the case's
    items (hf_bridge's `features.encode`, which calls exactly that): what the processor's
    placeholders must announce. Asked directly, so a processor that announces more than
    the tower gives is measured, where the model's forward would only raise."""
    import torch

    from ..features import encode

    hidden = model.config.get_text_config().hidden_size
    model = model.base_model  # the entries live there (Fuyu's generation class has none)
    fields = {k: v for k, v in inputs.items() if k not in TEXT_FIELDS}
    try:
        with torch.no_grad():
            return sum(encode(model, m, fields, hidden).shape[0] for m in case.media_counts)
    except Exception as error:  # noqa: BLE001 - reported: the count could not be taken
        return f"get_*_features raised {type(error).__name__}: {error}"


def feature_positions(prompt_ids: list[int], feature_ids: dict[str, int]) -> list[int]:
    """Where the HF model places encoder rows: every configured feature token, whatever the
    case's modality (InternVL's video frames take its image token)."""
    tokens = set(feature_ids.values())
    return [i for i, t in enumerate(prompt_ids) if t in tokens]


def hf_rows_file(model_dir: str | Path, cases: list[parity.Case], feature_ids: dict[str, int], path: Path) -> None:
    """`hf_rows` in a clean interpreter, saved to `path` (.npz, reasons under `__reasons__`)."""
    command = [sys.executable, "-m", "hf_bridge.validate.encoder", str(model_dir), str(path), json.dumps(feature_ids),
               *(c.key() for c in cases)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"transformers' encoder rows could not be computed:\n{done.stderr[-3000:]}")


def load_rows(path: Path) -> tuple[dict[str, np.ndarray | str], dict[str, int | str]]:
    """What `hf_rows_file` saved: (rows or reasons, encoder row counts) per case name."""
    with np.load(path) as saved:
        rows: dict[str, np.ndarray | str] = {k: saved[k] for k in saved.files if not k.startswith("__")}
        rows.update(json.loads(str(saved["__reasons__"])))
        counts = json.loads(str(saved["__counts__"]))
    return rows, counts


class RowCapture:
    """Keeps the `inputs_embeds` of the engine model's first forward after each `take`
    (the prompt's prefill, one request at a time, prefix caching off): vLLM feeds a
    multimodal model embeddings, its encoder's rows already placed. A forward pre-hook,
    installed through `LLM.apply_model`, leaves the model's methods as they are."""

    def __init__(self, llm):
        self.llm = llm
        llm.apply_model(self._install)

    @staticmethod
    def _install(model) -> None:
        model.hf_bridge_prefill = []

        def keep_first(module, args, kwargs):
            embeds = kwargs.get("inputs_embeds")
            if embeds is not None and not module.hf_bridge_prefill:
                module.hf_bridge_prefill.append(embeds.detach().float().cpu().clone())

        model.register_forward_pre_hook(keep_first, with_kwargs=True)

    def take(self, positions) -> np.ndarray | None:
        """The captured prefill's rows at `positions` (None: no forward had embeddings)."""

        def pop(model):
            kept = list(model.hf_bridge_prefill)
            model.hf_bridge_prefill.clear()
            return kept

        (kept,) = self.llm.apply_model(pop)
        if not kept:
            return None
        return kept[0].reshape(-1, kept[0].shape[-1])[list(positions)].numpy()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model_dir")
    parser.add_argument("out")
    parser.add_argument("feature_ids", help="JSON: modality -> token id")
    parser.add_argument("cases", nargs="+", help="JSON of `parity.Case` fields, one per case")
    args = parser.parse_args(argv)
    cases = [parity.Case(**json.loads(key)) for key in args.cases]
    rows, counts = hf_rows(args.model_dir, cases, json.loads(args.feature_ids))
    arrays = {k: v for k, v in rows.items() if isinstance(v, np.ndarray)}
    reasons = {k: v for k, v in rows.items() if isinstance(v, str)}
    np.savez(args.out, __reasons__=np.array(json.dumps(reasons)), __counts__=np.array(json.dumps(counts)), **arrays)


if __name__ == "__main__":
    main()
