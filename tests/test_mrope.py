"""M-RoPE positions from the HF model's own `get_rope_index` (`hf_bridge/mrope.py`): each
item's fields put back in prompt order, and text positions on every axis for a model with
no `get_rope_index`.

The real methods (Qwen2-VL's, Qwen3.5's, MiniCPM-V 4.7's with `target_sizes`) are checked
end to end by the parity tests; here, that each field reaches the method in the shape
transformers' processor gives it for the whole prompt.
"""

from __future__ import annotations

import inspect

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_bridge import hf_classes
from hf_bridge.mrope import MROPE_AXES, Derivation, PlacedItem, derivations, item_fields, mrope_positions, names_handed_over


def test_without_get_rope_index_every_axis_holds_the_text_positions():
    positions, delta = mrope_positions(None, list(range(7)), [])
    assert positions.shape == (MROPE_AXES, 7) and delta == 0
    assert all(torch.equal(row, torch.arange(7)) for row in positions)


def test_the_fields_taken_are_the_position_fields_and_those_the_method_names():
    def qwen_like(input_ids, mm_token_type_ids=None, image_grid_thw=None, video_grid_thw=None, attention_mask=None): ...

    def minicpm_like(input_ids, mm_token_type_ids=None, target_sizes=None, target_sizes_videos=None, downsample_mode=None,
                     attention_mask=None, **kwargs): ...

    assert set(item_fields(qwen_like)) == {"image_grid_thw", "video_grid_thw", "second_per_grid_ts"}
    assert {"target_sizes", "target_sizes_videos", "downsample_mode"} <= set(item_fields(minicpm_like))
    assert not {"input_ids", "mm_token_type_ids", "attention_mask"} & set(item_fields(minicpm_like))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.integers(1, 9), st.integers(1, 9)), min_size=1, max_size=4))
def test_each_items_rows_reach_the_method_in_prompt_order(items):
    """Per item: a (3,) grid, a (2,) size row and a scalar time, as vLLM holds them; the method
    gets (items, 3), (items, 2) and (items,), as the processor returns them for the prompt,
    and the type ids at each item's place."""
    seen = {}

    def get_rope_index(input_ids, mm_token_type_ids=None, image_grid_thw=None, target_sizes=None, second_per_grid_ts=None):
        seen.update(types=mm_token_type_ids, grid=image_grid_thw, sizes=target_sizes, times=second_per_grid_ts)
        return torch.zeros(MROPE_AXES, 1, input_ids.shape[1], dtype=torch.long), torch.zeros(1, 1)

    placed, offset = [], 1
    for length, height, width in items:
        fields = {"image_grid_thw": torch.tensor([1, height, width]), "target_sizes": torch.tensor([height, width]),
                  "second_per_grid_ts": torch.tensor(0.5 * length), "pixel_values": torch.zeros(4, 3)}
        placed.append(PlacedItem(offset, torch.ones(length, dtype=torch.long), fields))
        offset += length + 1
    mrope_positions(get_rope_index, list(range(offset)), placed)
    assert seen["grid"].tolist() == [[1, h, w] for _, h, w in items]
    assert seen["sizes"].tolist() == [[h, w] for _, h, w in items]
    assert seen["times"].tolist() == [0.5 * n for n, _, _ in items]
    expected = torch.zeros(offset, dtype=torch.long)
    for item in placed:
        expected[item.offset:item.offset + len(item.type_ids)] = 1
    assert torch.equal(seen["types"][0], expected)


def test_fields_the_forward_hands_over_under_another_name_reach_the_method_by_its_name():
    """Qwen2.5-Omni's thinker calls `get_rope_index(..., audio_feature_lengths,
    video_second_per_grid)` positionally, for its `audio_seqlens` and `second_per_grids`:
    the processor's `video_second_per_grid` must reach the method as `second_per_grids`."""
    from transformers import Qwen2_5OmniThinkerForConditionalGeneration, Qwen2VLModel

    thinker = Qwen2_5OmniThinkerForConditionalGeneration
    handed = names_handed_over(thinker, thinker.get_rope_index)
    assert handed == {"audio_seqlens": "audio_feature_lengths", "second_per_grids": "video_second_per_grid"}
    assert names_handed_over(Qwen2VLModel, Qwen2VLModel.get_rope_index) == {}
    seen = {}

    def get_rope_index(input_ids, video_grid_thw=None, attention_mask=None, second_per_grids=None):
        seen.update(times=second_per_grids, mask=attention_mask)
        return torch.zeros(MROPE_AXES, 1, input_ids.shape[1], dtype=torch.long), torch.zeros(1, 1)

    fields = {"video_grid_thw": torch.tensor([2, 4, 4]), "video_second_per_grid": torch.tensor([1.5])}
    mrope_positions(get_rope_index, list(range(6)), [PlacedItem(1, torch.full((4,), 2), fields)], handed)
    assert seen["times"].tolist() == [[1.5]]
    # the whole prompt attended, as transformers' generate hands it over
    assert seen["mask"].tolist() == [[1] * 6]


def test_only_the_methods_whose_code_calls_get_rope_index_have_their_source_read(monkeypatch):
    """Reading every method's source, the hundreds a model class inherits included, took
    150 ms of a Qwen2-VL engine's first request (three times the in-tree backend's whole
    first request); the code objects say which methods call it."""
    from transformers import Qwen2_5OmniThinkerForConditionalGeneration as Thinker

    from hf_bridge import mrope

    source, read = hf_classes.method_source, []

    def reading(cls, name="forward"):
        read.append(name)
        return source(cls, name)

    monkeypatch.setattr(hf_classes, "method_source", reading)
    monkeypatch.setattr(mrope, "method_source", reading, raising=False)  # where it reads sources itself
    assert names_handed_over(Thinker, Thinker.get_rope_index) == {
        "audio_seqlens": "audio_feature_lengths", "second_per_grids": "video_second_per_grid"}
    callers = {name for name, _ in inspect.getmembers(Thinker, inspect.isfunction)
               if name != "get_rope_index" and ".get_rope_index(" in (source(Thinker, name) or "")}
    assert set(read) == callers and 0 < len(callers) < 5


def test_what_the_forward_derives_from_the_fields_is_derived_per_item_and_joined_as_it_is():
    """Its `audio_seqlens` is `audio_feature_lengths`, which its forward computes as
    `torch.sum(feature_attention_mask, dim=1)`: per item from the processor's mask for that
    item alone, then joined to one entry per audio, as for the whole prompt."""
    from transformers import Qwen2_5OmniThinkerForConditionalGeneration as Thinker

    derived = derivations(Thinker, names_handed_over(Thinker, Thinker.get_rope_index).values())
    assert derived == {"audio_feature_lengths": Derivation("torch.sum(feature_attention_mask, dim=1)", ("feature_attention_mask",))}
    masks = [torch.tensor([[1, 1, 1, 0]]), torch.tensor([[1, 1, 0, 0, 0]])]
    seen = {}

    def get_rope_index(input_ids, attention_mask=None, audio_seqlens=None):
        seen.update(lengths=audio_seqlens)
        return torch.zeros(MROPE_AXES, 1, input_ids.shape[1], dtype=torch.long), torch.zeros(1, 1)

    items = [PlacedItem(2 * i, torch.full((2,), 3), {"feature_attention_mask": mask}) for i, mask in enumerate(masks)]
    assert "feature_attention_mask" in item_fields(get_rope_index, {"audio_seqlens": "audio_feature_lengths"}, derived)
    mrope_positions(get_rope_index, list(range(4)), items, {"audio_seqlens": "audio_feature_lengths"}, derived)
    assert seen["lengths"].tolist() == [3, 2]


def test_decoding_continues_from_the_prompts_last_position_as_transformers_generate_does(zoo, tmp_path):
    """Qwen2.5-VL resumes text after a video `max(height, width)` positions on; a video of
    more time than space (9 frames of 70 x 38 pixels, at 2 fps) reaches past that, so the
    prompt's last position is not its largest. transformers' `generate` places its first
    generated token one past the last; hf_bridge's delta had counted from the largest
    (`get_rope_index`'s own), and greedy tokens differed from the second on."""
    import cv2
    import numpy as np
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    from hf_bridge.validate import parity

    model_dir = zoo("qwen2_5_vl")
    processor = AutoProcessor.from_pretrained(model_dir)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32).eval()
    writer = cv2.VideoWriter(str(tmp_path / "video.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 2.0, (70, 38))
    for frame in np.random.default_rng(0).integers(0, 255, (9, 38, 70, 3), dtype=np.uint8):
        writer.write(frame)
    writer.release()
    case = parity.Case.from_files("video", "Describe the video.", videos=[str(tmp_path / "video.mp4")])
    inputs = parity.model_inputs(model, processor, case)  # as validate's reference, the video's metadata given
    handed = []
    hook = model.model.language_model.register_forward_pre_hook(
        lambda module, args, kwargs: handed.append(kwargs["position_ids"]), with_kwargs=True)
    try:
        with torch.no_grad():
            model.generate(**inputs, max_new_tokens=2, do_sample=False)
    finally:
        hook.remove()
    prompt, decoding = handed[0][1:, 0], handed[1][1:, 0, 0]  # M-RoPE rows (the first holds text positions)

    ids, types = inputs["input_ids"][0], inputs["mm_token_type_ids"][0]
    (span,) = [torch.nonzero(types == 2).flatten()]
    video = PlacedItem(int(span[0]), types[span[0]:span[-1] + 1],
                       {"video_grid_thw": inputs["video_grid_thw"][0], "second_per_grid_ts": inputs["second_per_grid_ts"][0]})
    positions, delta = mrope_positions(model.model.get_rope_index, ids.tolist(), [video])
    assert torch.equal(positions, prompt)
    assert positions[:, -1].max() < positions.max()  # the case: the last position is not the largest
    assert (delta + len(ids),) * MROPE_AXES == tuple(decoding.tolist())
