"""A checkpoint's copy with its output head tied to its input embeddings, stored as
transformers saves a tied model (Qwen2-VL-2B, LLaVA-OneVision-0.5B, InternVL's small
models ship so): `tie_word_embeddings` set, no `lm_head.weight` in the file. The zoo's
checkpoints keep an untied head: a random model whose head is its embedding table
mostly repeats its last token (Gemma's does), and only some stay non-degenerate tied."""

from __future__ import annotations

import json
from pathlib import Path

HEAD_WEIGHT = "lm_head.weight"


def tied_copy(model_dir: Path, into: Path, keep_head: bool = False) -> Path:
    """`into`, holding `model_dir` tied: the config says so where transformers 5 reads it
    (the top) and where transformers 4 did (the text config), and the head's weight is gone;
    `keep_head` keeps it, a head of its own the config wrongly calls tied."""
    from safetensors.torch import load_file, save_file

    from hf_bridge.zoo.variant import variant

    weights = model_dir / "model.safetensors"
    config = json.loads((model_dir / "config.json").read_text())
    keys = {"tie_word_embeddings": True}
    if "text_config" in config:
        keys["text_config"] = {**config["text_config"], "tie_word_embeddings": True}
    variant(model_dir, into, config=keys)
    if keep_head:
        return into
    (into / weights.name).unlink()  # the original's, linked: written through, it would change the original
    stored = load_file(weights)
    tensors = {name: tensor for name, tensor in stored.items() if not name.endswith(HEAD_WEIGHT)}
    assert len(tensors) == len(stored) - 1, f"{model_dir} stores no single {HEAD_WEIGHT} to drop"
    save_file(tensors, into / weights.name, metadata={"format": "pt"})
    return into
