"""`token_tables.py` without vLLM: per-token decoder inputs learnt per token id from the processor.

Ernie 4.5 VL's processor derives `moe_mm_token_type_ids` (text, image or video experts, the
items' start and end markers included) from the ids alone; hf_bridge looks them up per step.
"""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_bridge.hf_classes import base_model_class, forward_takes
from hf_bridge.token_tables import TokenTableInputs, learn_token_tables, may_take_token_fields, token_fields
from hf_bridge.zoo import shrink

FIELD = "moe_mm_token_type_ids"


def _processor(model_type: str):
    from hf_bridge.zoo.tokenizer import build_tokenizer

    spec = shrink.generic_spec(model_type)
    tokenizer = build_tokenizer(spec.special_tokens, add_bos=False, extra_attributes=spec.tokenizer_attributes)
    return spec.make_processor(tokenizer), shrink.default_config(model_type)


ERNIE, ERNIE_CONFIG = _processor("ernie4_5_vl_moe")
TABLES = learn_token_tables(ERNIE, token_fields(ERNIE, lambda name: forward_takes(base_model_class(ERNIE_CONFIG), name)))


def test_the_field_the_processor_adds_and_the_model_takes_is_learnt():
    """Only Ernie's own addition: the tokenizer's and the media processors' outputs, and
    `mm_token_type_ids` (read for M-RoPE), are not tables."""
    assert list(TABLES) == [FIELD]
    markers = {ERNIE.image_token_id: 1, ERNIE.image_start_token_id: 1, ERNIE.image_end_token_id: 1,
               ERNIE.video_token_id: 2, ERNIE.video_start_token_id: 2, ERNIE.video_end_token_id: 2}
    assert TABLES[FIELD] == markers


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, len(ERNIE.tokenizer) - 1), min_size=1, max_size=40))
def test_a_step_reads_what_the_processor_gives_its_ids(ids):
    """Any ids, a step's worth: the looked-up values are the processor's own for those ids."""
    inputs = TokenTableInputs(TABLES, len(ERNIE.tokenizer), max_tokens=64, device=torch.device("cpu"))
    inputs.record(torch.tensor(ids))
    (handed,) = inputs.decoder_kwargs(len(ids)).values()
    assert handed.tolist() == [list(ERNIE.create_moe_mm_token_type_ids([ids])[0])]


def test_a_prompt_with_media_reads_as_the_processor_returned_it():
    from hf_bridge.validate import parity

    case = parity.Case("both", 64, num_images=1, num_videos=1, text="Compare.")
    out = ERNIE(text=[parity.prompt_text(ERNIE, case)], images=case.images, videos=case.videos, return_tensors="pt")
    inputs = TokenTableInputs(TABLES, len(ERNIE.tokenizer), max_tokens=4096, device=torch.device("cpu"))
    inputs.record(out["input_ids"][0])
    assert torch.equal(inputs.decoder_kwargs(out["input_ids"].shape[1])[FIELD], out[FIELD])
    assert out[FIELD].eq(1).any() and out[FIELD].eq(2).any()


def test_processors_without_such_a_field_learn_nothing():
    """Qwen2.5-VL's processor adds `second_per_grid_ts`, per video, not per token: no row,
    no table. LLaVA's adds nothing; its forward takes no per-token input to look for."""
    qwen, config = _processor("qwen2_5_vl")
    fields = token_fields(qwen, lambda name: forward_takes(base_model_class(config), name))
    assert fields == ["second_per_grid_ts"] and learn_token_tables(qwen, fields) == {}
    llava, config = _processor("llava")
    assert token_fields(llava, lambda name: forward_takes(base_model_class(config), name)) == []
    assert not may_take_token_fields(["input_ids", "position_ids", "mm_token_type_ids", "pixel_values", "image_position_ids"])
    assert may_take_token_fields(["input_ids", FIELD])

