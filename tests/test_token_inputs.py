"""Per-layer token embeddings carried from the ids to the decoder (`token_inputs.py`), on
transformers' own Gemma 4 model built tiny (no vLLM, no engine)."""

from __future__ import annotations

import pytest
import torch

from hf_bridge.token_inputs import PER_LAYER_INPUTS_ARG, PerLayerTokenInputs, media_need_token_ids, per_layer_inputs_taker

MEDIA = slice(2, 5)


@pytest.fixture(scope="module")
def gemma4():
    from transformers import AutoConfig, Gemma4Model

    from hf_bridge.zoo import shrink

    config = AutoConfig.for_model("gemma4")
    shrink.build_absent_towers(config)
    shrink.shrink(config.text_config, dict(shrink.TEXT_SIZES, vocab_size=300))
    config.text_config = shrink.rederived(config.text_config)
    config.image_token_id, config.video_token_id, config.audio_token_id = 299, 298, 297
    torch.manual_seed(0)
    return Gemma4Model(config).eval()


def test_media_need_token_ids_only_where_no_forward_can_take_them():
    """Gemma 4's base model takes `per_layer_inputs` and passes them on; Gemma 3n's builds
    them from ids alone, and its text model takes them: both are handed them, so their
    media are served. A config that reads such embeddings while neither forward takes
    them serves text only; LLaVA reads none."""
    from transformers import AutoConfig, Gemma3nModel, Gemma4Model

    assert not media_need_token_ids(AutoConfig.for_model("gemma4"))
    assert not media_need_token_ids(AutoConfig.for_model("gemma3n"))
    assert not media_need_token_ids(AutoConfig.for_model("llava"))
    reads_them = AutoConfig.for_model("llava")
    reads_them.text_config.hidden_size_per_layer_input = 8
    assert media_need_token_ids(reads_them)
    with torch.device("meta"):
        gemma4, gemma3n = Gemma4Model(AutoConfig.for_model("gemma4")), Gemma3nModel(AutoConfig.for_model("gemma3n"))
    assert per_layer_inputs_taker(gemma4, gemma4.language_model) is gemma4
    assert per_layer_inputs_taker(gemma3n, gemma3n.language_model) is gemma3n.language_model


def test_a_decoder_is_handed_per_layer_inputs_only_where_transformers_gives_it_them():
    """LLaVA's base model runs its decoder on embeddings alone. Gemma 3n's text model then
    adds no per-layer token embeddings (its `get_per_layer_inputs` takes ids only), so
    behind LLaVA it is handed none: handed them, the engine's greedy tokens left
    transformers' at the first (`tests/test_backbones.py`). Gemma 4's text model maps the
    embeddings back to ids and looks them up itself, so it is handed them."""
    from transformers import AutoConfig, Gemma3nModel, Gemma3nTextModel, Gemma4TextModel, LlavaModel

    from hf_bridge.token_inputs import text_model_gets_them

    assert not text_model_gets_them(LlavaModel, Gemma3nTextModel)
    assert text_model_gets_them(Gemma3nModel, Gemma3nTextModel), "Gemma 3n's base model hands them on"
    assert text_model_gets_them(LlavaModel, Gemma4TextModel)
    with torch.device("meta"):
        text = Gemma3nTextModel(AutoConfig.for_model("gemma3n_text"))
        llava = LlavaModel(AutoConfig.for_model("llava"))
    assert per_layer_inputs_taker(llava, text) is None


def test_carried_inputs_give_the_hf_forward_from_ids(gemma4):
    """Embeddings plus the carried per-layer inputs give exactly the hidden states of
    transformers' own forward from the ids, image positions included (there the id is
    replaced by the pad id, and the row by the image features)."""
    ids = torch.tensor([5, 17, 299, 299, 299, 42, 8])
    is_multimodal = ids == gemma4.config.image_token_id
    features = torch.randn(int(is_multimodal.sum()), gemma4.config.text_config.hidden_size)
    with torch.no_grad():
        merged = gemma4.get_input_embeddings()(torch.where(is_multimodal, gemma4.config.text_config.pad_token_id, ids))
        merged[is_multimodal] = features
        expected = _hf_hidden_states(gemma4, ids[None], features)
        carried = PerLayerTokenInputs(gemma4.language_model, max_tokens=16)
        carried.record(ids, is_multimodal)
        got = gemma4(inputs_embeds=merged[None], **carried.decoder_kwargs(len(ids))).last_hidden_state
    assert torch.equal(got, expected)


def test_each_step_reads_its_own_rows_from_one_buffer(gemma4):
    """A later, shorter step overwrites the rows it uses; the buffer never moves (a captured
    graph reads it), and a padded step reads rows past its own."""
    carried = PerLayerTokenInputs(gemma4.language_model, max_tokens=16)
    address = carried.buffer.data_ptr()
    with torch.no_grad():
        carried.record(torch.tensor([5, 6, 7, 8]), None)
        carried.record(torch.tensor([9, 10]), torch.tensor([False, True]))
        rows = carried.decoder_kwargs(3)[PER_LAYER_INPUTS_ARG]
        lookup = gemma4.language_model.get_per_layer_inputs(torch.tensor([[9, 0, 7]]), None)
    pad = gemma4.config.text_config.pad_token_id
    lookup_pad = gemma4.language_model.get_per_layer_inputs(torch.tensor([[pad]]), None)
    assert carried.buffer.data_ptr() == address and rows.shape == lookup.shape
    assert torch.equal(rows[0, 0], lookup[0, 0]) and torch.equal(rows[0, 1], lookup_pad[0, 0])
    assert torch.equal(rows[0, 2], lookup[0, 2])


def test_installed_inputs_reach_the_decoder_on_every_call_with_embeddings(gemma4):
    """vLLM calls the HF model with embeddings only; the carried rows go with each call."""
    carried = PerLayerTokenInputs(gemma4.language_model, max_tokens=16)
    seen = []
    model = torch.nn.Module()
    model.forward = lambda **kwargs: seen.append(kwargs.get(PER_LAYER_INPUTS_ARG))
    carried.install(model)
    model.forward(inputs_embeds=torch.zeros(1, 3, 4), per_layer_inputs=None)
    model.forward(input_ids=torch.zeros(1, 3, dtype=torch.long))
    assert seen[0].shape[1] == 3 and seen[0].data_ptr() == carried.buffer.data_ptr()
    assert seen[1] is None


def _hf_hidden_states(model, input_ids, image_features):
    """transformers' forward from ids, given `image_features` as its vision tower's output."""
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    encoded = {"image": BaseModelOutputWithPooling(pooler_output=[image_features])}
    return model(input_ids=input_ids, mm_encoder_outputs=encoded).last_hidden_state
