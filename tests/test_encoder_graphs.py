"""Vision-encoder graphs over token budgets (`hf_bridge.encoder_graphs`), without a GPU.

vLLM's real `EncoderCudaGraphManager` is built from the engine's `VllmConfig` and
hf_bridge's loaded model; only `torch.cuda.CUDAGraph`/`torch.cuda.graph` are replaced,
by a frozen graph that records the operators run inside the capture block and replays
them on whatever the static buffers hold (`frozen.py`).

Tolerance: exact equality. On the CPU the graph replays the very operators eager runs;
the only difference is how many tiles sit in a batch, and every operator of these
towers computes each tile's rows independently of the others (row-wise GEMMs,
per-tile attention), so not even float reassociation differs.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import torch

from hf_bridge.encoder_graphs.frozen import FrozenGraph, frozen_graph, standing_in_for_cuda_graphs
from hf_bridge.encoder_graphs.tiles import Ineligible, ProbedItem, TileLayout, budget_range, tile_layout
from hf_bridge.validate import parity

F = True
BENCH = Path(__file__).parent.parent / "bench"


# -- pure: eligibility and budgets ------------------------------------------------------------


def test_tile_stack_with_fixed_tokens_per_tile_is_eligible():
    probes = [ProbedItem({"pixel_values": ((1, 3, 8, 8), F)}, 4), ProbedItem({"pixel_values": ((5, 3, 8, 8), F)}, 20)]
    assert tile_layout(probes) == TileLayout("pixel_values", (3, 8, 8), 4)


@pytest.mark.parametrize(
    "probes,reason",
    [
        ([ProbedItem({"pixel_values": ((1, 3, 8, 8), F), "image_sizes": ((1, 2), False)}, 9)], "depends on more than"),
        ([ProbedItem({"pixel_values": ((1, 3, 8, 8), F)}, 9), ProbedItem({"pixel_values": ((1, 3, 8, 12), F)}, 12)], "change shape"),
        ([ProbedItem({"pixel_values": ((1, 5, 3, 8, 8), F)}, 88), ProbedItem({"pixel_values": ((1, 5, 3, 8, 8), F)}, 70)], "fixed number per tile"),
        ([ProbedItem({"a": ((1, 4), F), "b": ((1, 4), F)}, 4)], "2 pixel fields"),
    ],
)
def test_towers_whose_output_depends_on_more_than_tile_count_are_not(probes, reason):
    result = tile_layout(probes)
    assert isinstance(result, Ineligible) and reason in result.reason, result


def test_budget_range_is_whole_tiles_within_the_step():
    layout = TileLayout("pixel_values", (3, 8, 8), 256)
    assert budget_range(layout, max_tiles_per_item=13, max_items=2, max_tokens=4000) == (256, 3840)
    assert budget_range(layout, max_tiles_per_item=3, max_items=2, max_tokens=8192) == (256, 1536)
    assert budget_range(layout, max_tiles_per_item=1, max_items=1, max_tokens=100) == (256, 256)


# -- the frozen graph itself ----------------------------------------------------------------------


def test_frozen_graph_replays_on_current_buffer_contents_and_freezes_python():
    # inputs whose product stays positive: with random signs, relu could zero all eight entries,
    # where both branches give 1 and the last assertion failed (seen once in CI)
    weight = torch.eye(4) + torch.rand(4, 4)
    static_in, static_out = torch.zeros(2, 4), torch.empty(2, 4)
    calls = []

    def forward(x):
        scale = -1.0 if not calls else 2.0  # a Python value, decided once, at capture
        calls.append(1)
        return torch.relu(x @ weight) * scale + 1

    graph = FrozenGraph()
    with frozen_graph(graph):
        static_out.copy_(forward(static_in))
    new = torch.rand(2, 4) + 0.5
    static_in.copy_(new)
    graph.replay()
    assert len(calls) == 1  # replay ran no Python
    assert torch.equal(static_out, torch.relu(new @ weight) * -1.0 + 1)  # the frozen branch
    assert not torch.equal(static_out, forward(new))  # eager takes the other one


def _capture_rules():
    """`bench/capture_rules_gpu.py`: small forwards with torch.cuda.graph's verdicts, measured on an H100."""
    spec = importlib.util.spec_from_file_location("capture_rules_gpu", BENCH / "capture_rules_gpu.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # its dataclasses look it up there
    spec.loader.exec_module(module)
    return module


RULES = _capture_rules()


@pytest.mark.parametrize("name", list(RULES.CASES))
def test_frozen_graph_gives_cuda_captures_verdict(name):
    """Each case as an H100 judged it: refused for its own cause, or captured and replayed
    on fresh input equal to eager. The stand-in may be stricter than CUDA (STRICTER), never looser."""
    case, got = RULES.CASES[name], RULES.verdict(name, "cpu")
    if case.stand_in is None:
        assert case.cuda == RULES.CAPTURED
        assert got == {"verdict": RULES.CAPTURED, "replay": "equal to eager"}
    else:
        assert case.cuda == RULES.REFUSED or name in RULES.STRICTER
        assert got["verdict"] == RULES.REFUSED and got["why"].startswith(f"CaptureRefused: {case.stand_in}"), got


def test_the_stand_in_is_stricter_than_cuda_on_two_cases_only():
    assert RULES.STRICTER == {"host_scalar_tensor_operand", "one_hot_with_classes"}


# -- eligibility of zoo towers, from their real processors -----------------------------------------

EXPECTED_LAYOUTS = {
    "internvl": TileLayout("pixel_values", (3, 56, 56), 4),  # crop_to_patches tiles, pixel shuffle
    "llava": TileLayout("pixel_values", (3, 56, 56), 16),
    "gemma3": TileLayout("pixel_values", (3, 56, 56), 4),
    "aya_vision": TileLayout("pixel_values", (3, 56, 56), 4),
    "paligemma": TileLayout("pixel_values", (3, 56, 56), 16),
    "chameleon": TileLayout("pixel_values", (3, 32, 32), 16),
    "fuyu": TileLayout("image_patches", (588,), 1),  # each 14x14 patch is a tile of one token
}
NOT_ELIGIBLE = {
    "idefics3": "depends on more than",  # patch attention masks beside the tiles
    "llava_next": "depends on more than",  # image sizes decide unpadding and newlines
    "mistral3": "depends on more than",  # image sizes; tiles follow the aspect ratio
    "qwen2_vl": "depends on more than",  # grid_thw
}


@pytest.mark.parametrize("arch", [*EXPECTED_LAYOUTS, *NOT_ELIGIBLE])
def test_zoo_eligibility_is_read_off_the_processor(arch, zoo):
    from hf_bridge.encoder_graphs.protocol import probe_tile_layout
    from hf_bridge.inspect import build_processor

    layout = probe_tile_layout(build_processor(zoo(arch)).info)
    if arch in EXPECTED_LAYOUTS:
        assert layout == EXPECTED_LAYOUTS[arch]
    else:
        assert isinstance(layout, Ineligible) and NOT_ELIGIBLE[arch] in layout.reason, layout


# -- end to end: vLLM's manager on hf_bridge's InternVL ----------------------------------------------

IMAGES = {"one_tile": (64, 64), "five_tiles": (300, 200), "three_tiles": (120, 60)}


@pytest.fixture(scope="module")
def internvl(zoo, engines):
    llm = engines.get(zoo("internvl"), limit_mm_per_prompt={"image": 3, "video": 1})
    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    return llm, model


def batch_of(model_dir, names: list[str]) -> dict:
    """Batched encoder inputs for these images, as vLLM's runner hands them to the model."""
    from vllm.multimodal.utils import group_and_batch_mm_kwargs

    from hf_bridge.inspect import build_processor

    processor = build_processor(model_dir)
    images = [parity.test_image(*IMAGES[n], seed=list(IMAGES).index(n) + 1) for n in names]
    inserts_itself = processor.info.frame("image").inserts_item  # Fuyu: no placeholders in prompts
    placeholder = "" if inserts_itself else processor.info.probes.placeholder_text("image")
    out = processor(placeholder * len(images), processor.info.parse_mm_data({"image": images}), hf_processor_mm_kwargs={})
    ((_, _, batch),) = list(group_and_batch_mm_kwargs([("image", item) for item in out["mm_kwargs"]["image"]], device="cpu"))
    return batch


def manager_for(llm, model, budgets: list[int], max_items: int = 3):
    from vllm.v1.worker.encoder_cudagraph import EncoderCudaGraphManager

    config = llm.llm_engine.vllm_config
    config.compilation_config.encoder_cudagraph_token_budgets = budgets
    config.compilation_config.encoder_cudagraph_max_vision_items_per_batch = max_items
    manager = EncoderCudaGraphManager(config, torch.device("cpu"), torch.float32, model)
    with standing_in_for_cuda_graphs():
        manager.capture(graph_pool=None)
    return manager


def eager(model, batch) -> list[torch.Tensor]:
    with torch.inference_mode():
        return list(model.embed_multimodal_eagerly(dict(batch)))


def run(manager, batch) -> list[torch.Tensor]:
    with torch.inference_mode():
        return manager.execute(dict(batch))


@pytest.mark.engine
def test_hf_bridge_model_speaks_vllms_protocol(internvl):
    from vllm.model_executor.models.interfaces import supports_encoder_cudagraph

    _, model = internvl
    assert supports_encoder_cudagraph(model)
    assert model.tile_layout == EXPECTED_LAYOUTS["internvl"]


@pytest.mark.engine
def test_packed_budgets_equal_eager_per_item_and_count_hits(internvl, zoo):
    llm, model = internvl
    batch = batch_of(zoo("internvl"), ["one_tile", "five_tiles", "three_tiles"])
    manager = manager_for(llm, model, budgets=[8, 16, 32])
    assert all(g.graph.num_ops > 0 for g in manager.budget_graphs["default"].values())
    got = run(manager, batch)
    expected = eager(model, batch)
    assert [g.shape[0] for g in got] == [4, 20, 12]
    assert all(torch.equal(g, e) for g, e in zip(got, expected))
    assert (manager.graph_hits, manager.graph_misses) == (3, 0)


@pytest.mark.engine
def test_item_larger_than_every_budget_runs_eagerly(internvl, zoo):
    llm, model = internvl
    batch = batch_of(zoo("internvl"), ["one_tile", "five_tiles"])
    manager = manager_for(llm, model, budgets=[4, 8], max_items=1)
    got = run(manager, batch)
    assert all(torch.equal(g, e) for g, e in zip(got, eager(model, batch)))
    assert (manager.graph_hits, manager.graph_misses) == (1, 1)  # 5 tiles = 20 tokens > 8


@pytest.mark.engine
def test_packing_gives_what_each_item_gets_alone(internvl, zoo):
    llm, model = internvl
    names = ["one_tile", "five_tiles", "three_tiles"]
    manager = manager_for(llm, model, budgets=[8, 16, 32, 64])
    together = run(manager, batch_of(zoo("internvl"), names))
    for name, packed in zip(names, together):
        (alone,) = run(manager, batch_of(zoo("internvl"), [name]))
        assert torch.equal(packed, alone), name


@pytest.mark.engine
def test_later_replay_does_not_overwrite_earlier_outputs(internvl, zoo):
    llm, model = internvl
    manager = manager_for(llm, model, budgets=[8, 16, 32])
    first = run(manager, batch_of(zoo("internvl"), ["three_tiles"]))
    kept = [t.clone() for t in first]
    second = run(manager, batch_of(zoo("internvl"), ["one_tile", "five_tiles"]))
    assert all(torch.equal(a, b) for a, b in zip(first, kept))
    assert not torch.equal(second[0], first[0][: second[0].shape[0]])


@pytest.mark.engine
def test_replay_is_the_frozen_computation_not_eager_reexecution(internvl, zoo):
    """An encoder that branches on a Python value: the graph keeps the capture-time branch."""
    llm, model = internvl
    original = model.encoder_cudagraph_forward
    state = {"capturing": True}

    def branching_forward(inputs, path="default"):
        rows = original(inputs, path)
        return rows if state["capturing"] else rows * 2  # a Python value, read at capture only

    model.encoder_cudagraph_forward = branching_forward
    try:
        manager = manager_for(llm, model, budgets=[8, 16, 32])
        state["capturing"] = False
        batch = batch_of(zoo("internvl"), ["three_tiles"])
        (got,) = run(manager, batch)
    finally:
        del model.encoder_cudagraph_forward
    (plain,) = eager(model, batch)
    assert torch.equal(got, plain)  # the capture-time branch: not doubled
    assert not torch.equal(got, plain * 2)  # which eager re-execution would have produced


@pytest.mark.engine
def test_cpu_fast_path_keeps_parity(zoo, engines, monkeypatch):
    """`HF_BRIDGE_CPU_ENCODER_GRAPHS=1`: images go through frozen budget graphs, and
    generations still match transformers token for token."""
    from transformers import AutoProcessor

    from hf_bridge.validate.reference import references

    monkeypatch.setenv("HF_BRIDGE_CPU_ENCODER_GRAPHS", "1")
    model_dir = zoo("internvl")
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2, "video": 1}, max_num_seqs=4)
    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    assert model.cpu_encoder_graphs is not None
    processor = AutoProcessor.from_pretrained(model_dir)
    case = parity.standard_cases(112)["two_images"]
    (reference,) = references(model_dir, [case])
    assert parity.compare(reference, parity.vllm_result(llm, processor, case)) == []
    assert model.cpu_encoder_graphs.manager.graph_hits == 2
    engines.close()  # later tests get an engine without the option


@pytest.mark.engine
@pytest.mark.parametrize("arch", ["llava", "gemma3", "fuyu"])
def test_other_eligible_towers_match_eager_through_budgets(arch, zoo, engines):
    """Beyond InternVL: CLIP, SigLIP (with Gemma3's pooling), Fuyu's patch projection;
    two images of different sizes packed into one budget."""
    model_dir = zoo(arch)
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2})
    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    layout = model.tile_layout
    assert layout == EXPECTED_LAYOUTS[arch]
    batch = batch_of(model_dir, ["one_tile", "five_tiles"])
    tokens = sum(int(n) for n in batch["hf_bridge_image_num_embeds"])
    manager = manager_for(llm, model, budgets=[tokens, 2 * tokens], max_items=2)
    got = run(manager, batch)
    assert all(torch.equal(g, e) for g, e in zip(got, eager(model, batch)))
    assert (manager.graph_hits, manager.graph_misses) == (2, 0)


@pytest.mark.engine
@pytest.mark.parametrize("arch,offered", [("chameleon", False), ("llava", True)])
def test_trial_capture_decides_what_vllm_is_offered(arch, offered, zoo, engines):
    """Chameleon's tile layout qualifies, but its VQ lookup works on the host, which CUDA
    capture refuses (measured on an H100: the copy of the codes to the CPU): the trial
    capture in the strict stand-in keeps it from vLLM's manager. LLaVA's CLIP tower records cleanly and is offered."""
    from vllm.model_executor.models.interfaces import supports_encoder_cudagraph

    llm = engines.get(zoo(arch), limit_mm_per_prompt={"image": 2})
    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    assert supports_encoder_cudagraph(model) is offered
    if offered:
        assert model.tile_layout == EXPECTED_LAYOUTS[arch]
    else:
        assert isinstance(model.tile_layout, Ineligible)
        # its VQ-to-BPE lookup builds a host table and indexes it with codes copied to the host
        host_side = r"a trial capture of its tower failed: (torch\.zeros without a device makes a host tensor|Tensor\.to\('cpu'\) copies a tensor to the host)"
        assert re.search(host_side, model.tile_layout.reason), model.tile_layout.reason
