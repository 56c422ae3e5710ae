"""Items sent as precomputed embeddings (`enable_mm_embeds`): the tokens of sending the pixels.

The rows are transformers' own `get_<modality>_features` output for the case's media,
computed in a subprocess (`tests/helpers/hf_features.py`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hf_bridge.validate import parity

HELPER = Path(__file__).parent / "helpers" / "hf_features.py"
SIDE = 64


def the_case(name: str) -> parity.Case:
    """The standard case, its video claiming 4 fps: Qwen2.5-VL's timing is then 0.5 s per grid
    step, where the standard 2 fps gives 1.0, the value `get_rope_index` takes without one,
    which would hide a dropped timing."""
    standard = parity.standard_cases(SIDE)[name]
    if not standard.num_videos:
        return standard
    from hf_bridge.probes import video_metadata
    from hf_bridge.validate.media_in_memory import video_file

    frames = parity.test_video()
    return parity.Case.from_files(name, standard.text, videos=[video_file((frames, video_metadata(len(frames), fps=4.0)))])


def hf_features(model_dir, case: str, modality: str, tmp_path) -> dict:
    import torch

    out = tmp_path / f"{case}-{modality}.pt"
    given = the_case(case)
    done = subprocess.run([sys.executable, str(HELPER), str(model_dir), str(SIDE), given.key(), modality, str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(out)


def requests(processor, case: parity.Case, modality: str, saved: dict) -> tuple[dict, dict]:
    """(the case as pixels, the same prompt with the items as embeddings)."""
    pixels = parity.vllm_request(processor, case)
    given = {f"{modality}_embeds": saved["rows"], **saved["metadata"]} if saved["metadata"] else saved["rows"]
    embedded = {"prompt": pixels["prompt"], "multi_modal_data": {modality: given}}
    return pixels, embedded


@pytest.mark.engine
@pytest.mark.parametrize(("model", "case", "modality"), [
    ("llava", "two_images", "image"),  # fixed-size placeholder: plain rows
    ("qwen2_vl", "two_images", "image"),  # sized by image_grid_thw, M-RoPE from it
    ("qwen2_vl", "video", "video"),
    ("qwen2_5_vl", "video", "video"),  # M-RoPE from the video's second_per_grid_ts too
])
def test_embeddings_give_the_tokens_of_pixels(zoo, engines, tmp_path, model, case, modality):
    from transformers import AutoProcessor

    model_dir = zoo(model)
    saved = hf_features(model_dir, case, modality, tmp_path)
    processor = AutoProcessor.from_pretrained(model_dir)
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2, "video": 1}, enable_mm_embeds=True)
    pixels, embedded = requests(processor, the_case(case), modality, saved)
    (from_pixels,) = llm.generate([pixels], parity.sampling_params(), use_tqdm=False)
    (from_rows,) = llm.generate([embedded], parity.sampling_params(), use_tqdm=False)
    a, b = parity.result_from_output(from_pixels), parity.result_from_output(from_rows)
    assert a.prompt_ids == b.prompt_ids
    assert a.tokens == b.tokens
    assert parity.compare(a, b) == []  # log-probs within 1e-3 too


@pytest.mark.engine
def test_embeddings_that_do_not_fit_are_refused_and_the_engine_serves_on(zoo, engines, tmp_path):
    import torch
    from transformers import AutoProcessor

    model_dir = zoo("qwen2_vl")
    saved = hf_features(model_dir, "two_images", "image", tmp_path)
    processor = AutoProcessor.from_pretrained(model_dir)
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2, "video": 1}, enable_mm_embeds=True)
    pixels, _ = requests(processor, the_case("two_images"), "image", saved)
    prompt = pixels["prompt"]
    rows, grid = saved["rows"], saved["metadata"]["image_grid_thw"]

    def refused(data) -> str:
        with pytest.raises(ValueError) as caught:
            llm.generate([{"prompt": prompt, "multi_modal_data": {"image": data}}], parity.sampling_params(), use_tqdm=False)
        return str(caught.value)

    # rows alone: the grid that sizes the placeholder (and M-RoPE) is missing
    assert "sizes each image's placeholder by image_grid_thw: pass a dict" in refused(rows)
    # one row short of its grid
    short = refused({"image_embeds": [rows[0][:-1], rows[1]], "image_grid_thw": grid})
    assert f"image 0 is given as {rows[0].shape[0] - 1} embedding rows" in short
    assert f"holds {rows[0].shape[0]}" in short
    # a grid the processor never makes (odd patch counts cannot merge 2x2)
    odd = torch.tensor([[1, 3, 3], list(grid[1])])
    assert "image_grid_thw=[1, 3, 3] is not what the processor makes" in refused({"image_embeds": rows, "image_grid_thw": odd})
    # one grid for two items
    assert "image_grid_thw has 1 entries for 2 image item(s)" in refused({"image_embeds": rows, "image_grid_thw": grid[:1]})
    # the wrong width
    assert "rows are [3] wide" in refused({"image_embeds": [r[:, :3] for r in rows], "image_grid_thw": grid})
    (after,) = llm.generate([pixels], parity.sampling_params(), use_tqdm=False)
    assert len(after.outputs[0].token_ids) == parity.MAX_NEW_TOKENS


@pytest.mark.engine
def test_a_video_embedding_needs_its_timing(zoo, engines, tmp_path):
    """Qwen2.5-VL places a video's tokens in time by its fps (`second_per_grid_ts`), which
    a blank video of the same size cannot stand in for: an embedding item must bring it,
    and the value given is the one its positions use."""
    import torch
    from transformers import AutoProcessor

    model_dir = zoo("qwen2_5_vl")
    saved = hf_features(model_dir, "video", "video", tmp_path)
    timing = saved["metadata"]["second_per_grid_ts"]
    processor = AutoProcessor.from_pretrained(model_dir)
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2, "video": 1}, enable_mm_embeds=True)
    pixels, _ = requests(processor, the_case("video"), "video", saved)
    untimed = {"video_embeds": saved["rows"], "video_grid_thw": saved["metadata"]["video_grid_thw"]}

    def generate(video):
        (out,) = llm.generate([{"prompt": pixels["prompt"], "multi_modal_data": {"video": video}}],
                              parity.sampling_params(), use_tqdm=False)
        return parity.result_from_output(out)

    with pytest.raises(ValueError, match="positions each video's tokens in time by second_per_grid_ts: pass a dict .*'second_per_grid_ts'"):
        generate(untimed)
    # the timing reaches the positions: get_rope_index's default (1.0, what a dropped field
    # would give) moves them away from the pixels', so the parity case above would catch a drop
    (seconds,) = torch.as_tensor(timing).tolist()
    assert seconds == 0.5  # 2 frames per grid step at 4 fps (`the_case`)
    (from_pixels,) = llm.generate([pixels], parity.sampling_params(), use_tqdm=False)
    defaulted = generate({**untimed, "second_per_grid_ts": [1.0]})
    assert parity.compare(parity.result_from_output(from_pixels), defaulted) != []
    assert len(from_pixels.outputs[0].token_ids) == parity.MAX_NEW_TOKENS


@pytest.mark.engine
def test_embeddings_are_refused_where_the_tower_also_feeds_side_features(zoo, engines):
    """Qwen3-VL's deepstack features cannot ride in an embedding input: refused with the
    reason, and the engine serves on."""
    import torch
    from transformers import AutoConfig, AutoProcessor

    model_dir = zoo("qwen3_vl")
    processor = AutoProcessor.from_pretrained(model_dir)
    hidden = AutoConfig.from_pretrained(model_dir).text_config.hidden_size
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2, "video": 1}, enable_mm_embeds=True)
    pixels = parity.vllm_request(processor, parity.standard_cases(SIDE)["one_image"])
    given = {"image_embeds": torch.zeros(4, hidden), "image_grid_thw": torch.tensor([[1, 4, 4]])}
    with pytest.raises(ValueError, match="image embeddings cannot be taken for this model: .* Send the image itself"):
        llm.generate([{"prompt": pixels["prompt"], "multi_modal_data": {"image": given}}], parity.sampling_params(), use_tqdm=False)
    (after,) = llm.generate([pixels], parity.sampling_params(), use_tqdm=False)
    assert len(after.outputs[0].token_ids) == parity.MAX_NEW_TOKENS


@pytest.mark.engine
def test_embeddings_need_enable_mm_embeds(zoo, engines):
    import torch

    llm = engines.get(zoo("llava"), limit_mm_per_prompt={"image": 2})
    # vLLM's own refusal ("You must set `--enable-mm-embeds`") named the flag alone; hf_bridge's names its reading too
    with pytest.raises(ValueError, match=r"a torch tensor of shape \(1, 16, 64\), which vLLM reads as precomputed image "
                                         r"embeddings .* start the engine with `enable_mm_embeds=True`"):
        llm.generate([{"prompt": "<image>", "multi_modal_data": {"image": torch.zeros(1, 16, 64)}}], use_tqdm=False)
