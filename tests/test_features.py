"""`features.py` without vLLM: a model whose forward encodes items inline (Qwen2-Audio,
with no `get_audio_features`) is encoded through that forward, and gives exactly the rows
its forward places where it hands its decoder the prompt's embeddings."""

from __future__ import annotations

import pytest
import torch
from transformers import LlavaConfig, LlavaModel, Qwen2AudioConfig, Qwen2AudioForConditionalGeneration, Qwen2AudioModel

from hf_bridge.features import encode, encodes_inline

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
    handed = []
    decoder = qwen2_audio.get_decoder()
    hook = decoder.register_forward_pre_hook(lambda m, a, k: handed.append(k["inputs_embeds"]), with_kwargs=True)
    try:
        with torch.no_grad():
            qwen2_audio(input_ids=ids, **fields)
    finally:
        hook.remove()
    with torch.no_grad():
        rows = encode(qwen2_audio, "audio", fields, HIDDEN, num_embeds=sum(tokens))
    assert torch.equal(rows, handed[0][0][ids[0] == AUDIO_TOKEN])
    assert qwen2_audio.language_model is decoder  # the stand-in is gone again


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
