"""Tensor and pipeline parallel through vLLM's own distributed engine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hf_bridge.server import free_port
from hf_bridge.validate import parity
from helpers.scenarios import run_scenario


@pytest.mark.slow
def test_tensor_parallel_2_matches_a_single_worker(zoo, engines, monkeypatch):
    from transformers import AutoProcessor

    model_dir = zoo("llava")
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "0|1"))
    tp = run_scenario("tensor-parallel", model_dir)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND")
    processor = AutoProcessor.from_pretrained(model_dir)
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2})
    for name in ("one_image", "two_images"):
        single = parity.vllm_result(llm, processor, parity.standard_cases(64)[name])
        assert tp[name]["prompt_ids"] == single.prompt_ids
        assert tp[name]["tokens"] == single.tokens, name
        worst = max(abs(a - b) for a, b in zip(tp[name]["token_logprobs"], single.token_logprobs))
        assert worst <= parity.ATOL, worst


@pytest.mark.slow
@pytest.mark.parametrize(("model_type", "names"), [("ernie4_5_vl_moe", ["one_image", "two_images", "video"]),
                                                   ("qwen3_asr", ["audio"]), ("gemma3n", ["text_only", "one_image", "audio"])])
def test_tensor_parallel_2_keeps_whole_what_sharding_would_break(generic, model_type, names):
    """Ernie 4.5 VL's vision tower plans its fused `qkv` column-wise, then reshapes it to all
    its heads: sharded as planned, the engine did not start (`The size of tensor a (8) must
    match the size of tensor b (16)`). Qwen3-ASR's audio encoder has no plan, but vLLM fuses
    any attention's q, k and v into head-sharded layers, and it reshapes by its full head
    count: its first audio stopped the engine (`shape '[-1, 32]' is invalid`). Gemma 3n's
    MLP takes statistics over the units its plan shards (`kept_modules.statistics_over_sharded_units`):
    each rank took them over its half, and text alone came out 0.06 off in log-probs,
    greedy tokens off from the fifth. Towers, and such MLPs, are kept whole on every rank,
    the text model sharded as planned, experts by modality included: TP=2 keeps strict
    parity with transformers."""
    from hf_bridge.validate.reference import references

    model_dir = generic.build({model_type: 0})[model_type]
    tp = run_scenario("tensor-parallel", model_dir, HF_BRIDGE_TP_CASES=",".join(names),
                      VLLM_CPU_OMP_THREADS_BIND=os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "0|1"))
    standard = parity.standard_cases(64)
    for name, reference in zip(names, references(model_dir, [standard[name] for name in names])):
        assert name in tp, tp["log"][-3000:]
        assert parity.compare(reference, parity.Result(**tp[name]["result"])) == [], name


@pytest.mark.slow
@pytest.mark.parametrize(("text_type", "settings", "per_rank"), [
    # query heads per layer, 2 and 4: each rank takes half of each layer's, over one key head
    ("laguna", {}, {"0": [1, 1], "1": [2, 1]}),
    # 4 query heads over 2 key heads (full attention) and 4 (sliding window): each rank takes
    # half of each; with 1 key head, fewer than the ranks, the engine stops (README, Parallel)
    ("mimo_v2_flash", {"num_key_value_heads": 2}, {"0": [2, 1], "1": [2, 2]}),
])
def test_tensor_parallel_2_splits_the_heads_a_module_counts(backbones, text_type, settings, per_rank):
    """Laguna and MiMo-V2-Flash count heads on their attention modules beside the config
    (`layer_heads.py`): over two tensor-parallel ranks each rank's layer is built with its
    share of them, and text and an image keep strict parity with transformers."""
    from hf_bridge.validate.reference import references

    model_dir = backbones(text_type, **settings)
    names = ["text_only", "one_image"]
    tp = run_scenario("tensor-parallel", model_dir, HF_BRIDGE_TP_CASES=",".join(names), VLLM_ALLOW_INSECURE_SERIALIZATION="1",
                      VLLM_CPU_OMP_THREADS_BIND=os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "0|1"))
    layer = "model.language_model.layers.{}.self_attn.attn"
    assert tp["heads"]["ranks"] == [{layer.format(index): heads for index, heads in per_rank.items()}] * 2, tp["log"][-3000:]
    standard = parity.standard_cases(64)
    for name, reference in zip(names, references(model_dir, [standard[name] for name in names])):
        assert not parity.is_degenerate(reference.tokens), (name, reference.tokens)
        assert parity.compare(reference, parity.Result(**tp[name]["result"])) == [], name


HELPERS = Path(__file__).parent / "helpers"


def _process_env(cpus: str) -> dict[str, str]:
    env = dict(os.environ, VLLM_CPU_OMP_THREADS_BIND=os.environ.get("VLLM_CPU_OMP_THREADS_BIND", cpus))
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # pipeline stages are processes of their own
    return env


def _pipeline_parallel(model_dir, side: int, cases: str, engine_kwargs: dict | None = None,
                       cpus: str = "0|1") -> dict[str, list[str]]:
    extra = [json.dumps(engine_kwargs)] if engine_kwargs else []
    done = subprocess.run([sys.executable, str(HELPERS / "pipeline_parallel.py"), str(model_dir), str(side), cases, *extra],
                          capture_output=True, text=True, timeout=900, env=_process_env(cpus))
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line[5:]) for line in done.stdout.splitlines() if line.startswith("CASE ")]
    return {line["case"]: line["problems"] for line in lines}


@pytest.mark.slow
def test_pipeline_parallel_2_carries_side_features_to_the_later_rank(zoo):
    """Pipeline parallel 2 on one node. Qwen3-VL's deepstack features are computed with the
    image on the first rank, travel to the second in the intermediate tensors, and each rank
    adds the levels of its own decoder layers (the tiny Qwen3-VL has two layers and two
    levels: one per rank)."""
    assert _pipeline_parallel(zoo("qwen3_vl"), 64, "text_only,one_image,two_images,video") == {
        "text_only": [], "one_image": [], "two_images": [], "video": []
    }


@pytest.mark.slow
def test_pipeline_parallel_2_gives_the_last_rank_a_tied_heads_embeddings(zoo, tmp_path):
    """A tied head (`helpers/tied_checkpoint.py`) sits on the last rank, the input embeddings
    it shares on the first: the last rank keeps a copy of the embeddings to load the head
    from, as vLLM's Transformers backend does for a model that ties. Untied there, the head
    keeps the random values it was made with."""
    from helpers.tied_checkpoint import tied_copy

    model_dir = tied_copy(zoo("qwen2_vl"), tmp_path / "qwen2_vl-tied")
    assert _pipeline_parallel(model_dir, 64, "text_only,one_image") == {"text_only": [], "one_image": []}


@pytest.mark.slow
def test_pipeline_parallel_2_across_two_nodes_reaches_parity(zoo, tmp_path):
    """vLLM's own multi-node launch (multiprocess backend, `--nnodes 2`): the head node here,
    a headless second node in a process of its own, joined over TCP as two machines would be,
    one core each. The plugin registers on the second node as on the head. LLaVA's pipeline
    parallel parity is checked here only: one node's ranks split it as two nodes' do."""
    model_dir = zoo("llava")
    port = free_port()
    # both nodes build the same engine config (`pipeline_parallel.ENGINE_KWARGS`); the head is
    # an offline `LLM`, the node a server launch, whose default step budget differs
    both = {"max_num_batched_tokens": 4096}
    node_log = tmp_path / "second_node.log"
    with node_log.open("w") as log:
        # INFO for the start-up line checked below: in-process engines of earlier tests set
        # this process's VLLM_LOGGING_LEVEL to WARNING (`validate.engine`), and the node inherits it
        node = subprocess.Popen([sys.executable, str(HELPERS / "headless_node.py"), str(model_dir), str(port), json.dumps(both)],
                                stdout=log, stderr=subprocess.STDOUT, env=dict(_process_env("1"), VLLM_LOGGING_LEVEL="INFO"),
                                start_new_session=True)
    try:
        problems = _pipeline_parallel(model_dir, 64, "one_image,two_images,text_only", cpus="0", engine_kwargs={
            **both, "nnodes": 2, "node_rank": 0, "master_addr": "127.0.0.1", "master_port": port})
    finally:
        os.killpg(node.pid, signal.SIGKILL)  # a headless node outlives its head
        node.wait()
    assert problems == {"one_image": [], "two_images": [], "text_only": []}, f"second node's log: {node_log}"
    assert "handles LlavaForConditionalGeneration" in node_log.read_text(), f"second node's log: {node_log}"
