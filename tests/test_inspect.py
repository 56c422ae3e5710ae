"""`hf_bridge.inspect(...)`: what hf_bridge makes of a prompt, shown as text and in a notebook.

The views (`hf_bridge/display.py`, pure) are checked by property over any items; the
whole path on a zoo checkpoint whose weights are removed (it needs config and processor
only), against the ranges `test_placeholder_ranges` proves equal to transformers'.
"""

from __future__ import annotations

import html
import re
import shutil

from hypothesis import given
from hypothesis import strategies as st

import hf_bridge
from helpers.media_file_writers import write_clip, write_turned_photo
from hf_bridge.display import EMBED, KIND_COLOURS, PADDING, TEXT, ItemSummary, as_html, as_text, position_kinds, runs
from hf_bridge.validate import parity
from hf_bridge.zoo import SPECS


@st.composite
def prompts(draw):
    """Tokens (some repeated, some needing HTML escapes) and non-overlapping items."""
    n = draw(st.integers(1, 40))
    tokens = draw(st.lists(st.sampled_from(["a", "<img>", "[IMG]", "&", '"q"', "Ċ"]), min_size=n, max_size=n))
    cuts = sorted(draw(st.sets(st.integers(0, n), max_size=6)))
    items = []
    for index, (start, end) in enumerate(zip(cuts[::2], cuts[1::2])):
        if end > start:
            mask = draw(st.lists(st.booleans(), min_size=end - start, max_size=end - start))
            items.append(ItemSummary("image", index, start, end - start, mask, {"pixel_values": "(1, 3, 8, 8) float32"}))
    return tokens, items


@given(prompts())
def test_every_position_has_one_kind_and_runs_cover_the_prompt(prompt):
    tokens, items = prompt
    kinds = position_kinds(len(tokens), items)
    assert len(kinds) == len(tokens)
    assert sum(kind == EMBED for kind, _ in kinds) == sum(item.num_embeds for item in items)
    assert sum(kind == PADDING for kind, _ in kinds) == sum(item.num_padding for item in items)
    assert all((item is None) == (kind == TEXT) for kind, item in kinds)
    merged = runs(tokens, kinds)
    assert [t for token, count, _, _ in merged for t in [token] * count] == list(tokens)


@given(prompts())
def test_html_escapes_every_token_and_colours_every_run(prompt):
    tokens, items = prompt
    page = as_html("title <b>", ["fact & more"], tokens, items)
    assert "<img>" not in page and "title <b>" not in page  # only markup of its own
    colours = re.findall(r"background:(#[0-9a-f]{6});margin", page)
    merged = runs(tokens, position_kinds(len(tokens), items))
    assert colours == [KIND_COLOURS[kind] for _, _, kind, _ in merged]
    for token, *_ in merged:
        assert html.escape(token) in page


@given(prompts())
def test_text_view_brackets_each_item_once(prompt):
    tokens, items = prompt
    text = as_text("title", [], tokens, items)
    strip = text.splitlines()[-1]
    for item in items:
        assert strip.count(f"[{item.label}:") == 1
    assert strip.count("]") >= len(items)
    assert len(text.splitlines()) == 1 + 1 + max(len(items), 1)


def test_inspection_of_a_checkpoint_without_weights(zoo, tmp_path):
    """Mistral3's two images of different sizes: rows of [IMG] ended by [IMG_BREAK], the
    last by [IMG_END] (grid padding), as test_placeholder_ranges proves against HF."""
    source = zoo("mistral3")
    model_dir = tmp_path / "mistral3-no-weights"
    shutil.copytree(source, model_dir, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    case = parity.standard_cases(SPECS["mistral3"].min_image_side)["two_images"]
    processor = hf_bridge.inspect.build_processor(model_dir)
    prompt = parity.prompt_text(processor.info.get_hf_processor(), case)

    result = hf_bridge.inspect(model_dir, prompt, images=case.images)

    assert [(i.offset, i.length, i.num_embeds) for i in result.items] == [(6, 15, 12), (21, 16, 12)]
    text = repr(result)
    assert "PixtralProcessor (transformers), called by hf_bridge.processing.HFBridgeMultiModalProcessor" in text
    assert "prompt: 48 tokens, 2 images" in text
    assert "image 0: positions 6..20 (15), 12 embedding, 3 grid padding; image.image_sizes (1, 2) int64, image.pixel_values (1, 3, 84, 112) float32" in text
    assert "image 1: positions 21..36 (16), 12 embedding, 4 grid padding; image.image_sizes (1, 2) int64, image.pixel_values (1, 3, 112, 84) float32" in text
    assert "[image 0: [IMG]x4 {[IMG_BREAK]} [IMG]x4 {[IMG_BREAK]} [IMG]x4 {[IMG_END]} ]" in text
    assert "hf_bridge_" not in text  # bookkeeping fields restate what is shown
    page = result._repr_html_()
    assert page.count(f"background:{KIND_COLOURS[PADDING]};margin") == 7  # 3 + 4 grid padding tokens, none merged
    assert "[IMG_BREAK]" in page and "<td>6..20</td>" in page


def test_inspection_of_a_prompt_without_media_shows_the_processors_own_tokens(zoo):
    """Chameleon's processor ends every prompt with its separator; the engine adds it to a
    prompt without images too (`text_only_prompts.py`), and so does the inspection."""
    processor = hf_bridge.inspect.build_processor(zoo("chameleon"))
    tokenizer = processor.info.get_tokenizer()
    text = parity.standard_cases(64)["text_only"].text

    result = hf_bridge.inspect(processor, text)

    assert result.view.prompt_ids == [*tokenizer.encode(text), tokenizer.sep_token_id]
    assert result.tokens[-1] == tokenizer.sep_token
    assert result.items == []


def test_inspection_reads_files_as_the_server_decodes_them(zoo, generic, tmp_path):
    """An item given as a file's path is what vLLM's server makes of that file: a photo
    turned by its EXIF orientation, a video's every frame with the file's 30 fps, a clip
    at its own rate for vLLM to resample. Each gives what the decoded item gives."""
    import torch
    from scipy.io import wavfile

    from hf_bridge import media_files

    write_turned_photo(tmp_path / "portrait.jpg")
    write_clip(tmp_path / "clip.mp4", fps=30, num_frames=6)
    wavfile.write(tmp_path / "clip.wav", 22050, parity.test_audio(seconds=0.5, sampling_rate=22050))

    def same(by_path, by_item):
        assert by_path.view.prompt_ids == by_item.view.prompt_ids
        for a, b in zip(by_path.items, by_item.items, strict=True):
            assert (a.offset, a.length) == (b.offset, b.length) and a.data.keys() == b.data.keys()
            assert all(torch.equal(a.data[key], b.data[key]) for key in a.data)

    qwen2_vl = hf_bridge.inspect.build_processor(zoo("qwen2_vl"))
    prompt = "<|vision_start|><|image_pad|><|vision_end|><|vision_start|><|video_pad|><|vision_end|>What is it?"
    by_path = hf_bridge.inspect(qwen2_vl, prompt, images=[tmp_path / "portrait.jpg"], videos=[str(tmp_path / "clip.mp4")])
    turned = media_files.read_image(str(tmp_path / "portrait.jpg"))
    assert turned.size == (60, 120)
    same(by_path, hf_bridge.inspect(qwen2_vl, prompt, images=[turned], videos=[media_files.read_video(str(tmp_path / "clip.mp4"))]))
    assert by_path.items[0].data["image.image_grid_thw"].tolist() == [[1, 8, 4]]  # 60 wide, 120 high: turned

    qwen2_audio = hf_bridge.inspect.build_processor(generic("qwen2_audio"))
    prompt = "<|audio_bos|><|AUDIO|><|audio_eos|>What is it?"
    by_path = hf_bridge.inspect(qwen2_audio, prompt, audios=[tmp_path / "clip.wav"])
    same(by_path, hf_bridge.inspect(qwen2_audio, prompt, audios=[media_files.audio_samples(str(tmp_path / "clip.wav"))]))
    assert by_path.items[0].num_embeds == 12  # 0.5 s at 25 a second: resampled to 16 kHz (unresampled, 17)
