"""A checkpoint in its model's original layout streams into the names and values
transformers itself loads (`hf_bridge/checkpoint_layout.py`).

transformers 5 writes the original layout back on save, as the hub holds it: Kimi-K2.5
fuses q/k/v into `wqkv` with a RoPE permutation (a converter), GLM-ASR nests its text
model as `language_model.model` (renamings at two scopes), Ernie 4.5 VL stores its text
and vision experts as one list of per-expert tensors, which transformers splits in two and
fuses (a converter fed by a wildcard pattern: fed one tensor at a time, it raised
`stack expects a non-empty TensorList`). The check runs in a fresh
interpreter: an engine built earlier in this process has decorated the HF classes.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

COMPARE = """
import json, sys, torch
from pathlib import Path
from safetensors.torch import load_file
from transformers import AutoConfig
from hf_bridge.checkpoint_layout import checkpoint_transforms, transformers_layout
from hf_bridge.validate.parity import load_generation_model
from hf_bridge.zoo.shrink import build_sweep_model

directory = build_sweep_model(sys.argv[1], Path(sys.argv[2]))
config = AutoConfig.from_pretrained(directory)
stored = load_file(str(directory / "model.safetensors"))
model = load_generation_model(directory)
expected = model.state_dict()
placed = sys.argv[3] == "placed"  # as if vLLM's own mapping placed every stored name
streamed = dict(transformers_layout(stored.items(), config, model.model, loads_as_is=lambda name: placed))
print(json.dumps({
    "as_stored": sorted(k for k in streamed if k in stored and torch.equal(streamed[k], stored[k])),
    "transforms": len(checkpoint_transforms(config, model.model)),
    "renamed": sorted(set(stored) - set(expected)),
    "missing": sorted(set(expected) - set(streamed)),
    "extra": sorted(set(streamed) - set(expected)),
    "differ": sorted(k for k in expected if k in streamed and not torch.equal(expected[k], streamed[k])),
}))
"""


@pytest.mark.parametrize("model_type", ["kimi_k25", "glmasr", "ernie4_5_vl_moe"])
def test_original_layout_streams_as_transformers_loads_it(model_type, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", COMPARE, model_type, str(tmp_path / model_type), "unplaced"], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["transforms"] > 0
    assert report["renamed"], "the stored checkpoint must be in the original layout, or this proves nothing"
    assert report["missing"] == [] and report["extra"] == [] and report["differ"] == []


def test_a_tensor_stored_in_another_layout_is_converted_where_vllm_places_its_name(tmp_path):
    """vLLM's fused-MoE layer loads the name Inkling stores its experts under
    (`experts.w13_weight`), but reads the tensor as stored, where transformers interleaves
    gate and up rows into `gate_up_proj` (`Interleave`): fed as stored, it raised, and read
    as a fused [gate; up] it would compute other experts. A converter that re-lays a stored
    tensor runs even where vLLM's mapping places the name; names only renamed reach vLLM
    as stored, for its own renaming."""
    done = subprocess.run(
        [sys.executable, "-c", COMPARE, "inkling_mm_model", str(tmp_path / "inkling"), "placed"], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    relaid = [name for name in report["renamed"] if ".w13" in name]
    assert relaid, "the stored checkpoint must hold Inkling's interleaved w13 tensors, or this proves nothing"
    assert not set(relaid) & set(report["as_stored"]) and not set(relaid) & set(report["extra"])
    converted = {name.replace("model.llm.", "model.language_model.").replace("experts.w13_weight", "experts.gate_up_proj")
                 for name in relaid if name.endswith("experts.w13_weight")}
    assert converted and not converted & set(report["missing"] + report["differ"])
    assert set(report["extra"]) <= set(report["as_stored"]), "names vLLM places reach it as stored"


def test_checkpoint_without_transforms_streams_unchanged():
    import torch
    from transformers import LlavaConfig

    from hf_bridge.checkpoint_layout import transformers_layout

    weights = [("model.language_model.embed_tokens.weight", torch.ones(2, 2))]
    config = LlavaConfig()
    config.architectures = ["NoSuchArchitecture"]
    config.model_type = "no_such_type"
    assert list(transformers_layout(weights, config)) == weights
