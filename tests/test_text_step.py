"""`text_step.py`: folding the items a processor wrote into a prompt back into their
placeholders, for any prompt, and each item's typed core (pure); then an engine serving
Idefics2, whose processor writes its prompts, from text and from token ids."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hf_bridge.placeholders import Expansion, PlaceholderError
from hf_bridge.text_step import fold_cores, typed_core

CORE = (9, 9, 7, 9, 9)  # feature tokens with a marker inside (Idefics2's split images)
PLACEHOLDER = [5]
text_ids = st.lists(st.integers(min_value=0, max_value=8), max_size=6)  # never a whole core


@given(segments=st.lists(text_ids, min_size=1, max_size=5))
def test_folding_gives_the_prompt_with_one_placeholder_per_item(segments):
    written = [t for i, segment in enumerate(segments) for t in (segment if i == 0 else [*CORE, *segment])]
    folded = [t for i, segment in enumerate(segments) for t in (segment if i == 0 else [*PLACEHOLDER, *segment])]
    assert fold_cores(written, CORE, PLACEHOLDER, len(segments) - 1) == folded


def test_another_number_of_items_is_refused():
    with pytest.raises(PlaceholderError, match=r"wrote 2 item\(s\) into the prompt for its 3 placeholder\(s\)"):
        fold_cores([1, *CORE, 2, *CORE], CORE, PLACEHOLDER, 3)


def test_the_core_runs_from_the_first_to_the_last_typed_token():
    expansion = Expansion("image", (7, 9, 7, 9, 7), (False, True, False, True, False), (0, 1, 0, 1, 0))
    core = typed_core(expansion)
    assert (core.token_ids, core.is_embed, core.type_ids) == ((9, 7, 9), (True, False, True), (1, 0, 1))
    assert core.encoder_modality == "image" and core.num_embeds == 2
    with pytest.raises(PlaceholderError, match="typed no token"):
        typed_core(Expansion("image", (7,), (False,), (0,)))


@pytest.mark.engine
def test_prompts_the_processor_writes_are_served_from_text_and_from_ids(zoo, engines):
    """Idefics2 through the engine: a text prompt keeps parity; the same prompt as the
    tokenizer's ids gives the same prompt and tokens; ids that do not decode back to
    themselves (a word spelt letter by letter) are refused with the fix, and the engine
    keeps serving."""
    from transformers import AutoProcessor
    from vllm import SamplingParams

    from hf_bridge import errors
    from hf_bridge.validate import parity
    from hf_bridge.validate.reference import references

    model_dir = zoo("idefics2")
    processor = AutoProcessor.from_pretrained(model_dir)
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2})
    case = parity.standard_cases(64)["two_images"]
    (reference,) = references(model_dir, [case])
    assert parity.compare(reference, parity.vllm_result(llm, processor, case)) == []

    text = parity.prompt_text(processor, case)
    images = {"image": case.images}
    greedy = SamplingParams(max_tokens=8, temperature=0)
    from_text = llm.generate({"prompt": text, "multi_modal_data": images}, greedy, use_tqdm=False)[0]
    ids = processor.tokenizer.encode(text, add_special_tokens=False)
    from_ids = llm.generate({"prompt_token_ids": ids, "multi_modal_data": images}, greedy, use_tqdm=False)[0]
    assert from_ids.prompt_token_ids == from_text.prompt_token_ids == reference.prompt_ids
    assert from_ids.outputs[0].token_ids == from_text.outputs[0].token_ids

    spelt = [i for c in "hello" for i in processor.tokenizer.encode(c, add_special_tokens=False)]
    with pytest.raises(ValueError) as refused:
        llm.generate({"prompt_token_ids": [*spelt, *ids], "multi_modal_data": images}, greedy, use_tqdm=False)
    assert errors.prompt_ids_not_text(processor) in str(refused.value)
    again = llm.generate({"prompt": text, "multi_modal_data": images}, greedy, use_tqdm=False)[0]
    assert again.outputs[0].token_ids == from_text.outputs[0].token_ids
