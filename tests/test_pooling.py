"""vLLM's pooling runner through hf_bridge: embedding and classification checkpoints of
VLMs pool what transformers computes.

vLLM resolves a multimodal checkpoint whose architecture defaults to pooling (a base
model saved as `Qwen3VLModel`, a `Gemma3ForSequenceClassification`) to its in-tree
pooling classes; with hf_bridge installed they are hf_bridge's (`pooling.py`). Measured
on the in-tree classes: Qwen3-VL's image embeddings are off by up to 3.3e-2 (deepstack
dropped), Gemma3's base model fails at its first image, and Gemma3's classifier does not
load (`score.weight`).

The checkpoints and transformers' outputs come from a fresh process
(`helpers/pooling_checkpoints.py`). Pooled vectors are compared within `POOLED_ATOL`
(float32, measured 2e-7 to 1.2e-5).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hf_bridge.validate import parity
from helpers.pooling_checkpoints import REFERENCE

HELPER = Path(__file__).parent / "helpers" / "pooling_checkpoints.py"
POOLED_ATOL = 1e-4


BUILT = [("embed", "llava"), ("embed", "qwen3_vl"), ("embed", "gemma3"), ("embed", "qwen3_vl_moe"), ("embed", "chameleon"),
         ("classify", "gemma3"), ("embed", "qwen3_5")]
GENERIC = {"qwen3_5"}
"""Sources built by the sweep's generic shrinker rather than taken from the zoo."""


@pytest.fixture(scope="module")
def pooling_checkpoints(zoo, generic, tmp_path_factory) -> dict[tuple[str, str], tuple[Path, dict[str, list[float]]]]:
    """(kind, source name) -> (checkpoint, transformers' pooled vectors), every one of
    `BUILT` written in one fresh interpreter."""
    root = tmp_path_factory.mktemp("pooling")
    out = {(kind, name): root / f"{name}-{kind}" for kind, name in BUILT}
    source = lambda name: generic(name) if name in GENERIC else zoo(name)  # noqa: E731
    args = [str(x) for (kind, name), out_dir in out.items() for x in (kind, source(name), out_dir)]
    done = subprocess.run([sys.executable, str(HELPER), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return {key: (out_dir, json.loads((out_dir / REFERENCE).read_text())) for key, out_dir in out.items()}


def pooled(llm, model_dir: Path, names, *, classify: bool = False) -> dict[str, np.ndarray]:
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(model_dir)
    cases = parity.standard_cases(64)
    requests = [parity.vllm_request(processor, cases[name]) for name in names]
    if classify:
        outputs = [o.outputs.probs for o in llm.classify(requests)]
    else:
        outputs = [o.outputs.embedding for o in llm.embed(requests)]
    return {name: np.asarray(out) for name, out in zip(names, outputs)}


def assert_pooled_like(reference: dict[str, list[float]], got: dict[str, np.ndarray]) -> None:
    for name, expected in reference.items():
        difference = float(np.abs(got[name] - np.asarray(expected)).max())
        assert difference <= POOLED_ATOL, f"{name}: pooled vectors differ by up to {difference:.1e}"
    assert not np.allclose(got["one_image"], got["text_only"], atol=1e-2), "the image must change what is pooled"


@pytest.mark.engine
@pytest.mark.parametrize(
    ("name", "architecture"),
    [
        ("llava", "HFBridgeEmbeddingModel"),
        ("qwen3_vl", "HFBridgeEmbeddingModel"),
        ("gemma3", "HFBridgeEmbeddingModel"),
        ("qwen3_vl_moe", "HFBridgeMoEEmbeddingModel"),
        ("qwen3_5", "HFBridgeHybridEmbeddingModel"),
    ],
)
def test_base_model_checkpoint_embeds_as_transformers(pooling_checkpoints, engines, name, architecture):
    """A VLM's base model saved as an embedding checkpoint (`LlavaModel`, `Qwen3VLModel`
    with deepstack and M-RoPE, `Gemma3Model`, `Qwen3VLMoeModel`, `Qwen3_5Model` with a
    linear-attention layer, `state_layers.py`): hf_bridge's embedding class, pooling the
    last token by default, gives transformers' last hidden state there, image or not.
    vLLM has no Transformers-backend class for an MoE VLM's embeddings: without hf_bridge
    it serves its native Qwen3-VL-MoE, which fails to load the tiny checkpoint
    (`norm_topk_prob`)."""
    model_dir, reference = pooling_checkpoints["embed", name]
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2})
    config = llm.llm_engine.model_config
    assert config.architecture == architecture
    assert config.pooler_config.seq_pooling_type == "LAST"
    assert_pooled_like(reference, pooled(llm, model_dir, reference))


@pytest.mark.engine
def test_generation_checkpoint_under_the_pooling_runner_embeds_as_its_base_model(zoo, pooling_checkpoints, engines):
    """`runner="pooling"` on a generation checkpoint: vLLM wraps hf_bridge's generation
    class in its own adapter; Qwen3-VL embeds as its base model does in transformers."""
    _, reference = pooling_checkpoints["embed", "qwen3_vl"]
    llm = engines.get(zoo("qwen3_vl"), limit_mm_per_prompt={"image": 2}, runner="pooling", convert="embed")
    assert llm.llm_engine.model_config.architecture == "HFBridgeForConditionalGeneration"
    assert_pooled_like(reference, pooled(llm, zoo("qwen3_vl"), reference))


@pytest.mark.engine
def test_sequence_classification_checkpoint_classifies_as_transformers(pooling_checkpoints, engines):
    """`Gemma3ForSequenceClassification`: its `score` head loads, reads the last token's
    state as transformers' does, and gives transformers' probabilities."""
    model_dir, reference = pooling_checkpoints["classify", "gemma3"]
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2})
    assert llm.llm_engine.model_config.architecture == "HFBridgeForSequenceClassification"
    assert_pooled_like(reference, pooled(llm, model_dir, reference, classify=True))


@pytest.mark.engine
def test_flat_config_base_model_embeds_as_transformers(pooling_checkpoints, engines):
    """`ChameleonModel`, whose config has no `vision_config`: vLLM resolves it to its
    text-only `TransformersEmbeddingModel`, which refuses images ("Multi-modal processor
    not available for text-only models"); its processor takes images, so hf_bridge serves
    it. A text-only prompt gets the separator Chameleon's processor appends, as in
    generation (`text_only_prompts.py`), so it embeds as in transformers too."""
    model_dir, reference = pooling_checkpoints["embed", "chameleon"]
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2})
    assert llm.llm_engine.model_config.architecture == "HFBridgeEmbeddingModel"
    assert_pooled_like(reference, pooled(llm, model_dir, ("one_image", "two_images", "text_only")))
