"""Settings a checkpoint or a request may carry that the zoo does not ship: the helpers
that write such a checkpoint (settings saved beside its weights, or built into them), and one row of PROCESSOR_SETTINGS.md kept from rotting
between runs of `scripts/processor_settings.py`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.scripts import load_script
from hf_bridge.zoo.variant import PROCESSOR_CONFIG, SECTION_FILES, rebuilt, variant

IMAGE_PROCESSOR_CONFIG = SECTION_FILES["image_processor"]


def _checkpoint(directory: Path, nested: bool) -> Path:
    directory.mkdir()
    (directory / "model.safetensors").write_bytes(b"weights")
    (directory / "config.json").write_text(json.dumps({"model_type": "llava", "image_token_index": 7}))
    image_processor = {"size": {"shortest_edge": 56}, "do_resize": True}
    processor = {"processor_class": "LlavaProcessor", **({"image_processor": image_processor} if nested else {})}
    (directory / PROCESSOR_CONFIG).write_text(json.dumps(processor))
    if not nested:
        (directory / IMAGE_PROCESSOR_CONFIG).write_text(json.dumps(image_processor))
    (directory / "hf_bridge_reference.json").write_text("{}")
    (directory / "hf_bridge_zoo.json").write_text("{}")
    return directory


@pytest.mark.parametrize("nested", [True, False], ids=["image-processor-in-processor-config", "own-file"])
def test_variant_sets_only_the_keys_asked_for_and_links_the_weights(tmp_path, nested):
    original = _checkpoint(tmp_path / "original", nested)
    copy = variant(original, tmp_path / "copy", processor={"vision_feature_select_strategy": "full"},
                   image_processor={"size": {"shortest_edge": 112}}, config={"image_token_index": 9})
    processor = json.loads((copy / PROCESSOR_CONFIG).read_text())
    image_processor = processor["image_processor"] if nested else json.loads((copy / IMAGE_PROCESSOR_CONFIG).read_text())
    assert image_processor == {"size": {"shortest_edge": 112}, "do_resize": True}
    assert processor["vision_feature_select_strategy"] == "full" and processor["processor_class"] == "LlavaProcessor"
    assert json.loads((copy / "config.json").read_text()) == {"model_type": "llava", "image_token_index": 9}
    assert (copy / "model.safetensors").is_symlink() and (copy / "model.safetensors").read_bytes() == b"weights"
    assert not any(copy.glob("hf_bridge_*"))  # the original's references and recipe are not the copy's
    assert json.loads((original / "config.json").read_text())["image_token_index"] == 7


def test_variant_refuses_a_part_a_processor_does_not_have(tmp_path):
    with pytest.raises(TypeError, match="no processor part image_procesor; parts are image_processor"):
        variant(_checkpoint(tmp_path / "original", True), tmp_path / "copy", image_procesor={"size": 1})


def test_a_rebuilt_zoo_model_draws_its_weights_with_the_settings_made(tmp_path):
    """Two feature layers concatenated, of another tower (a sub-config replaced whole): the
    projector's input doubles, which `variant`'s linked weights cannot follow; a
    processor's nested part is set the same way."""
    from safetensors import safe_open

    from hf_bridge.clean_interpreter import CleanCallFailed

    tower = {"model_type": "dinov2", "hidden_size": 48, "intermediate_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 2, "image_size": 56, "patch_size": 14}
    model_dir = rebuilt("llava", tmp_path / "llava", config={"vision_feature_layer": [-2, -1], "vision_config": tower},
                        processor={"image_processor.do_center_crop": False})
    config = json.loads((model_dir / "config.json").read_text())
    assert config["vision_feature_layer"] == [-2, -1]
    assert (config["vision_config"]["model_type"], config["vision_config"]["hidden_size"]) == ("dinov2", 48)
    with safe_open(model_dir / "model.safetensors", "pt") as weights:
        name = next(n for n in weights.keys() if n.endswith("multi_modal_projector.linear_1.weight"))
        assert weights.get_slice(name).get_shape()[1] == 2 * 48
    image_processor = json.loads((model_dir / PROCESSOR_CONFIG).read_text())["image_processor"]
    assert image_processor["do_center_crop"] is False
    with pytest.raises(CleanCallFailed, match="LlavaConfig has no 'vision_feature_layers' to set"):
        rebuilt("llava", tmp_path / "typo", config={"vision_feature_layers": [-2, -1]})


@pytest.mark.engine
def test_a_saved_setting_the_model_reads_too_keeps_parity(tmp_path):
    """LLaVA keeping CLIP's class token (`full` in its processor and config): one more
    placeholder per image, every stage and case passing, as PROCESSOR_SETTINGS.md says."""
    from transformers import AutoProcessor

    from hf_bridge.validate import parity
    from hf_bridge.zoo import build

    script = load_script("processor_settings")
    (setting,) = [s for s in script.SETTINGS if s.name == "llava-full-features"]
    code, others, _ = script.check(setting, tmp_path)
    assert code == 0, others
    case = parity.standard_cases(64)["one_image"]
    image_token = AutoProcessor.from_pretrained(build("llava")).tokenizer.convert_tokens_to_ids("<image>")
    counts = [parity.hf_inputs(AutoProcessor.from_pretrained(d), case)["input_ids"][0].tolist().count(image_token)
              for d in (build("llava"), tmp_path / setting.name)]
    assert counts[1] == counts[0] + 1, counts


def test_a_request_kwarg_only_loading_reads_reaches_the_reference_as_vllm_applies_it(generic):
    """PerceptionLM's `max_num_tiles` per request: vLLM loads the processor with it (its call
    does not declare it) and tiles from a table of 2; transformers' call alone would keep
    the saved table of 4. The reference is called as vLLM loads, so both place the same
    prompt and tiles."""
    import dataclasses

    from hf_bridge.inspect import inspect
    from hf_bridge.validate import parity
    from hf_bridge.validate.checkpoint import init_only_kwargs, load_processor

    model_dir = generic("perception_lm")  # built in a subprocess: an engine earlier in this worker decorated HF classes
    processor = load_processor(model_dir)
    case = dataclasses.replace(parity.standard_cases(64)["one_image"], processor_kwargs='{"max_num_tiles": 2}')
    assert init_only_kwargs(processor, case.mm_processor_kwargs) == {"max_num_tiles": 2}
    reference = parity.hf_inputs(processor, case)
    call_alone = processor(text=[parity.prompt_text(processor, case)], images=case.images, max_num_tiles=2, return_tensors="pt")
    served = inspect(model_dir, parity.prompt_text(processor, case), images=case.images, mm_processor_kwargs=case.mm_processor_kwargs)
    (item,) = served.items
    assert reference["pixel_values"].shape[1] == item.data["image.pixel_values"].shape[1] == 3  # a thumbnail and 2 tiles
    assert call_alone["pixel_values"].shape[1] == 5  # what the reference would be without the loading: the saved 4 tiles
    assert reference["input_ids"][0].tolist() == served.view.prompt_ids
    assert reference["input_ids"].shape[1] < call_alone["input_ids"].shape[1]
