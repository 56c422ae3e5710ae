"""`features.py` without vLLM: a model whose forward encodes items inline (Qwen2-Audio,
with no `get_audio_features`) is encoded through that forward, and gives exactly the rows
its forward places where it hands its decoder the prompt's embeddings; so is a model
whose entry returns rows its forward projects further (Llama 4). A one-row call the
entry cannot make (Mistral 3's) is made for the item beside a copy of itself."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    Llama4Config,
    Llama4ForConditionalGeneration,
    LlavaConfig,
    LlavaModel,
    Mistral3Config,
    Mistral3Model,
    Qwen2AudioConfig,
    Qwen2AudioForConditionalGeneration,
    Qwen2AudioModel,
)

from hf_bridge.features import encode, encodes_inline, encoding_modality, feature_token_ids

AUDIO_TOKEN = 150
HIDDEN = 32


@pytest.fixture(scope="module")
def qwen2_audio():
    torch.manual_seed(0)
    config = Qwen2AudioConfig(
        audio_config=dict(d_model=32, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=64, num_mel_bins=16,
                          max_source_positions=200),
        text_config=dict(model_type="qwen2", hidden_size=HIDDEN, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, intermediate_size=64, vocab_size=200),
        audio_token_id=AUDIO_TOKEN,
    )
    return Qwen2AudioForConditionalGeneration(config).eval().model


def received(module: torch.nn.Module, take, model: torch.nn.Module, **inputs) -> torch.Tensor:
    """What `module` is handed (`take(args, kwargs)`) when `model` runs on `inputs`."""
    handed = []
    hook = module.register_forward_pre_hook(lambda m, a, k: handed.append(take(a, k)), with_kwargs=True)
    try:
        with torch.no_grad():
            model(**inputs)
    finally:
        hook.remove()
    return handed[0]


def embeds_kwarg(args, kwargs):
    return kwargs["inputs_embeds"]


def clips(model, lengths: list[int]) -> tuple[dict[str, torch.Tensor], list[int]]:
    """Two clips' features, padded to one length as the feature extractor pads them, and
    each clip's number of audio tokens."""
    features = torch.randn(len(lengths), 16, max(lengths))
    mask = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for i, length in enumerate(lengths):
        mask[i, :length] = 1
    _, tokens = model.audio_tower._get_feat_extract_output_lengths(mask.sum(-1))
    return {"input_features": features, "feature_attention_mask": mask}, tokens.tolist()


def test_inline_rows_are_those_the_forward_places(qwen2_audio):
    fields, tokens = clips(qwen2_audio, [400, 240])
    ids = torch.tensor([[1, 2, *[AUDIO_TOKEN] * tokens[0], 3, *[AUDIO_TOKEN] * tokens[1], 4]])
    decoder = qwen2_audio.get_decoder()
    handed = received(decoder, embeds_kwarg, qwen2_audio, input_ids=ids, **fields)
    with torch.no_grad():
        rows = encode(qwen2_audio, "audio", fields, HIDDEN, num_embeds=sum(tokens))
    assert torch.equal(rows, handed[0][ids[0] == AUDIO_TOKEN])
    assert qwen2_audio.language_model is decoder  # the stand-in is gone again


def test_a_one_row_item_encoded_inline_gets_the_row_its_forward_places(qwen2_audio):
    """A clip of one audio token: Qwen2-Audio's forward places nothing on a prompt of one
    position (to it, a decoding step), and a prompt of one audio token amid text takes its
    legacy path, which places the same clip's row."""
    fields, tokens = clips(qwen2_audio, [5, 400])  # padded to the 400 frames the tower takes
    fields = {key: value[:1] for key, value in fields.items()}
    assert tokens[0] == 1
    ids = torch.tensor([[1, 2, AUDIO_TOKEN, 3]])
    handed = received(qwen2_audio.get_decoder(), embeds_kwarg, qwen2_audio, input_ids=ids,
                      attention_mask=torch.ones_like(ids), **fields)
    with torch.no_grad():
        rows = encode(qwen2_audio, "audio", fields, HIDDEN, num_embeds=1)
        token_row = qwen2_audio.get_input_embeddings()(torch.tensor([AUDIO_TOKEN]))
    assert not torch.allclose(handed[0][2], token_row[0])
    torch.testing.assert_close(rows, handed[0][ids[0] == AUDIO_TOKEN], rtol=0, atol=1e-6)


def test_inline_encoding_needs_the_embedding_count(qwen2_audio):
    fields, _ = clips(qwen2_audio, [400])
    decoder = qwen2_audio.language_model
    with pytest.raises(ValueError, match=r"encodes audio items inline: their embedding count \(num_embeds\) is needed"):
        encode(qwen2_audio, "audio", fields, HIDDEN)
    assert qwen2_audio.language_model is decoder


def test_which_models_encode_inline():
    assert encodes_inline(Qwen2AudioModel, Qwen2AudioConfig(), "audio")
    # no token named to place the rows at: nothing to take them from
    assert not encodes_inline(Qwen2AudioModel, Qwen2AudioConfig(audio_token_id=None), "audio")
    # an entry of its own: encoded through it
    assert not encodes_inline(LlavaModel, LlavaConfig(), "image")


IMAGE_TOKEN = 190


@pytest.fixture(scope="module")
def llama4():
    """Llama 4 applies its projector outside `get_image_features` (the tower's rows are 48
    wide here, its text model's 32, as 4096 against 5120 in Scout)."""
    torch.manual_seed(0)
    config = Llama4Config(
        vision_config=dict(hidden_size=32, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2, image_size=56,
                           patch_size=14, projector_input_dim=48, projector_output_dim=48, vision_output_dim=48),
        text_config=dict(hidden_size=HIDDEN, intermediate_size=64, intermediate_size_mlp=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, num_local_experts=2, vocab_size=200),
        image_token_index=IMAGE_TOKEN,
    )
    return Llama4ForConditionalGeneration(config).eval()


def test_rows_the_forward_projects_further_are_those_it_places(llama4):
    tiles = {"pixel_values": torch.randn(3, 3, 56, 56)}
    with torch.no_grad():
        tower = llama4.get_image_features(**tiles).last_hidden_state
    assert tower.shape[-1] == 48  # the entry's rows: not yet the decoder's width
    per_tile = tower.shape[1]
    ids = torch.tensor([[1, *[IMAGE_TOKEN] * (3 * per_tile), 2]])
    placed = received(llama4.get_decoder(), embeds_kwarg, llama4, input_ids=ids, **tiles)[0][ids[0] == IMAGE_TOKEN]
    with torch.no_grad():
        counted = encode(llama4, "image", tiles, HIDDEN)  # no count given: the entry's rows count them
        told = encode(llama4, "image", tiles, HIDDEN, num_embeds=3 * per_tile)  # the wrapper's call
    assert torch.equal(counted, placed) and torch.equal(told, placed)


PHI4_IMAGE_TOKEN, PHI4_AUDIO_TOKEN = 190, 191


@pytest.fixture(scope="module")
def phi4():
    """Phi-4-multimodal's base model is its own decoder (a flat config), and encodes media
    inside its embedding step; its tokens are named in its towers' sub-configs."""
    torch.manual_seed(0)
    from transformers import Phi4MultimodalConfig, Phi4MultimodalModel

    audio = dict(hidden_size=32, intermediate_size=64, num_blocks=1, num_attention_heads=2, ext_pw_out_channel=32,
                 depthwise_separable_out_channel=32, nemo_conv_channels=32, audio_token_id=PHI4_AUDIO_TOKEN)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_token_id=PHI4_IMAGE_TOKEN)
    config = Phi4MultimodalConfig(hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                  num_key_value_heads=1, vocab_size=200, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                  audio_config=audio, vision_config=vision)
    return Phi4MultimodalModel(config).eval()


def test_a_flat_models_inline_rows_are_those_its_first_layer_receives(phi4):
    features = torch.randn(1, 160, 80)
    sizes = torch.tensor([20])  # 160 frames at the encoder's 8x time reduction
    fields = {"audio_input_features": features, "audio_embed_sizes": sizes}
    ids = torch.tensor([[1, 2, *[PHI4_AUDIO_TOKEN] * 20, 3]])
    first = phi4.layers[0]
    handed = received(first, lambda a, k: a[0] if a else k["hidden_states"], phi4, input_ids=ids, **fields)
    with torch.no_grad():
        rows = encode(phi4, "audio", fields, HIDDEN, num_embeds=20)
    assert torch.equal(rows, handed[0][ids[0] == PHI4_AUDIO_TOKEN])
    assert phi4.layers[0] is first  # the stand-in is gone again


def test_tokens_named_in_a_towers_sub_config():
    from transformers import Phi4MultimodalConfig, Phi4MultimodalModel

    assert feature_token_ids(Phi4MultimodalConfig()) == {"image": 200010, "audio": 200011}
    assert encodes_inline(Phi4MultimodalModel, Phi4MultimodalConfig(), "image")
    assert encodes_inline(Phi4MultimodalModel, Phi4MultimodalConfig(), "audio")


def test_a_flat_model_that_changes_its_embeddings_before_its_layers_is_refused():
    """Granite multiplies its token embeddings inside its forward: rows taken before its
    first layer are not the `inputs_embeds` vLLM would hand that forward."""
    from transformers import GraniteConfig, GraniteModel

    config = GraniteConfig(hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                           num_key_value_heads=1, vocab_size=200, embedding_multiplier=12.0)
    config.image_token_id = IMAGE_TOKEN
    granite = GraniteModel(config).eval()
    with pytest.raises(ValueError, match=r"changes the token embeddings before its first decoder layer"):
        encode(granite, "image", {}, HIDDEN, num_embeds=2)
    granite.embedding_multiplier = 1.0  # embeddings as given: taken
    assert encode(granite, "image", {}, HIDDEN, num_embeds=2).shape == (2, HIDDEN)


@pytest.fixture
def mistral3():
    """A new model each test: hf_bridge remembers per model which entries it pairs."""
    torch.manual_seed(0)
    config = Mistral3Config(
        vision_config=dict(model_type="pixtral", hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=2, head_dim=16, image_size=56, patch_size=14),
        text_config=dict(model_type="mistral", hidden_size=HIDDEN, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, intermediate_size=64, vocab_size=200),
        image_token_id=AUDIO_TOKEN, spatial_merge_size=2,
    )
    return Mistral3Model(config).eval()


ONE_ROW_SPLIT = rf"split_sizes to sum exactly to {HIDDEN} .* got split_sizes=\[1\]"
"""Mistral 3's `get_image_features` on one row: squeezed to a vector of the text's width."""


def test_a_one_row_call_the_entry_cannot_make_is_made_beside_a_copy(mistral3):
    pixels, sizes = torch.randn(1, 3, 28, 28), torch.tensor([[28, 28]])  # 2x2 patches: one row
    with torch.no_grad():
        with pytest.raises(RuntimeError, match=ONE_ROW_SPLIT):
            mistral3.get_image_features(pixel_values=pixels, image_sizes=sizes)
        rows = encode(mistral3, "image", {"pixel_values": pixels, "image_sizes": sizes}, HIDDEN, num_embeds=1)
        paired = mistral3.get_image_features(pixel_values=pixels.repeat(2, 1, 1, 1), image_sizes=sizes.repeat(2, 1))
    torch.testing.assert_close(rows, paired.pooler_output[0], rtol=0, atol=0)
    # a call for more rows is the entry's own, error included
    with torch.no_grad(), pytest.raises(RuntimeError, match=ONE_ROW_SPLIT):
        encode(mistral3, "image", {"pixel_values": pixels, "image_sizes": sizes}, HIDDEN, num_embeds=2)


def test_a_one_row_call_that_fails_beside_a_copy_too_raises_its_own_error(mistral3):
    sizes = torch.tensor([[28, 28]])
    bad = torch.randn(1, 2, 28, 28)  # two channels, where the tower's patch convolution takes three
    for paired_before in (False, True):  # once an entry is paired, a failing pair still reports the item's own call
        if paired_before:
            encode(mistral3, "image", {"pixel_values": torch.randn(1, 3, 28, 28), "image_sizes": sizes}, HIDDEN, num_embeds=1)
        with torch.no_grad(), pytest.raises(RuntimeError, match=r"expected input\[1, 2, 28, 28\] to have 3 channels"):
            encode(mistral3, "image", {"pixel_values": bad, "image_sizes": sizes}, HIDDEN, num_embeds=1)


def test_an_item_is_encoded_by_the_entry_that_takes_its_fields():
    """InternVL types a video's frames as image tokens and hands them over as `pixel_values`:
    its image entry encodes them. Nemotron-H-Omni types them as image tokens too, but hands
    over `pixel_values_videos`, which only its `get_video_features` takes."""
    from transformers.models.internvl.modeling_internvl import InternVLModel
    from transformers.models.nemotron_h_omni.modeling_nemotron_h_omni import NemotronH_Omni_Reasoning_V3

    internvl, nemotron = InternVLModel, NemotronH_Omni_Reasoning_V3
    assert encoding_modality(internvl, "image", "video", {"pixel_values"}) == "image"
    assert encoding_modality(nemotron, "image", "video", {"pixel_values_videos"}) == "video"
    assert encoding_modality(nemotron, "image", "image", {"pixel_values", "image_grid_hw"}) == "image"
    assert encoding_modality(nemotron, "image", "video", {"pixel_values", "image_grid_hw"}) == "image"
