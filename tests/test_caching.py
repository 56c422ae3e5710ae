"""Per-item data: independent of neighbours, reused from vLLM's processor cache."""

from __future__ import annotations

import pytest
import torch

from hf_bridge.inspect import build_processor, inspect_prompt, processor_cache
from hf_bridge.validate import parity

A = parity.test_image(96, 64, seed=1)
B = parity.test_image(64, 85, seed=2)
C = parity.test_image(130, 70, seed=3)


def two_image_prompt(processor) -> str:
    return parity.prompt_text(processor.info.get_hf_processor(), parity.Case("x", num_images=2))


@pytest.fixture(scope="module", params=["idefics3", "llava_next"])
def processor(request, zoo):
    # Both pad or stack a batch of images to its largest member in transformers
    return build_processor(zoo(request.param))


def test_item_data_does_not_depend_on_its_neighbour(processor):
    first = inspect_prompt(processor, two_image_prompt(processor), {"image": [A, B]})
    second = inspect_prompt(processor, two_image_prompt(processor), {"image": [A, C]})
    a1, a2 = first.items[0], second.items[0]
    assert a1.data.keys() == a2.data.keys()
    for key in a1.data:
        v1, v2 = a1.data[key], a2.data[key]
        assert torch.equal(v1, v2) if isinstance(v1, torch.Tensor) else v1 == v2, key
    assert (a1.length, a1.is_embed) == (a2.length, a2.is_embed)
    assert first.hashes["image"][0] == second.hashes["image"][0]


def test_repeated_image_is_a_cache_hit(processor):
    cache = processor_cache(processor)
    first = inspect_prompt(processor, two_image_prompt(processor), {"image": [A, B]}, cache=cache)
    hash_a = first.hashes["image"][0]
    assert cache.is_cached([hash_a]) == [True]
    stats_before = cache.make_stats()
    again = inspect_prompt(processor, two_image_prompt(processor), {"image": [C, A]}, cache=cache)
    assert again.hashes["image"][1] == hash_a
    stats = cache.make_stats()
    assert stats.hits > stats_before.hits
    # and the cached entry serves the same data and placeholder
    assert again.items[1].is_embed == first.items[0].is_embed


def test_processor_kwargs_make_a_different_cache_entry(zoo):
    processor = build_processor(zoo("idefics3"))
    prompt = parity.prompt_text(processor.info.get_hf_processor(), parity.Case("x", num_images=1))
    cache = processor_cache(processor)
    tiled = inspect_prompt(processor, prompt, {"image": A}, cache=cache)
    whole = inspect_prompt(processor, prompt, {"image": A}, {"do_image_splitting": False}, cache=cache)
    assert tiled.hashes["image"] != whole.hashes["image"]
    assert tiled.items[0].data["image.pixel_values"].shape[1] >= 2  # tiles
    assert whole.items[0].data["image.pixel_values"].shape[1] == 1
    assert whole.items[0].length < tiled.items[0].length


@pytest.mark.engine
def test_same_image_beside_different_neighbours_generates_identically(zoo, engines):
    """Encoder output for A is the same whether A was first seen beside B or alone."""
    from transformers import AutoProcessor

    from hf_bridge.validate.reference import references

    model_dir = zoo("llava_next")
    hf_processor = AutoProcessor.from_pretrained(model_dir)
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2})
    pair = parity.Case("pair", 112, num_images=2)
    alone = parity.Case("alone", 112, num_images=1)  # image 0 of `pair`
    renderer = llm.llm_engine.renderer  # vLLM's front end keeps the processor cache's stats
    with_neighbour = parity.vllm_result(llm, hf_processor, pair)  # warms the caches with A beside B
    renderer.stat_mm_cache()  # read and reset
    got = parity.vllm_result(llm, hf_processor, alone)
    stats = renderer.stat_mm_cache()
    assert (stats.queries, stats.hits) == (1, 1), stats  # A came from the cache
    ref_pair, ref_alone = references(model_dir, [pair, alone])
    assert parity.compare(ref_pair, with_neighbour) == []
    assert parity.compare(ref_alone, got) == []
