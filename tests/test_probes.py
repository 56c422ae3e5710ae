"""Probes that hold for any input: `hf_bridge.probes` against real HF processors.

For every image size and processor setting drawn, the prompt hf_bridge lays out (its
learnt frame, then each placeholder replaced by the item's probed expansion, as vLLM
does) must equal the token ids the HF processor returns for the whole prompt. No vLLM
here: the probe calls the processor directly.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_bridge import frame
from hf_bridge.processor_probe import ProcessorProbe
from hf_bridge.validate import parity

PROBE_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def make_probe(processor, config=None) -> ProcessorProbe:
    return ProcessorProbe(processor, processor.tokenizer, config, call=lambda data, kw: processor(**data, **kw, return_tensors="pt"))


def laid_out(probe: ProcessorProbe, text: str, images: list) -> list[int]:
    """The prompt ids hf_bridge gives vLLM for `text` with `images`, after expansion."""
    learnt = probe.frame("image")
    placeholder = probe.placeholder_ids("image")
    ids = probe.tokenizer.encode(text)
    ids = frame.apply_frame(ids, [(learnt, placeholder, len(images))])
    out: list[int] = []
    items = iter(images)
    i = 0
    while i < len(ids):
        if ids[i : i + len(placeholder)] == placeholder:
            _, expansion = probe.probe("image", {"images": [next(items)]}, {})
            out += expansion.token_ids
            i += len(placeholder)
        else:
            out.append(ids[i])
            i += 1
    return out


sides = st.integers(min_value=8, max_value=400)
patch_multiples = st.integers(min_value=1, max_value=12)


@pytest.fixture(scope="module")
def fuyu_tokenizer(zoo):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(zoo("fuyu")).tokenizer


@PROBE_SETTINGS
@given(rows=patch_multiples, cols=patch_multiples, width=sides, height=sides, do_normalize=st.booleans())
def test_fuyu_self_inserting_probe_holds_for_any_size_and_setting(fuyu_tokenizer, rows, cols, width, height, do_normalize):
    """Fuyu inserts the image itself and pads it to its `size`; whatever that size and
    the image's, hf_bridge's layout equals the processor's own."""
    from transformers import FuyuImageProcessor, FuyuProcessor

    image_processor = FuyuImageProcessor(
        size={"height": 14 * rows, "width": 14 * cols}, patch_size={"height": 14, "width": 14}, do_normalize=do_normalize
    )
    processor = FuyuProcessor(image_processor=image_processor, tokenizer=fuyu_tokenizer)
    image = parity.test_image(width, height, seed=1)
    text = "Describe what you see."
    probe = make_probe(processor)
    assert probe.frame("image").inserts_item
    try:
        expected = processor(text=text, images=[image], return_tensors="pt")["input_ids"][0].tolist()
    except ValueError:  # transformers refuses this image (resized to nothing): so does hf_bridge
        with pytest.raises(ValueError):
            laid_out(probe, text, [image])
        return
    assert laid_out(probe, text, [image]) == expected


@pytest.fixture(scope="module")
def internvl_parts(zoo):
    from transformers import AutoConfig, AutoProcessor

    model_dir = zoo("internvl")
    return AutoProcessor.from_pretrained(model_dir), AutoConfig.from_pretrained(model_dir)


@PROBE_SETTINGS
@given(
    max_patches=st.integers(min_value=1, max_value=6),
    sizes=st.lists(st.tuples(sides, sides), min_size=1, max_size=3),
)
def test_tiling_probe_holds_for_any_sizes_and_tile_limit(internvl_parts, max_patches, sizes):
    """InternVL tiles each image by its aspect ratio, up to `max_patches`: several images of
    any sizes, side by side, lay out as the processor lays out the whole prompt."""
    from transformers import GotOcr2ImageProcessor, InternVLProcessor

    base, config = internvl_parts
    side = base.image_processor.size["height"]
    processor = InternVLProcessor(
        image_processor=GotOcr2ImageProcessor(
            size={"height": side, "width": side}, crop_to_patches=True, min_patches=1, max_patches=max_patches
        ),
        video_processor=base.video_processor,
        tokenizer=base.tokenizer,
        image_seq_length=base.image_seq_length,
        chat_template=base.chat_template,
    )
    images = [parity.test_image(w, h, seed=i + 1) for i, (w, h) in enumerate(sizes)]
    text = "".join("<IMG_CONTEXT>" for _ in images) + "Compare them."
    expected = processor(text=text, images=images, return_tensors="pt")["input_ids"][0].tolist()
    assert laid_out(make_probe(processor, config), text, images) == expected


def test_video_blank_follows_the_frames_the_processor_asks_for(zoo):
    """A video processor that samples 64 frames refuses the default blank videos; the
    probe then offers as many frames as it asks for."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(zoo("qwen2_vl"))
    processor.video_processor.do_sample_frames = True
    processor.video_processor.num_frames = 64
    probe = make_probe(processor)
    assert probe.failures == {}
    assert probe.blank_shape("video").frames == 64


def test_a_sampling_video_processor_is_asked_for_metadata_which_is_dropped_again(zoo):
    """Where frames are sampled, the processor is asked for each video's metadata (its
    placeholder step may read it: Cosmos3-Edge's does, without asking itself); the output
    keeps it only where the caller asked at top level, as transformers' own call does."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(zoo("qwen2_vl"))
    processor.video_processor.do_sample_frames = True
    processor.video_processor.num_frames = 4
    sent = []
    probe = ProcessorProbe(processor, processor.tokenizer, None,
                           call=lambda data, kw: sent.append(data) or processor(**data, **kw, return_tensors="pt"))
    item = probe.blank("video")
    text = probe.placeholder_text("video")
    assert "video_metadata" not in probe.call_one_item(text, item, {})
    assert sent[-1]["videos_kwargs"] == {"return_metadata": True}
    assert "video_metadata" in probe.call_one_item(text, item, {"return_metadata": True})
    assert "videos_kwargs" not in sent[-1]
    processor.video_processor.do_sample_frames = False
    probe.call_one_item(text, probe.blank("video"), {})
    assert "videos_kwargs" not in sent[-1]


def test_sampling_asked_per_request_needs_metadata_as_a_saved_one_does(zoo):
    """`do_sample_frames` in the call's kwargs (or its `videos_kwargs`) decides over the
    saved setting: validate's reference for Qwen3-Omni's 1 fps per request gave transformers
    no metadata, which refused the case, and the case read as not applicable."""
    from transformers import AutoProcessor

    from hf_bridge.probes import needs_video_metadata

    processor = AutoProcessor.from_pretrained(zoo("qwen2_vl"))
    processor.video_processor.do_sample_frames = False
    assert not needs_video_metadata(processor)
    assert needs_video_metadata(processor, {"do_sample_frames": True, "fps": 1})
    assert needs_video_metadata(processor, {"videos_kwargs": {"do_sample_frames": True}})
    processor.video_processor.do_sample_frames = True
    assert needs_video_metadata(processor, {"fps": 1})
    assert not needs_video_metadata(processor, {"do_sample_frames": False})
    # validate's reference gives every video its metadata, sampled or not (processors time frames by it)
    case = parity.Case("video", 112, num_videos=1, processor_kwargs='{"do_sample_frames": false}')
    assert "video_metadata" in parity.media_kwargs(processor, case)
    assert "video_metadata" in parity.media_kwargs(processor, parity.standard_cases(112)["video"])


def test_sampling_by_time_is_read_from_the_call_then_the_saved_setting(zoo):
    """By time where an `fps` and no `num_frames` reach the sampler (the call's kwargs, its
    `videos_kwargs`, then the saved values), as transformers' `sample_frames` reads them."""
    from transformers import AutoProcessor

    from hf_bridge.probes import samples_by_time

    processor = AutoProcessor.from_pretrained(zoo("qwen2_vl"))
    processor.video_processor.do_sample_frames, processor.video_processor.fps = False, 2
    assert not samples_by_time(processor)  # not sampling at all
    assert samples_by_time(processor, {"do_sample_frames": True})  # the saved fps
    assert samples_by_time(processor, {"videos_kwargs": {"do_sample_frames": True, "fps": 1}})
    assert not samples_by_time(processor, {"do_sample_frames": True, "num_frames": 2})
    assert not samples_by_time(processor, {"videos_kwargs": {"do_sample_frames": True, "num_frames": 2}})
    processor.video_processor.fps = None
    assert not samples_by_time(processor, {"do_sample_frames": True})


def test_probe_failure_names_the_modality_and_the_processor_error(zoo):
    """Asking for more frames than a blank video may hold: video cannot be probed, image can."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(zoo("qwen2_vl"))
    processor.video_processor.do_sample_frames = True
    processor.video_processor.num_frames = 1000
    probe = make_probe(processor)
    assert probe.placeable() == ["image"]
    assert probe.failures["video"].startswith("ProbeError: Qwen2VLProcessor refused every blank video hf_bridge probes it with")
    assert "Video can't be sampled. The inferred `num_frames=1000` exceeds `total_num_frames=4`" in probe.failures["video"]


def test_a_processor_that_drops_the_types_flag_is_typed_by_the_tokens_it_lists(zoo):
    """Idefics2's own `__call__` drops `return_mm_token_type_ids`. It lists its image token
    (`image_token_ids`), so transformers' `create_mm_token_type_ids` types the ids: the
    image tokens, not the `<fake_token_around_image>` markers around them, which the
    probed expansion covers. It then rewrites the text around them, which no per-item
    replacement can say, but from the text alone: hf_bridge lets it write the prompt
    (`text_step.py`). Listing no token, it is typed by the token it names (`image_token`);
    naming none either leaves nothing to type by."""
    from PIL import Image
    from transformers import AutoProcessor

    from hf_bridge import errors
    from hf_bridge.probes import ProbeError, token_type_ids

    processor = AutoProcessor.from_pretrained(zoo("idefics2"))
    out = processor(text=["hi <image> there"], images=[[Image.new("RGB", (64, 48))]], return_tensors="pt", return_mm_token_type_ids=True)
    assert "mm_token_type_ids" not in out
    ids, types = out["input_ids"][0].tolist(), token_type_ids(out, processor)[0].tolist()
    assert sorted({(i, t) for i, t in zip(ids, types) if t}) == [(processor.image_token_id, 1)]
    assert types.count(1) == processor.image_seq_len
    probe = make_probe(processor)
    assert probe.failures == {}
    assert probe.writes_prompt == {"image"}
    assert probe.core("image", {}) == (processor.image_token_id,) * processor.image_seq_len
    processor.image_token_id = None
    assert token_type_ids(out, processor)[0].tolist() == types
    processor.image_token = None
    with pytest.raises(ProbeError, match="lists no multimodal tokens") as raised:
        token_type_ids(out, processor)
    assert str(raised.value) == errors.no_token_types(processor)


def test_a_processor_that_names_its_token_by_text_alone_is_typed_by_it():
    """Janus's processor sets `image_token = "<|image_token|>"` and no id, so transformers'
    `mm_token_type_ids` come back all zeros (`ProcessorMixin` types the ids a processor
    lists). hf_bridge types the token it names, with transformers' image code; the plugin
    had handed such a checkpoint to the in-tree backend, which cannot count its tokens."""
    from PIL import Image

    from hf_bridge.probes import named_token_ids, token_type_ids
    from hf_bridge.zoo import shrink
    from hf_bridge.zoo.build import build_tokenizer

    spec = shrink.generic_spec("janus")
    processor = spec.make_processor(build_tokenizer(spec.special_tokens, add_bos=False, extra_attributes=spec.tokenizer_attributes))
    out = processor(text=["hi " + processor.image_token], images=[Image.new("RGB", (64, 48))], return_tensors="pt",
                    return_mm_token_type_ids=True)
    assert not out["mm_token_type_ids"].any()
    image_id = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    assert named_token_ids(processor) == {"image": image_id}
    ids, types = out["input_ids"][0].tolist(), token_type_ids(out, processor)[0].tolist()
    assert types == [int(i == image_id) for i in ids] and types.count(1) == processor.num_image_tokens
    assert make_probe(processor).failures == {}


@pytest.fixture(scope="module")
def idefics2_probe(zoo):
    from transformers import AutoProcessor

    return make_probe(AutoProcessor.from_pretrained(zoo("idefics2")))


words = st.sampled_from(["hi", " there", "What", ".", " ", "\n", "<end_of_utterance>", "x,y"])


@PROBE_SETTINGS
@given(parts=st.lists(st.one_of(words, st.just("<image>")), min_size=1, max_size=8), splitting=st.booleans())
def test_a_processor_that_writes_the_prompt_is_laid_out_as_it_writes_it(idefics2_probe, parts, splitting):
    """Idefics2 shares one marker between adjacent images and puts a space between a
    closing marker and a word touching it. For any arrangement of words and images, the
    prompt hf_bridge gives vLLM (the processor's text step with each item's core folded
    back into its placeholder, `ProcessorProbe.written_prompt`, then each placeholder
    expanded to the item's own core, as vLLM's prompt update does) equals the ids the
    processor returns for the whole prompt with its images, with or without image
    splitting."""
    from PIL import Image

    probe = idefics2_probe
    text = "".join(parts)
    images = [Image.new("RGB", (40 + 9 * i, 64)) for i in range(text.count("<image>"))]
    kwargs = {"do_image_splitting": splitting}
    processor = probe.processor
    processor.image_processor.do_image_splitting = splitting  # its text step reads the attribute, not the kwarg
    try:
        expected = processor(text=text, images=[images] if images else None, return_tensors="pt")["input_ids"][0].tolist()
        prompt = probe.tokenizer.encode(text)
        if not images:
            assert prompt == expected
            return
        placeholder = probe.placeholder_ids("image")
        written = probe.written_prompt(prompt, {"image": len(images)}, kwargs)
        cores = [probe.probe("image", {"images": [image]}, kwargs)[1].token_ids for image in images]
        assert expand(written, placeholder, cores) == expected
    finally:
        processor.image_processor.do_image_splitting = False


def expand(ids: list[int], placeholder: list[int], replacements: list) -> list[int]:
    """`ids` with each occurrence of `placeholder` replaced by the next of `replacements`."""
    out, items, i = [], iter(replacements), 0
    while i < len(ids):
        if ids[i : i + len(placeholder)] == placeholder:
            out += next(items)
            i += len(placeholder)
        else:
            out.append(ids[i])
            i += 1
    return out


def test_a_processor_that_numbers_and_packs_its_items_is_learnt_so(zoo, generic):
    """MiniCPM-V 4.6 writes each image's index into its tokens and packs a prompt's
    images along the pixels' last dimension: the probe learns the number's window and
    that its items must not be stacked; renumbered, each image's expansion is the one
    the processor writes for the whole prompt. A number wider than the first item's is
    refused (`numbering.renumber`), not misplaced. LLaVA does neither."""
    from transformers import AutoConfig, AutoProcessor

    from hf_bridge.numbering import renumber
    from hf_bridge.placeholders import PlaceholderError

    model_dir = generic("minicpmv4_6")
    processor = AutoProcessor.from_pretrained(model_dir)
    probe = make_probe(processor, AutoConfig.from_pretrained(model_dir))
    assert probe.stacks_items_along_rows("image") is False
    images = [parity.test_image(64 + 32 * i, 64, seed=i + 1) for i in range(3)]
    whole = processor(text=processor.image_token * 3, images=images, return_tensors="pt")["input_ids"][0].tolist()
    renumbered = []
    for index, image in enumerate(images):
        _, expansion = probe.probe("image", {"images": [image]}, {})
        renumbered += renumber(expansion.token_ids, expansion.is_embed, probe.number_window("image", index, {}))
    assert renumbered == whole
    assert [processor.tokenizer.decode(t) for t in probe.number_window("image", 2, {}).at_index] == ["2"]
    assert len(processor.tokenizer.encode("10", add_special_tokens=False)) == 2, "the shrunk tokenizer splits digits"
    with pytest.raises(PlaceholderError, match="numbers this item with"):
        renumber(expansion.token_ids, expansion.is_embed, probe.number_window("image", 10, {}))

    llava = AutoProcessor.from_pretrained(zoo("llava"))
    llava_probe = make_probe(llava)
    assert llava_probe.stacks_items_along_rows("image") is True
    assert llava_probe.number_window("image", 1, {}) is None


@pytest.mark.parametrize(("extractor", "seconds"), [
    ("WhisperFeatureExtractor", 30.0),  # its `n_samples`
    ("Gemma3nAudioFeatureExtractor", 30.0),  # the `max_length` (samples) its call cuts to by default
    ("ParakeetFeatureExtractor", 1.0),  # says nothing: a blank clip of `AUDIO_SECONDS`
])
def test_the_longest_clip_is_read_where_the_feature_extractor_says(extractor, seconds):
    import types

    import transformers

    from hf_bridge.probes import longest_audio_seconds

    processor = types.SimpleNamespace(feature_extractor=getattr(transformers, extractor)())
    assert longest_audio_seconds(processor) == seconds


def test_the_sides_a_processor_gives_every_image_are_learnt_as_fixed(zoo):
    """LLaVA resizes and crops every image to its CLIP's size: those sides are fixed, and
    kwargs that change them are what a request is refused for (`pixel_sides.py`).
    Qwen2-VL's patches are flat, and Pixtral's sides follow the image's aspect ratio:
    nothing is fixed."""
    from transformers import AutoProcessor

    from hf_bridge.pixel_sides import changed_sides, tensor_shapes

    llava = make_probe(AutoProcessor.from_pretrained(zoo("llava")))
    fixed = llava.fixed_pixel_sides("image", {})
    assert fixed == {"pixel_values": (56, 56)}
    unresized, _ = llava.probe("image", {"images": [parity.test_image(400, 300, 1)]}, {"do_resize": False, "do_center_crop": False})
    assert changed_sides(fixed, tensor_shapes(unresized)) == {"pixel_values": ((300, 400), (56, 56))}
    for model in ("qwen2_vl", "mistral3"):
        assert make_probe(AutoProcessor.from_pretrained(zoo(model))).fixed_pixel_sides("image", {}) == {}, model


def test_a_blank_items_placeholder_length_is_the_processors_count_learnt_once(zoo):
    """The engine's size searches read the placeholder length of blank items of many sizes
    and frame counts, three times at engine start, each from a processing info of its own: the probe
    keeps each length, so the processor runs once per shape, and the length is the one
    transformers' own count gives, with the item's markers."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(zoo("qwen2_vl"))
    calls = []
    probe = ProcessorProbe(processor, processor.tokenizer, None,
                           call=lambda data, kw: calls.append(1) or processor(**data, **kw, return_tensors="pt"))
    for modality in ("image", "video"):
        probe.frame(modality)  # learnt once, by calls of its own
    counted, calls_per_round = {}, []
    for _ in range(2):
        before = len(calls)
        counted["image"] = probe.blank_placeholder_length("image", 224, 112)
        counted["video"] = probe.blank_placeholder_length("video", 112, 56, 4)
        calls_per_round.append(len(calls) - before)
    assert calls_per_round == [2, 0]
    own = processor._get_num_multimodal_tokens(image_sizes=[[112, 224]], video_sizes=[[4, 56, 112]])
    markers = 2  # <|vision_start|> and <|vision_end|>, which the placeholder holds and transformers' count leaves out
    assert counted == {"image": own["num_image_tokens"][0] + markers, "video": own["num_video_tokens"][0] + markers}
