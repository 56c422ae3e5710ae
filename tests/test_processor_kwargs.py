"""A request's processor kwargs that nothing would read are found by asking transformers
how it sorts them, and by what loading sets (`hf_bridge/processor_kwargs.py`); real
processors, no vLLM."""

from __future__ import annotations

import pytest
from transformers import AutoProcessor

from hf_bridge import processor_kwargs


@pytest.fixture(scope="module")
def processors(zoo):
    return {arch: AutoProcessor.from_pretrained(zoo(arch)) for arch in ("qwen2_vl", "llava", "gemma3")}


def test_a_misspelt_key_is_found_with_the_name_it_misspells(processors):
    qwen = processors["qwen2_vl"]
    assert processor_kwargs.ignored_keys(qwen, {"max_pixel": 3136, "do_resize": True}) == ["max_pixel"]
    assert processor_kwargs.closest("max_pixel", qwen) == "max_pixels"
    assert processor_kwargs.closest("zzz", qwen) is None


@pytest.mark.parametrize(("arch", "kwargs"), [
    ("qwen2_vl", {"max_pixels": 3136, "size": {"shortest_edge": 3136, "longest_edge": 50176}, "fps": 1, "do_sample_frames": True}),
    ("qwen2_vl", {"padding": "max_length", "max_length": 200, "truncation": False, "return_mm_token_type_ids": True}),
    ("qwen2_vl", {"images_kwargs": {"do_resize": False}}),  # transformers' nested form
    ("gemma3", {"do_pan_and_scan": True, "pan_and_scan_min_crop_size": 28}),
    # set when vLLM loads the processor with the request's kwargs: an attribute of the processor, or of a part
    ("llava", {"vision_feature_select_strategy": "full", "patch_size": 14, "crop_size": {"height": 56, "width": 56}}),
    # taken out of their kwargs by the loaders of the processor's parts (AutoImageProcessor's)
    ("llava", {"use_fast": False}),
    ("qwen2_vl", {"backend": "pil"}),
])
def test_keys_the_processor_sorts_or_loading_sets_are_read(processors, arch, kwargs):
    assert processor_kwargs.ignored_keys(processors[arch], kwargs) == []


def test_another_models_settings_are_found(processors):
    """Gemma3's pan-and-scan and Qwen2-VL's pixel range mean nothing to LLaVA's processor."""
    assert processor_kwargs.ignored_keys(processors["llava"], {"do_pan_and_scan": True, "max_pixels": 3136}) == [
        "do_pan_and_scan", "max_pixels"]


def test_a_value_transformers_refuses_is_left_to_the_processors_own_error(processors):
    assert processor_kwargs.ignored_keys(processors["llava"], {"size": 3.5, "max_pixel": 1}) == []


def test_a_processor_outside_transformers_is_not_judged(processors):
    """A checkpoint's own processor code may read its kwargs before transformers sorts them."""
    llava = processors["llava"]
    own = type("CheckpointProcessor", (type(llava),), {"__module__": "transformers_modules.some.checkpoint"})
    llava_own = own.__new__(own)
    llava_own.__dict__.update(llava.__dict__)
    assert processor_kwargs.ignored_keys(llava, {"max_num": 6}) == ["max_num"]
    assert processor_kwargs.ignored_keys(llava_own, {"max_num": 6}) == []


def test_every_per_request_setting_of_the_zoos_checkpoints_is_read(zoo):
    """PROCESSOR_SETTINGS.md's per-request rows for zoo checkpoints (those of sweep types
    were checked when the module was written; building them here costs minutes)."""
    from helpers.scripts import load_script
    from hf_bridge.zoo import SPECS

    settings = [s for s in load_script("processor_settings").SETTINGS if s.per_request and s.arch in SPECS]
    assert len(settings) >= 10
    for setting in settings:
        processor = AutoProcessor.from_pretrained(zoo(setting.arch))
        assert processor_kwargs.ignored_keys(processor, setting.per_request) == [], setting.name


def test_a_processor_that_sorts_by_a_class_it_does_not_declare_is_not_judged(generic):
    """Phi-4-multimodal sorts its call's kwargs by its module's own kwargs class while
    declaring transformers' base one: what it reads cannot be told from what it declares."""
    processor = AutoProcessor.from_pretrained(generic("phi4_multimodal"))
    assert type(processor).valid_processor_kwargs.__name__ == "ProcessingKwargs"
    assert processor_kwargs.ignored_keys(processor, {"max_pixel": 1}) == []
