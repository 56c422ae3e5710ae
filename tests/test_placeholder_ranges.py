"""Exact placeholder ranges and `is_embed` masks, as vLLM receives them from hf_bridge.

Two images in one prompt (tiles for Idefics3/SmolVLM/InternVL, a row grid for Mistral3);
one for Fuyu, whose processor takes one image and inserts it itself, before the text.
Each is checked against transformers' own processing of the whole prompt, not against
hf_bridge's logic: the same ids, every token it types as multimodal inside an item, and
`is_embed` exactly where the HF model scatters image features (the config's image token).
"""

from __future__ import annotations

import pytest
from transformers import AutoConfig

from hf_bridge.inspect import build_processor, inspect_prompt
from hf_bridge.validate import parity
from hf_bridge.zoo import SPECS

FAKE, GLOBAL = "<fake_token_around_image>", "<global-img>"
TILED_PADDING = [FAKE, "<row_1_col_1>", FAKE, "<row_1_col_2>", "Ċ", FAKE, "<row_2_col_1>", FAKE, "<row_2_col_2>",
                 "Ċ", "Ċ", FAKE, GLOBAL, FAKE]

EXPECTED = {
    # arch: [(offset, length, embeddings, grid padding tokens in order), ...] per image
    "mistral3": [
        (6, 15, 12, ["[IMG_BREAK]", "[IMG_BREAK]", "[IMG_END]"]),  # 3 rows of 4
        (21, 16, 12, ["[IMG_BREAK]", "[IMG_BREAK]", "[IMG_BREAK]", "[IMG_END]"]),  # 4 rows of 3
    ],
    "idefics3": [(6, 34, 20, TILED_PADDING), (40, 34, 20, TILED_PADDING)],  # 2x2 tiles + global
    "smolvlm": [(6, 34, 20, TILED_PADDING), (40, 34, 20, TILED_PADDING)],
    "internvl": [(6, 22, 20, ["<img>", "</img>"]), (28, 22, 20, ["<img>", "</img>"])],  # 4 tiles + thumbnail
    # 3 rows of 4 patches, each row ended by |NEWLINE|; the BOS after it is the prompt's
    "fuyu": [(0, 15, 12, ["|NEWLINE|", "|NEWLINE|", "|NEWLINE|"])],
}
CASE = {"fuyu": "one_image"}


@pytest.mark.parametrize("arch", list(EXPECTED))
def test_exact_ranges_and_is_embed(arch, zoo):
    model_dir = zoo(arch)
    processor = build_processor(model_dir)
    hf_processor = processor.info.get_hf_processor()
    tokenizer = processor.info.get_tokenizer()
    case = parity.standard_cases(SPECS[arch].min_image_side)[CASE.get(arch, "two_images")]
    view = inspect_prompt(processor, parity.prompt_text(hf_processor, case), {"image": case.images})

    got = []
    for item in view.items:
        tokens = tokenizer.convert_ids_to_tokens(view.prompt_ids[item.offset : item.offset + item.length])
        padding = [t for t, e in zip(tokens, item.is_embed) if not e]
        got.append((item.offset, item.length, item.num_embeds, padding))
        embed_tokens = {t for t, e in zip(tokens, item.is_embed) if e}
        assert len(embed_tokens) == 1, embed_tokens  # only the feature token receives rows
    assert got == EXPECTED[arch]

    # transformers' own whole-prompt processing: same ids; every token it types as image
    # lies inside an item; and the positions its model fills with image features (the
    # config's image token, `get_placeholder_mask`) are exactly the is_embed positions
    hf = parity.hf_inputs(hf_processor, case, return_mm_token_type_ids=True)
    types = hf.get("mm_token_type_ids", hf.get("token_type_ids"))[0].tolist()
    ids = hf["input_ids"][0].tolist()
    assert ids == view.prompt_ids
    inside = set()
    for item in view.items:
        inside.update(range(item.offset, item.offset + item.length))
        assert any(types[item.offset : item.offset + item.length]), "an item holds no token transformers types"
    assert {i for i, t in enumerate(types) if t} <= inside
    config = AutoConfig.from_pretrained(model_dir)
    feature_token = next(getattr(config, f) for f in ("image_token_id", "image_token_index") if isinstance(getattr(config, f, None), int))
    hf_embed = [t == feature_token for t in ids]
    ours = [False] * len(ids)
    for item in view.items:
        ours[item.offset : item.offset + item.length] = item.is_embed
    assert ours == hf_embed


@pytest.mark.parametrize(("arch", "cause"), [
    # the run of embedding tokens is more placeholders than images (LLaVA), or hides them (Qwen2-VL)
    ("llava", r"holds 16 image placeholder\(s\) \('<image>'\) but the request carries 1 images\. It holds '<image>' 16 times in a row"),
    ("qwen2_vl", r"holds 0 image placeholder\(s\) .* It holds '<\|image_pad\|>' 6 times in a row"),
    # the placeholder survives its expansion: vLLM expanded it again, and ran the first expansion's tokens as text
    ("gemma3", r"holds '<image_soft_token>' 4 time\(s\) outside its images' placeholders"),
])
def test_the_processors_input_ids_sent_as_the_prompt_are_refused_naming_the_expansion(arch, cause, zoo):
    """A porting engineer's first try: transformers' `input_ids`, whose placeholders the HF
    processor expanded already, sent as the prompt with the image. vLLM expands each
    placeholder itself; Gemma3's prompt had run with 9 tokens more than transformers',
    silently. The same text is served, with transformers' ids."""
    from transformers import AutoProcessor

    model_dir = zoo(arch)
    processor, hf_processor = build_processor(model_dir), AutoProcessor.from_pretrained(model_dir)
    case = parity.standard_cases(SPECS[arch].min_image_side)["one_image"]
    text = parity.prompt_text(hf_processor, case)
    input_ids = hf_processor(text=[text], images=case.images)["input_ids"][0]
    input_ids = list(getattr(input_ids, "tolist", lambda: input_ids)())
    assert inspect_prompt(processor, text, {"image": case.images}).prompt_ids == input_ids
    with pytest.raises(ValueError, match=cause + r".*send the prompt as the processor takes it"):
        inspect_prompt(processor, input_ids, {"image": case.images})


def test_an_embedding_token_in_the_text_of_a_processor_that_inserts_its_images_is_refused(zoo):
    """Fuyu's processor inserts each image before the text, and its image token ('|SPEAKER|')
    in the text, glued to words, tokenizes apart from the placeholder hf_bridge looks for: it
    ran as text beside the image's own tokens."""
    model_dir = zoo("fuyu")
    processor = build_processor(model_dir)
    image = parity.standard_cases(SPECS["fuyu"].min_image_side)["one_image"].images
    with pytest.raises(ValueError, match=r"holds '\|SPEAKER\|' 1 time\(s\) outside its images' placeholders.*"
                                         r"without it: FuyuProcessor inserts each image itself\.$"):
        inspect_prompt(processor, "Hello.|SPEAKER|\nWorld", {"image": image})
    assert inspect_prompt(processor, "Hello.\nWorld", {"image": image}).items


@pytest.mark.parametrize("arch", ["fuyu", "mistral3"])
def test_profiling_prompts_are_written_as_real_ones(arch, zoo):
    """vLLM profiles start-up (a GPU's in every mode, a CPU's compiled) with a dummy prompt
    of the most items a prompt may hold: written as a real prompt, with no placeholder
    where the processor inserts each image itself (Fuyu's had one, refused as a user's
    would be, so its engine could not start)."""
    processor = build_processor(zoo(arch), limit_mm_per_prompt={"image": 2})
    text = processor.dummy_inputs.get_dummy_text({"image": 2})
    assert text == ("" if arch == "fuyu" else "[IMG]" * 2)
    dummy = processor.get_dummy_mm_inputs({"image": 2})
    assert len(dummy["mm_placeholders"]["image"]) == 2
