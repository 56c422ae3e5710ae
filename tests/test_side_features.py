"""Side features (Qwen3-VL's deepstack, Granite 4 Vision's levels by decoder layer) travel
with embedding rows and reach the decoder at full length, zeros at text positions
(`hf_bridge.side_features`)."""

from __future__ import annotations

import pytest
import torch

from hf_bridge.side_features import (
    DECODER_FEATURES_ARG,
    DECODER_MASK_ARG,
    SideFeatures,
    configured_levels,
    has_side_features,
    widen,
)

H = 4


def test_widen_then_split_restores_rows_and_places_side_features_at_their_tokens():
    rows = [torch.randn(2, H), torch.randn(3, H)]
    levels = [[torch.randn(2, H), torch.randn(3, H)] for _ in range(2)]
    wide = [widen(r, [lv[i] for lv in levels]) for i, r in enumerate(rows)]
    assert wide[0].shape == (2, 3 * H)
    is_mm = torch.tensor([0, 1, 1, 0, 1, 1, 1, 0], dtype=torch.bool)
    side = SideFeatures(H)
    main = side.split(wide, is_mm, num_tokens=8)
    assert all(torch.equal(m, r) for m, r in zip(main, rows))

    kwargs = side.decoder_kwargs(num_tokens=8)
    assert kwargs[DECODER_MASK_ARG].shape == (1, 8) and bool(kwargs[DECODER_MASK_ARG].all())
    for level, per_item in zip(kwargs[DECODER_FEATURES_ARG], levels):
        assert level.shape == (8, H)
        assert torch.equal(level[is_mm], torch.cat(per_item))
        assert not level[~is_mm].any()  # text positions get exact zeros: adding them changes nothing
    assert side.decoder_kwargs(8) == {}  # consumed by one step only


def test_padded_step_gets_zeros_and_plain_embeddings_pass_through():
    side = SideFeatures(H)
    wide = [torch.randn(1, 2 * H)]
    side.split(wide, torch.tensor([False, True]), num_tokens=2)
    (level,) = side.decoder_kwargs(num_tokens=4)[DECODER_FEATURES_ARG]
    assert level.shape == (4, H) and not level[2:].any()

    plain = [torch.randn(3, H)]
    assert side.split(plain, torch.ones(3, dtype=torch.bool), 3) is plain
    assert side.decoder_kwargs(3) == {}
    assert side.split(None, None, 3) is None  # a step without media


@pytest.mark.parametrize("plain_first", [True, False])
def test_an_item_without_side_features_beside_one_with_them_gets_zeros(plain_first):
    """Qwen3-Omni's audio has no deepstack levels, its images do: in one prompt or step, the
    audio's rows pass as they are and add nothing (zeros at its tokens). Before, the step
    raised "Sizes of tensors must match" and stopped the engine, or, with the audio first,
    left the image's side columns in its rows."""
    audio, image_rows, image_level = torch.randn(2, H), torch.randn(3, H), torch.randn(3, H)
    embeddings = [audio, widen(image_rows, [image_level])]
    is_mm = torch.tensor([1, 1, 0, 1, 1, 1], dtype=torch.bool)
    if not plain_first:
        embeddings.reverse()
    side = SideFeatures(H)
    main = side.split(embeddings, is_mm, num_tokens=6)
    assert [tuple(m.shape) for m in main] == [tuple(e.shape[:1]) + (H,) for e in embeddings]
    assert torch.equal(main[0 if plain_first else 1], audio)
    (level,) = side.decoder_kwargs(num_tokens=6)[DECODER_FEATURES_ARG]
    first, second = is_mm.nonzero()[:, 0].split([embeddings[0].shape[0], embeddings[1].shape[0]])
    image_tokens = second if plain_first else first
    expected = torch.zeros(6, H)
    expected[image_tokens] = image_level
    assert torch.equal(level, expected)  # zeros at the audio's tokens and at text


def test_installed_wrapper_injects_only_when_features_are_pending():
    seen = {}

    class Decoder(torch.nn.Module):
        def forward(self, inputs_embeds=None, visual_pos_masks=None, deepstack_visual_embeds=None):
            seen["mask"], seen["levels"] = visual_pos_masks, deepstack_visual_embeds
            return inputs_embeds

    decoder, side = Decoder(), SideFeatures(H)
    side.install(decoder)
    decoder(inputs_embeds=torch.zeros(1, 2, H))
    assert seen == {"mask": None, "levels": None}
    side.split([torch.randn(1, 2 * H)], torch.tensor([True, False]), 2)
    decoder(inputs_embeds=torch.zeros(1, 2, H))
    assert seen["mask"].shape == (1, 2) and len(seen["levels"]) == 1


def test_pipeline_ranks_pass_features_on_and_each_adds_only_its_own_layers_levels():
    """Rank 0 holds decoder layer 0, rank 1 layer 1; the features are made on rank 0."""
    is_mm = torch.tensor([0, 1, 1, 0], dtype=torch.bool)
    wide = [widen(torch.randn(2, H), [torch.randn(2, H), torch.randn(2, H)])]
    first, second = SideFeatures(H, owned_levels=range(0, 1)), SideFeatures(H, owned_levels=range(1, 2))
    first.split(wide, is_mm, num_tokens=4)
    sent = first.send(4, levels=2, like=torch.zeros(()))
    level0, level1 = first.decoder_kwargs(4)[DECODER_FEATURES_ARG]
    assert torch.equal(level0[is_mm], wide[0][:, H : 2 * H]) and not level1.any()  # layer 1 is not here

    second.receive(sent)
    level0, level1 = second.decoder_kwargs(4)[DECODER_FEATURES_ARG]
    assert not level0.any() and torch.equal(level1[is_mm], wide[0][:, 2 * H :])  # added on rank 0 already
    # a step without features sends zeros of the agreed width (the receiving buffer's)
    assert torch.equal(first.send(3, levels=2, like=torch.zeros(())), torch.zeros(3, 2 * H))


def test_side_features_are_read_from_transformers_deepstack_settings():
    """Qwen3-VL's config names its deepstack levels; Qwen2-VL's has none."""
    from transformers import Qwen2VLConfig, Qwen3VLConfig

    qwen3 = Qwen3VLConfig()
    assert has_side_features(qwen3)
    assert configured_levels(qwen3) == len(qwen3.vision_config.deepstack_visual_indexes) > 0
    assert not has_side_features(Qwen2VLConfig()) and configured_levels(Qwen2VLConfig()) == 0


def test_levels_named_by_decoder_layer_reach_it_in_a_dict():
    """Granite 4 Vision's encoder output pairs each level with its decoder layer; its text
    model takes them as a dict by layer, with a `[1, tokens, 1]` mask. Two levels for one
    layer: the later one is kept, as the HF model's dict keeps it."""
    from types import SimpleNamespace

    from hf_bridge.side_features import DECODER_CONVENTIONS, level_layers, side_levels

    by_layer = next(c for c in DECODER_CONVENTIONS if c.by_layer)
    per_image = [[torch.randn(2, H), torch.randn(1, H)] for _ in range(3)]
    output = SimpleNamespace(deepstack_features=[(0, per_image[0]), (4, per_image[1]), (0, per_image[2])])
    assert level_layers(output) == [0, 4, 0]
    levels = side_levels(output)
    assert [tuple(level.shape) for level in levels] == [(3, H)] * 3

    side = SideFeatures(H, convention=by_layer)
    side.remember(output)
    is_mm = torch.tensor([1, 0, 1, 1], dtype=torch.bool)
    side.split([widen(torch.zeros(3, H), levels)], is_mm, num_tokens=4)
    kwargs = side.decoder_kwargs(4)
    mask, features = kwargs[by_layer.mask_arg], kwargs[by_layer.features_arg]
    assert mask.shape == (1, 4, 1) and bool(mask.all())
    assert sorted(features) == [0, 4]
    assert torch.equal(features[0][is_mm], levels[2]) and torch.equal(features[4][is_mm], levels[1])
    assert not features[0][~is_mm].any()
    assert level_layers(SimpleNamespace(deepstack_features=[torch.randn(2, H)])) is None  # Qwen3-VL: level i, layer i


def test_levels_without_their_layers_are_refused():
    from hf_bridge.side_features import DECODER_CONVENTIONS

    side = SideFeatures(H, convention=next(c for c in DECODER_CONVENTIONS if c.by_layer))
    side.split([torch.randn(1, 2 * H)], torch.tensor([True]), 1)
    with pytest.raises(RuntimeError, match="no decoder layer named for each"):
        side.decoder_kwargs(1)


def test_a_model_level_deepstack_map_is_a_side_feature_setting():
    """Granite 4 Vision names its map on the model's config, not the vision config's."""
    from transformers import Granite4VisionConfig

    assert has_side_features(Granite4VisionConfig(deepstack_layer_map=[[-1, 0]], downsample_rate="1/2"))
    assert not has_side_features(Granite4VisionConfig(downsample_rate="1/2"))
