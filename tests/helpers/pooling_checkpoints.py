"""Pooling checkpoints of a zoo model, written by transformers, with transformers' own
outputs for the standard cases beside them (run in a fresh process, as references are).

    python pooling_checkpoints.py embed ZOO_DIR OUT_DIR
        OUT_DIR: the HF base model (`AutoModel`, e.g. `Qwen3VLModel`) saved as users save
        an embedding checkpoint; the reference is each case's last hidden state at the
        last token, L2-normalised.
    python pooling_checkpoints.py classify ZOO_DIR OUT_DIR
        OUT_DIR: the model's `AutoModelForSequenceClassification` class over the same
        weights, with a seeded 3-label head; the reference is each case's probabilities.

Each writes OUT_DIR/pooling_reference.json: {case name: vector}. Several triples in one
call are written in turn, in one interpreter.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoModel, AutoModelForSequenceClassification, AutoProcessor

from hf_bridge.validate import parity

CASES = ("one_image", "two_images", "text_only")
REFERENCE = "pooling_reference.json"
NUM_LABELS = 3
HEAD_STD = 0.3
"""Large enough that the labels' probabilities differ visibly."""


def main(kind: str, zoo_dir: Path, out_dir: Path) -> None:
    if kind == "embed":
        model = parity.load_generation_model(zoo_dir).model
        model.config.architectures = [type(model).__name__]
    else:
        model = AutoModelForSequenceClassification.from_pretrained(zoo_dir, num_labels=NUM_LABELS, dtype=torch.float32)
        with torch.no_grad():
            model.score.weight.copy_(torch.randn(model.score.weight.shape, generator=torch.Generator().manual_seed(0)) * HEAD_STD)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    model.save_pretrained(out_dir)
    AutoProcessor.from_pretrained(zoo_dir).save_pretrained(out_dir)

    model = (AutoModel if kind == "embed" else AutoModelForSequenceClassification).from_pretrained(out_dir, dtype=torch.float32).eval()
    processor = AutoProcessor.from_pretrained(out_dir)
    reference = {}
    for name in CASES:
        with torch.no_grad():
            out = model(**parity.hf_inputs(processor, parity.standard_cases(64)[name]))
        pooled = torch.nn.functional.normalize(out.last_hidden_state[0, -1], dim=-1) if kind == "embed" else out.logits[0].softmax(-1)
        reference[name] = pooled.tolist()
    (out_dir / REFERENCE).write_text(json.dumps(reference))


if __name__ == "__main__":
    args = sys.argv[1:]
    for kind, zoo_dir, out_dir in zip(args[::3], args[1::3], args[2::3]):
        main(kind, Path(zoo_dir), Path(out_dir))
