"""Bad requests get clear errors, raised while the request is processed, and vLLM's
default (multiprocess) engine keeps serving good requests afterwards."""

from __future__ import annotations

import re

import pytest

from helpers.scenarios import run_scenario


@pytest.fixture(scope="module")
def bad_input_results(zoo):
    return run_scenario("bad-input", zoo("llava"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "step,message",
    [
        ("more_placeholders", r"holds 2 image placeholder\(s\) \('<image>'\) but the request carries 1 images"),
        ("fewer_placeholders", r"holds 1 image placeholder\(s\) .* carries 2 images"),
        ("unreadable_image", r"Image 0 of this request cannot be read as image: got an array of shape \(5,\)"),
        ("undecodable_image", r"Image 0 of this request cannot be read as image: got str"),
        # vLLM's own refusal named only `--enable-mm-embeds`
        ("image_tensor_as_torchvision_reads_it", r"image data is a torch tensor of shape \(3, 64, 64\), which vLLM reads as "
                                                 r"precomputed image embeddings .* send it in a list, `\[tensor\]`"),
        # transformers divides them by 255 again, silently: the model saw the image nearly black
        ("pixels_scaled_to_unit_range", r"Image 0 of this request holds float pixels within \[0, 1\] .*LlavaProcessor "
                                        r"divides pixels by 255 itself.*`mm_processor_kwargs=\{'do_rescale': False\}`"),
        # the in-tree backend expanded one of its 16 '<image>' again: a 50-token prompt, silently
        ("processor_input_ids_as_prompt", r"holds 16 image placeholder\(s\) .* It holds '<image>' 16 times in a row, as "
                                          r"the HF processor's `input_ids` do"),
        ("unsupported_modality", r"does not take video input: its processor \(LlavaProcessor\) takes image input only"),
        # vLLM itself says "Failed to load the processor ... consider setting `trust_remote_code=True`"
        ("refused_processor_kwargs", r"HF processor refused a value of the processor kwargs \(ValueError: size must have "
                                     r"one of the following set of keys.*leave that key out of `mm_processor_kwargs`"),
        # the config's strategy drops CLIP's class token: the model fills one row fewer than announced,
        # which raised in the worker and stopped the engine (EngineDeadError for every later request)
        ("kwargs_against_config", r"give its image 17 embedding position\(s\) where LlavaProcessor gives it 16 "
                                  r"without them.*must match the model's config"),
        # CLIP's position table takes 56x56 alone: "Input image size (64*64) doesn't match model
        # (56*56)" raised in the worker and stopped the engine
        ("kwargs_change_pixel_sides", r"give image 0 `pixel_values` of 64x64 pixels, where LlavaProcessor gives every "
                                      r"image 56x56 without them.*Leave the size kwargs"),
        # the item's own call was padded: the pad tokens were placed inside the image's placeholder
        ("kwargs_pad_the_text", r"processor kwargs pad the prompt's text: \d+ of the tokenizer's pad token \(id \d+\) came "
                                r"with image 0, and none without them.*Leave these keys out of `mm_processor_kwargs`"),
        # transformers logged "is not a valid argument for this processor and will be ignored", and served it
        ("kwarg_nothing_reads", r"`mm_processor_kwargs` hold 'do_rezise' \(did you mean 'do_resize'\?\), which "
                                r"LlavaProcessor takes nowhere"),
        # the processor handed the model numpy pixels, which raised in the worker and stopped the engine
        ("tensors_not_torch", r"The request's `mm_processor_kwargs` set return_tensors='np': vLLM asks the processor "
                              r"for torch tensors \('pt'\).*Leave `return_tensors` out"),
    ],
)
def test_bad_request_is_refused_clearly_and_the_engine_keeps_serving(bad_input_results, step, message):
    result = bad_input_results[step]
    assert not result["ok"], f"{step} was accepted"
    assert re.search(message, result["error"]), result["error"]
    before = bad_input_results["good_before"]["tokens"]
    after = bad_input_results[f"good_after_{step}"]["tokens"]
    assert len(before) == 8 and after == before


def test_engine_processor_kwargs_nothing_reads_stop_the_start_naming_them(zoo):
    """Every request would be served without them, the server's log saying so once."""
    import json

    result = run_scenario("engine-start", zoo("qwen2_vl"), multiprocess=False,
                          ENGINE_KWARGS=json.dumps({"mm_processor_kwargs": {"max_pixel": 3136, "fps": 1}}))["start"]
    assert not result["ok"]
    assert ("The engine's `mm_processor_kwargs` hold 'max_pixel' (did you mean 'max_pixels'?), which Qwen2VLProcessor "
            "takes nowhere") in result["error"], result["error"]


def test_kwargs_transformers_reads_when_loading_the_processor_are_served(zoo):
    """`use_fast` and `backend` pick the image processor's backend when vLLM loads the
    processor with them; its call then logs that they "will be ignored", and no signature
    names them. They had been refused, by the engine and per request."""
    from hf_bridge.inspect import build_processor, inspect_prompt
    from hf_bridge.validate import parity

    processor = build_processor(zoo("llava"), mm_processor_kwargs={"use_fast": False})
    assert type(processor.info.get_hf_processor().image_processor).__name__ == "CLIPImageProcessorPil"
    case = parity.Case("one_image", num_images=1)
    prompt = parity.prompt_text(processor.info.get_hf_processor(), case)
    served = inspect_prompt(processor, prompt, {"image": case.images[0]}, {"backend": "torchvision"})
    assert type(processor.info.get_hf_processor(backend="torchvision").image_processor).__name__ == "CLIPImageProcessor"
    assert served.prompt_ids == inspect_prompt(processor, prompt, {"image": case.images[0]}).prompt_ids


def test_processor_kwargs_the_processor_refuses_at_start_are_named_first(zoo):
    """The engine's `mm_processor_kwargs` reach every probe of the processor: where the
    processor refuses one, no item can be placed, and the error names them as the first
    thing to fix before any other backend."""
    import json

    result = run_scenario("engine-start", zoo("llava"), multiprocess=False,
                          ENGINE_KWARGS=json.dumps({"mm_processor_kwargs": {"size": {"foo": 3}}}))["start"]
    assert not result["ok"]
    assert "size must have one of the following set of keys" in result["error"], result["error"]
    assert "The engine's `mm_processor_kwargs` ({'size': {'foo': 3}}) reach every probe" in result["error"], result["error"]


def test_kwargs_that_change_a_placed_layout_are_named_as_the_cause(zoo):
    """Chameleon's processor inserts each image's tokens itself; padded per request, an
    item's call no longer lays out as the blank's hf_bridge learnt at start. The error
    names the request's kwargs, as the item is placed without them (it had read as
    hf_bridge failing to place the image)."""
    from hf_bridge.inspect import build_processor, inspect_prompt
    from hf_bridge.processing import ProcessorKwargsRefused
    from hf_bridge.validate import parity

    processor = build_processor(zoo("chameleon"))
    case = parity.Case("one_image", num_images=1)
    prompt = parity.prompt_text(processor.info.get_hf_processor(), case)
    assert inspect_prompt(processor, prompt, {"image": case.images[0]}).items
    with pytest.raises(ProcessorKwargsRefused, match=r"This request's processor kwargs \(max_length, padding\) make the "
                                                     r"processor lay image 0 out in the prompt otherwise than hf_bridge can place"):
        inspect_prompt(processor, prompt, {"image": case.images[0]}, {"padding": "max_length", "max_length": 200})


@pytest.mark.parametrize("name", ["qwen2_vl", "paligemma"])
def test_engine_kwargs_that_pad_the_text_are_refused_at_start(zoo, name):
    """Padding in the engine's kwargs reaches every probe: hf_bridge had learnt the pad
    tokens as the processor's own and run them in every prompt (194 of the 204 ids of a
    Qwen2-VL prompt with one image). PaliGemma refuses text alone, so an item's call shows its padding. Padding
    that adds nothing to one prompt is served."""
    from hf_bridge.inspect import build_processor

    model_dir = zoo(name)
    with pytest.raises(ValueError, match=r"The engine's `mm_processor_kwargs` pad every prompt's text \(\{'padding': "
                                         r"'max_length', 'max_length': 200\}\): \d+ of the tokenizer's pad token \(id \d+\) "
                                         r"came with them, and none with padding off\..*Leave these keys out of the "
                                         r"engine's `mm_processor_kwargs`"):
        build_processor(model_dir, mm_processor_kwargs={"padding": "max_length", "max_length": 200})
    for harmless in ({"padding": "longest"}, {"pad_to_multiple_of": 64}):
        assert "image" in build_processor(model_dir, mm_processor_kwargs=harmless).info.supported_mm_limits


def test_kwargs_that_ask_for_other_arrays_or_cut_the_text_are_refused(zoo):
    """`return_tensors="np"` made the processor hand the model numpy arrays, which raised
    in the engine's worker and stopped the engine (the request's step in
    `test_bad_request_is_refused_clearly_and_the_engine_keeps_serving`); in the engine's
    kwargs it stops the start. `truncation` below the prompt's length cut only each item's
    short text, and the prompt ran whole, where transformers cuts it (or refuses a cut
    through a placeholder, as LLaVA's processor does). A length the prompt fits is served."""
    from hf_bridge.inspect import build_processor, inspect_prompt
    from hf_bridge.processing import ProcessorKwargsRefused
    from hf_bridge.validate import parity

    processor = build_processor(zoo("qwen2_vl"))
    case = parity.Case("one_image", num_images=1)
    prompt, media = parity.prompt_text(processor.info.get_hf_processor(), case), {"image": case.images[0]}
    served = inspect_prompt(processor, prompt, media).prompt_ids
    with pytest.raises(ProcessorKwargsRefused, match=re.escape("The request's `mm_processor_kwargs` set return_tensors='np'")):
        inspect_prompt(processor, prompt, media, {"return_tensors": "np"})
    with pytest.raises(ProcessorKwargsRefused, match=re.escape(
            f"This request's processor kwargs truncate the text to {len(served) - 1} tokens, and its prompt holds {len(served)}: "
            "transformers' processor would cut the prompt there")):
        inspect_prompt(processor, prompt, media, {"truncation": True, "max_length": len(served) - 1})
    assert inspect_prompt(processor, prompt, media, {"truncation": True, "max_length": len(served)}).prompt_ids == served
    with pytest.raises(ValueError, match=re.escape("The engine's `mm_processor_kwargs` set return_tensors='np'")):
        build_processor(zoo("qwen2_vl"), mm_processor_kwargs={"return_tensors": "np"})


def test_an_rgba_array_is_refused_naming_its_channels_and_the_fix(zoo):
    """transformers cannot tell where a 4-channel array keeps its channels ("Unable to infer
    channel dimension format"); the error named no shape, and asked whether the image was
    valid. The fix it names serves the image as its RGB pixels."""
    import numpy as np

    from hf_bridge.inspect import build_processor, inspect_prompt
    from hf_bridge.validate import parity

    processor = build_processor(zoo("qwen2_vl"))
    rgba = np.random.default_rng(0).integers(0, 255, (48, 64, 4), dtype=np.uint8)
    for modality, sent, shape, where in (("image", rgba, (48, 64, 4), "an image"),
                                         ("video", np.stack([rgba] * 4), (4, 48, 64, 4), "each frame")):
        case = parity.Case(modality, num_images=int(modality == "image"), num_videos=int(modality == "video"))
        prompt = parity.prompt_text(processor.info.get_hf_processor(), case)
        with pytest.raises(ValueError, match=re.escape(
                f"{modality.capitalize()} 0 of this request could not be processed by the model's HF processor (ValueError: "
                f"Unable to infer channel dimension format). Send {'a video' if modality == 'video' else 'an image'} the "
                f"processor takes: it holds an array of shape {shape}, and transformers finds the channels of {where} on a "
                "first or last axis of 1 or 3 (grey or RGB). Drop the alpha channel (`array[..., :3]`)")):
            inspect_prompt(processor, prompt, {modality: sent})
        assert inspect_prompt(processor, prompt, {modality: sent[..., :3]}).items


def test_an_image_tensor_is_refused_with_the_ways_to_send_its_pixels(zoo):
    """torchvision reads an image as a channels x height x width tensor, which vLLM reads as
    embeddings; without `enable_mm_embeds` the refusal names the pixel forms, and each form
    it names gives the prompt and item data a PIL image gives."""
    import numpy as np
    import torch
    from PIL import Image

    from hf_bridge.inspect import build_processor, inspect_prompt
    from hf_bridge.validate import parity

    for name in ("llava", "qwen2_vl"):
        processor = build_processor(zoo(name))
        prompt = parity.prompt_text(processor.info.get_hf_processor(), parity.Case("one_image", num_images=1))
        pixels = np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8)
        tensor = torch.from_numpy(pixels).permute(2, 0, 1)
        with pytest.raises(ValueError, match=re.escape(
                "The request's image data is a torch tensor of shape (3, 48, 64), which vLLM reads as precomputed "
                "image embeddings (images x rows x hidden size), and this engine takes no embeddings. If it holds pixels")):
            inspect_prompt(processor, prompt, {"image": tensor})
        with pytest.raises(ValueError, match=re.escape(
                "The request's image data is a list of 1 2-D torch tensors, which vLLM reads as precomputed image "
                "embeddings (images x rows x hidden size, a tensor per item), and this engine takes no embeddings. To send")):
            inspect_prompt(processor, prompt, {"image": [torch.zeros(16, 64)]})
        as_pil = inspect_prompt(processor, prompt, {"image": Image.fromarray(pixels)})
        for form in ([tensor], tensor.permute(1, 2, 0).numpy()):
            sent = inspect_prompt(processor, prompt, {"image": form})
            assert sent.prompt_ids == as_pil.prompt_ids
            (mine,), (theirs,) = sent.items, as_pil.items
            assert all(torch.equal(mine.data[key], theirs.data[key]) for key in theirs.data
                       if isinstance(theirs.data[key], torch.Tensor)), name
        embeddings_taken = build_processor(zoo(name), enable_mm_embeds=True)
        with pytest.raises(ValueError, match="the request carries 3 images"):  # vLLM's reading stands: 3 embeddings
            inspect_prompt(embeddings_taken, prompt, {"image": tensor})


def test_an_image_the_processor_gives_no_tokens_is_refused_naming_its_size_and_one_it_places(generic):
    """LightOnOCR's processor expands the placeholder of an image smaller than one merged
    patch to nothing, and transformers runs the prompt without the image, silently.
    hf_bridge refused it as a processor that "does not report `mm_token_type_ids`", which
    this one does; the refusal names the image's size and a size the processor places, and
    an image of that size is placed."""
    from hf_bridge.inspect import build_processor, inspect_prompt
    from hf_bridge.validate import parity

    processor = build_processor(generic("lighton_ocr"))
    hf_processor = processor.info.get_hf_processor()
    prompt = parity.prompt_text(hf_processor, parity.Case("one_image", num_images=1))
    small = parity.test_image(29, 13, seed=1)
    assert hf_processor.image_token_id not in hf_processor(text=[prompt], images=[small])["input_ids"][0].tolist()
    with pytest.raises(ValueError, match=re.escape(
            "Image 0 of this request (29x13 pixels) gets no tokens from LightOnOcrProcessor: it expands the image's "
            "placeholder to nothing, so the model would not see the image (transformers runs such a prompt without "
            "it, silently). Send a larger image (one of 112x112 pixels gets 16 tokens), or leave it out")):
        inspect_prompt(processor, prompt, {"image": small})
    (placed,) = inspect_prompt(processor, prompt, {"image": parity.test_image(112, 112, seed=1)}).items
    assert placed.length == 16


def test_an_image_the_processor_cannot_take_is_refused_naming_its_size(zoo):
    """Pixtral's processor resizes a 2x300 image to no columns and raises on the size it
    computed; the refusal named the processor's error alone, not the image it came from."""
    from hf_bridge.inspect import build_processor, inspect_prompt
    from hf_bridge.validate import parity

    processor = build_processor(zoo("mistral3"))
    prompt = parity.prompt_text(processor.info.get_hf_processor(), parity.Case("one_image", num_images=1))
    with pytest.raises(ValueError, match=re.escape(
            "Image 0 of this request (2x300 pixels) could not be processed by the model's HF processor (ValueError: "
            "Size must contain 'height' and 'width' keys")):
        inspect_prompt(processor, prompt, {"image": parity.test_image(2, 300, seed=1)})
