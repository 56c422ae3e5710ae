"""Installing hf_bridge never takes a model, or one of its inputs, away.

- A modality hf_bridge cannot probe is switched off with one warning naming it and the
  processor's error; text and the other modalities keep serving at parity, and a
  request that uses it gets a clear error.
- A checkpoint whose items hf_bridge cannot place at all goes to vLLM's in-tree
  backend at engine start, and fares exactly as it does without hf_bridge.

The failures come from real processors set up to fail, not from mocks.
"""

from __future__ import annotations

import re

import pytest
import torch

from hf_bridge.validate import parity
from hf_bridge.validate.reference import references
from hf_bridge.zoo.variant import variant
from helpers.int8_checkpoint import w8a8_copy
from helpers.scenarios import run_scenario


@pytest.mark.engine
def test_failing_video_probe_switches_video_off_and_keeps_serving(zoo, engines, tmp_path, hf_bridge_log):
    """The video processor samples 1,000 frames, more than any blank video holds, so every
    video probe raises inside the HF processor. Text and images keep their parity."""
    from transformers import AutoProcessor

    model_dir = variant(
        zoo("qwen2_vl"), tmp_path / "qwen2_vl-video-fails", video_processor={"do_sample_frames": True, "num_frames": 1000}
    )
    processor = AutoProcessor.from_pretrained(model_dir)
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2})
    warnings = [r.getMessage() for r in hf_bridge_log.records if "switched video input off" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "Qwen2VLProcessor could not be probed with a blank video" in warnings[0]
    assert "The inferred `num_frames=1000` exceeds" in warnings[0]

    cases = parity.standard_cases(64)
    names = ("text_only", "one_image", "two_images")
    for name, reference in zip(names, references(model_dir, [cases[name] for name in names])):
        assert parity.compare(reference, parity.vllm_result(llm, processor, cases[name])) == [], name

    with pytest.raises(ValueError, match=r"hf_bridge switched video input off for this model: Qwen2VLProcessor"):
        parity.vllm_result(llm, processor, cases["video"])
    engines.close()  # an in-process engine that raised is rebuilt before it serves again


UNRESIZED_VIDEO = {"do_resize": False, "size": {"shortest_edge": 3136, "longest_edge": 1000 * 1000}}
"""Frames kept at their size, up to 1000 x 1000 pixels: the largest blank video vLLM's size
search proposes is 1000 pixels a side, not a multiple of the 28-pixel patch grid."""


@pytest.mark.engine
def test_a_processor_that_cannot_process_the_largest_item_profiles_with_its_own_count(zoo, engines, tmp_path, hf_bridge_log):
    """Qwen2-VL's video processor with resizing off refuses frames whose sides are not
    multiples of its 28-pixel patch grid, the largest blank video hf_bridge counts among
    them (MiniMax-M3-VL's does so with its default settings). The engine used to fail to
    start; hf_bridge now profiles video with the processor's own count, as the in-tree
    backend does, and says so once. A video the processor takes keeps parity, text too,
    and one it cannot take is refused with its error."""
    import numpy as np
    from transformers import AutoProcessor

    model_dir = variant(zoo("qwen2_vl"), tmp_path / "qwen2_vl-video-unresized", video_processor=UNRESIZED_VIDEO)
    processor = AutoProcessor.from_pretrained(model_dir)
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2, "video": 1})
    warnings = [r.getMessage() for r in hf_bridge_log.records if "hf_bridge profiles video items" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("hf_bridge profiles video items with Qwen2VLProcessor's own count (")
    assert "could not process the largest blank video (1000x1000, " in warnings[0] and "RuntimeError: shape '[" in warnings[0]

    cases = parity.standard_cases(64)
    names = ("video", "text_only")
    for name, reference in zip(names, references(model_dir, [cases[name] for name in names])):
        assert parity.compare(reference, parity.vllm_result(llm, processor, cases[name])) == [], name
    unresized = {"prompt": parity.prompt_text(processor, cases["video"]), "multi_modal_data": {"video": np.zeros((4, 1000, 1000, 3), np.uint8)}}
    with pytest.raises(ValueError, match=re.escape("Video 0 of this request could not be processed by the model's HF processor (RuntimeError: shape")
                       + ".*" + re.escape("Send a video the processor takes: change what its message names")):
        llm.generate(unresized, parity.sampling_params(), use_tqdm=False)
    engines.close()  # an in-process engine that raised is rebuilt before it serves again


@pytest.mark.slow
def test_unplaceable_checkpoint_fares_exactly_as_without_hf_bridge(generic):
    """Voxtral's processor takes no audio through `__call__` (only through
    `apply_chat_template`) and refuses a placeholder in its text, so hf_bridge cannot
    place any of its items. With hf_bridge installed it is routed to vLLM's in-tree
    class, so engine start ends exactly as with HF_BRIDGE_DISABLE=1 (that backend's own
    error, from its weight loader), after hf_bridge has logged why it stepped aside."""
    model_dir = generic("voxtral")
    # in-process engines raise the loader's own error, which prints a set of names: one hash seed orders both alike
    with_bridge = run_scenario("engine-start", model_dir, multiprocess=False, PYTHONHASHSEED="0")
    without = run_scenario("engine-start", model_dir, multiprocess=False, PYTHONHASHSEED="0", HF_BRIDGE_DISABLE="1")
    assert with_bridge["start"] == without["start"]
    cause = "There is no module or parameter named 'model.language_model.model' in TransformersMultiModalForCausalLM"
    assert cause in with_bridge["log"] and cause in without["log"]
    assert ("hf_bridge cannot place this checkpoint's multimodal items (audio: ProbeError: VoxtralProcessor refused every "
            "blank audio hf_bridge probes it with (1x1); for the first: ValueError: ") in with_bridge["log"]


@pytest.mark.engine
@pytest.mark.parametrize("model", ["llava", "qwen2_vl"])
def test_a_quantized_checkpoint_gives_the_in_tree_backends_tokens(zoo, tmp_path, model):
    """A W8A8 int8 checkpoint (compressed-tensors, `helpers/int8_checkpoint.py`) runs its
    decoder on vLLM's int8 kernels through hf_bridge as through the in-tree backend: the
    same tokens and log-probs. transformers is no reference here: it does not quantize
    activations."""
    model_dir, linears = w8a8_copy(zoo(model), tmp_path / f"{model}-w8a8")
    assert linears == 14  # 7 per decoder layer, 2 layers
    if torch.cpu._is_amx_tile_supported():
        # There vLLM picks its AMX int8 kernel, which takes rows of bfloat16 or half only: the in-tree backend
        # stops at the rows (HF modules hand (batch, tokens, hidden)), hf_bridge hands rows and stops at float32.
        for disabled, cause in (("1", "mat1 must be a 2D tensor"), ("", "int8_scaled_mm_with_quant: expect A to be bfloat16 or half")):
            with pytest.raises(AssertionError, match=re.escape(cause)):
                run_scenario("case-result", model_dir, multiprocess=False, HF_BRIDGE_CASE="two_images", HF_BRIDGE_DISABLE=disabled)
        return
    with_bridge = run_scenario("case-result", model_dir, multiprocess=False, HF_BRIDGE_CASE="two_images")["case"]
    in_tree = run_scenario("case-result", model_dir, multiprocess=False, HF_BRIDGE_CASE="two_images", HF_BRIDGE_DISABLE="1")["case"]
    assert (with_bridge["model_class"], in_tree["model_class"]) == ("HFBridgeForConditionalGeneration", "TransformersMultiModalForCausalLM")
    assert with_bridge["quantization"] == in_tree["quantization"] == "compressed-tensors"
    assert parity.compare(parity.Result(**in_tree["result"]), parity.Result(**with_bridge["result"])) == []


def test_several_items_in_one_array_are_read_as_vllm_reads_them(zoo):
    """One NxHxWxC array is N images, and one NxTxHxWxC array N videos, as vLLM's parser
    reads them (and its in-tree backend serves them); hf_bridge had refused both as
    unreadable. An array that vLLM reads as a batch of unreadable items is refused naming
    that reading."""
    import numpy as np
    import torch

    from hf_bridge.inspect import build_processor, inspect_prompt

    processor = build_processor(zoo("qwen2_vl"))
    hf_processor = processor.info.get_hf_processor()
    rng = np.random.default_rng(0)
    for modality, case, batch in (
        ("image", parity.Case("two_images", num_images=2), rng.integers(0, 255, (2, 48, 64, 3), dtype=np.uint8)),
        ("video", parity.Case("videos", num_videos=2), rng.integers(0, 255, (2, 4, 48, 64, 3), dtype=np.uint8)),
    ):
        prompt = parity.prompt_text(hf_processor, case)
        one_array = inspect_prompt(processor, prompt, {modality: batch})
        listed = inspect_prompt(processor, prompt, {modality: list(batch)})
        assert one_array.prompt_ids == listed.prompt_ids and len(one_array.items) == 2
        for mine, theirs in zip(one_array.items, listed.items):
            assert mine.data.keys() == theirs.data.keys()
            assert all(torch.equal(mine.data[key], theirs.data[key]) for key in mine.data)
    grey = parity.prompt_text(hf_processor, parity.Case("one_image", num_images=1))
    with pytest.raises(ValueError, match=re.escape("Image 0 of this request cannot be read as image: got an array of shape "
                                                   "(64,), one of 48 along the first axis of the request's array of shape "
                                                   "(48, 64), which vLLM reads as 48 images")):
        inspect_prompt(processor, grey, {"image": np.zeros((48, 64), dtype=np.uint8)})


def test_a_requests_own_token_types_flag_changes_nothing(zoo):
    """`return_mm_token_type_ids` per request, which the in-tree backend serves as without
    it: hf_bridge asks for the token types itself, and the request's value reached the
    processor call beside its own (`TypeError`, refused as a bad kwarg)."""
    from hf_bridge.inspect import build_processor, inspect_prompt

    processor = build_processor(zoo("llava"))
    case = parity.Case("one_image", num_images=1)
    prompt = parity.prompt_text(processor.info.get_hf_processor(), case)
    plain = inspect_prompt(processor, prompt, {"image": case.images[0]})
    for flag in (False, True):
        flagged = inspect_prompt(processor, prompt, {"image": case.images[0]}, {"return_mm_token_type_ids": flag})
        assert flagged.prompt_ids == plain.prompt_ids and len(flagged.items) == 1
        assert (flagged.items[0].offset, flagged.items[0].length) == (plain.items[0].offset, plain.items[0].length)


@pytest.mark.parametrize("name", ["qwen2_vl", "smolvlm", "internvl"])
def test_the_profiled_video_length_is_vllms_own_count(zoo, name):
    """hf_bridge tries vLLM's most frames first, where vLLM adds them one step at a time
    (a count each, which processes blank videos where the processor cannot count): the
    frames it profiles with are vLLM's, for budgets small and large, one video or two."""
    from vllm.model_executor.models.transformers.multimodal import MultiModalProcessingInfo

    from hf_bridge.inspect import build_processor

    info = build_processor(zoo(name)).info
    for seq_len in (512, 65536):  # vLLM's search stops early, or runs to its most frames
        for videos in (1, 2):
            counts = {"video": videos}
            vllms = MultiModalProcessingInfo.get_num_frames_with_most_features(info, seq_len, counts)
            assert info._most_frames_that_fit(seq_len, counts) == vllms, (seq_len, videos)


HELD_BESIDE_THE_TEXT_MODEL = {
    "qwen2_vl": [], "paligemma": ["multi_modal_projector"], "gemma3n": ["embed_audio", "embed_vision"],
    # flat: the base model is its own decoder; its VQ image tokenizer is no tower vLLM can tell apart
    "chameleon": ["embed_tokens", "layers", "norm", "vqmodel"],
    # its __init__ reads `self.dtype` from parameters built before, the tower's: kept
    "granite4_vision": ["layerwise_projectors", "spatial_projectors", "vision_tower"],
}
"""The HF base model's children with parameters, beside its text model, in an engine serving text alone."""


@pytest.mark.engine
@pytest.mark.parametrize(("source", "name"), [("zoo", "qwen2_vl"), ("zoo", "chameleon"), ("zoo", "paligemma"),
                                              ("generic", "gemma3n"), ("generic", "granite4_vision")])
def test_an_engine_serving_text_alone_keeps_parity_without_its_towers(request, engines, hf_bridge_log, source, name):
    """`language_model_only` (or every modality's limit 0) builds no tower, as in the
    in-tree backend. hf_bridge had stopped at loading: it renamed the skipped tower's
    weights as transformers does, and vLLM's loader renamed them again, into the text
    model. Chameleon's processor adds its separator to every prompt, which vLLM, building
    no multimodal processor here, left out; PaliGemma's prompt attends both ways, which
    vLLM turns off for text alone; vLLM hands the decoder ids, not embeddings, so Gemma 3n's
    per-layer inputs were a step's old ones. Granite 4 Vision cannot be built without its
    tower (as in the in-tree backend), so it keeps it, saying so. Each prompt is
    transformers', token for token."""
    import torch
    from transformers import AutoProcessor

    model_dir = request.getfixturevalue(source)(name)
    case = parity.standard_cases(64)["text_only"]
    llm = engines.get(model_dir, language_model_only=True)
    got = parity.vllm_result(llm, AutoProcessor.from_pretrained(model_dir), case)
    if name == "paligemma":  # its processor refuses text alone; its forward takes the ids
        (reference,) = [parity.hf_reference(model_dir, None, inputs={"input_ids": torch.tensor([got.prompt_ids])})]
    else:
        (reference,) = references(model_dir, [case])
    assert parity.compare(reference, got) == []

    def held_beside_text_model(model):
        base = model.model
        return sorted(name for name, child in base.named_children() if child is not base.get_decoder() and next(child.parameters(), None) is not None)

    held = llm.apply_model(held_beside_text_model)[0]
    assert held == HELD_BESIDE_THE_TEXT_MODEL[name], held
    kept = [r.getMessage() for r in hf_bridge_log.records if "towers although this engine takes none" in r.getMessage()]
    assert len(kept) == (name == "granite4_vision"), kept
    # vLLM's own refusal was "Multi-modal processor not available for text-only models"
    with pytest.raises(ValueError, match=re.escape("This request carries image input, and this engine serves text alone: it "
                                                   "was started with `language_model_only`, so it encodes no media")):
        llm.generate(parity.vllm_request(AutoProcessor.from_pretrained(model_dir), parity.standard_cases(64)["one_image"]),
                     parity.sampling_params(), use_tqdm=False)
    engines.close()  # an in-process engine that raised is rebuilt before it serves again
