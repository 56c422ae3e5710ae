"""The generic shrinker's rules, each on the transformers default that needs it (no engine)."""

from __future__ import annotations

from hf_bridge.zoo import shrink


def test_derived_text_fields_follow_the_shrink():
    """DeepSeek-V3 derives its MLA `qk_head_dim` and rotary `head_dim`; stale ones broke Kimi-K2.5."""
    from transformers import DeepseekV3Config

    config = DeepseekV3Config()
    shrink.shrink(config, shrink.TEXT_SIZES)
    config = shrink.rederived(config)
    assert config.qk_head_dim == shrink.TEXT_SIZES["qk_nope_head_dim"] + shrink.TEXT_SIZES["qk_rope_head_dim"]
    assert config.head_dim == shrink.TEXT_SIZES["qk_rope_head_dim"]
    assert config.n_routed_experts % config.n_group == 0


def test_a_field_the_config_derives_follows_the_fields_it_derives_from():
    """Falcon's `head_dim` is a read-only property, its width over its heads: setting it
    stopped the shrink (`property 'head_dim' of 'FalconConfig' object has no setter`)."""
    from transformers import FalconConfig

    config = FalconConfig()
    shrink.shrink(config, shrink.TEXT_SIZES)
    assert config.head_dim == shrink.TEXT_SIZES["hidden_size"] // shrink.TEXT_SIZES["num_attention_heads"]


def test_sub_configs_survive_the_rebuild():
    """DBRX keeps its attention and experts settings in sub-configs, which refuse the keys
    `to_dict` writes into theirs (`Found unknown kwargs`): they are handed back as they are."""
    from transformers import DbrxConfig

    config = DbrxConfig(ffn_config=dict(ffn_hidden_size=48, moe_num_experts=4, moe_top_k=2))
    shrink.shrink(config, shrink.TEXT_SIZES)
    config = shrink.rederived(config)
    assert (config.ffn_config.ffn_hidden_size, config.ffn_config.moe_top_k) == (48, 2)
    assert config.d_model == shrink.TEXT_SIZES["hidden_size"]


def test_the_weights_are_built_to_the_config_as_it_reloads():
    """Step-3.7's vision config derives `intermediate_size` from `mlp_ratio` on load: built
    to the shrunk 64, its checkpoint reloaded as 186 and did not load (in transformers, and
    so in every engine). The shrunk config is the one a save and load give back."""
    from hf_bridge.zoo.build import build_tokenizer

    spec = shrink.generic_spec("step3p7")
    tokenizer = build_tokenizer(spec.special_tokens, add_bos=False, extra_attributes=spec.tokenizer_attributes)
    config = spec.make_config(tokenizer)
    assert config.vision_config.intermediate_size == int(config.vision_config.hidden_size * config.vision_config.mlp_ratio)
    assert shrink.as_reloaded(config).to_dict() == config.to_dict()
    text = config.get_text_config()
    assert text.layer_types[0] == "sliding_attention" and text.sliding_window == shrink.STEP3P7_WINDOW


def test_heterogeneous_per_layer_sizes_follow_the_shrink():
    """Gemma 4's full-attention layers have twice the sliding layers' head_dim, as per-layer
    values (transformers' `per_layer_config`): the shrunk layer of each type keeps that
    ratio, through the rebuild too; and its unset expert count stays unset (vLLM would take
    the dense model for a mixture of experts)."""
    from transformers import AutoConfig

    text = AutoConfig.for_model("gemma4").get_text_config()
    shrink.shrink(text, shrink.TEXT_SIZES)
    text = shrink.rederived(text)
    assert text.layer_types == ["sliding_attention", "full_attention"]
    head_dims = [layer.head_dim for layer in text.per_layer_config]
    assert head_dims == [shrink.TEXT_SIZES["head_dim"], 2 * shrink.TEXT_SIZES["head_dim"]]
    assert text.num_experts is None


def test_tables_sized_to_the_vocabulary_shrink_with_it():
    """Gemma 4's per-layer embedding table has a row per token (`vocab_size_per_layer_input`,
    the full 262k by default), Gemma 3n's a row per token below its 256 media tokens: each
    follows the shrunk vocabulary, and the rebuild keeps it (Gemma 3n's tiny checkpoint
    had been 1 GB of that table)."""
    from transformers import AutoConfig

    for model_type in ("gemma4", "gemma3n"):
        text = AutoConfig.for_model(model_type).get_text_config()
        assert text.vocab_size_per_layer_input <= text.vocab_size
        shrink.shrink(text, dict(shrink.TEXT_SIZES, vocab_size=500))
        text = shrink.rederived(text)
        assert (text.vocab_size, text.vocab_size_per_layer_input) == (500, 500), model_type


def test_layers_that_share_keys_and_values_keep_a_layer_to_share_from():
    """Gemma 3n's last 15 of 35 layers attend over earlier layers' keys and values. Cut to
    one layer per kind, no sharing layer had an earlier one of its kind, and transformers
    refused the model (`'sliding_attention' is not in list`). The shrink repeats the
    layers once and shares the repeats: each reads its own kind's layer, as the
    checkpoints' do; a model that shares none keeps its depth."""
    from transformers import AutoConfig

    from hf_bridge.kv_sharing import kv_sharing_sources

    text = AutoConfig.for_model("gemma3n").get_text_config()
    assert text.num_kv_shared_layers > 0
    shrink.shrink(text, shrink.TEXT_SIZES)
    text = shrink.rederived(text)
    assert text.layer_types == ["sliding_attention", "full_attention"] * 2
    assert (text.num_hidden_layers, text.num_kv_shared_layers, len(text.activation_sparsity_pattern)) == (4, 2, 4)
    assert kv_sharing_sources(text) == {2: 0, 3: 1}
    unshared = AutoConfig.for_model("gemma4").get_text_config()
    shrink.shrink(unshared, shrink.TEXT_SIZES)
    assert (unshared.num_hidden_layers, unshared.num_kv_shared_layers) == (2, 0)


def test_a_recipe_gives_the_text_model_the_layers_its_checkpoints_have():
    """LFM2-VL's checkpoints put short convolutions between its attention layers, where
    transformers' default config attends in every layer: the sweep builds one of each, so
    the state layers hf_bridge keeps per request (`state_layers.py`) are exercised."""
    spec = shrink.generic_spec("lfm2_vl")
    text = spec.make_config(_tokenizer("lfm2_vl")).get_text_config()
    assert text.layer_types == ["conv", "full_attention"]


def test_absent_towers_get_their_default_configs():
    """Gemma 4's default config has no vision or audio tower; its checkpoints have both."""
    from transformers import AutoConfig

    config = AutoConfig.for_model("gemma4")
    shrink.build_absent_towers(config)
    assert config.vision_config is not None and config.audio_config is not None


def test_tokens_a_processor_reads_if_present_are_named():
    """Gemma 4's processor reads `getattr(tokenizer, "audio_token", None)` and refuses every
    call without it."""
    _, attributes = shrink.tokens_named_by(shrink.processor_class("gemma4"))
    assert {"audio_token", "boa_token", "eoa_token"} <= set(attributes)


def test_tokens_a_processor_class_keeps_as_constants_are_named():
    """MiniMax-M3-VL's processor keeps its tokens as class constants (`IMAGE_TOKEN =
    "]<]image[>["`); a tokenizer without them splits them, and transformers then counts
    no image token in the ids."""
    special, _ = shrink.tokens_named_by(shrink.processor_class("minimax_m3_vl"))
    assert {"]<]image[>[", "]<]video[>[", "]<]start of image[>[", "]<]end of image[>["} <= set(special)


def test_processor_settings_come_from_the_config():
    """LLaVA-style processors leave `patch_size` unset; checkpoints carry the tower's."""
    from transformers import AutoConfig

    settings = shrink.settings_from_config(shrink.processor_class("vipllava"), "vipllava")
    assert settings["patch_size"] == AutoConfig.for_model("vipllava").vision_config.patch_size


def test_feature_layers_stay_inside_the_shrunk_tower():
    from transformers import AutoConfig

    config = AutoConfig.for_model("vipllava")
    shrink.shrink(config.vision_config, shrink.VISION_SIZES)
    shrink.clamp_feature_layers(config)
    depth = config.vision_config.num_hidden_layers
    assert all(-depth - 1 <= layer <= depth for layer in config.vision_feature_layers)
    assert len(config.vision_feature_layers) == 5  # the projector's input width is unchanged


def test_video_processor_takes_the_image_processor_patch_size_only():
    processor = shrink.make_processor("cohere_compass")(_tokenizer("cohere_compass"))
    assert processor.video_processor.patch_size == processor.image_processor.patch_size == 14
    # Ernie 4.5 VL's video processor refuses any temporal patch size but its own 2
    ernie = shrink.make_processor("ernie4_5_vl_moe")(_tokenizer("ernie4_5_vl_moe"))
    assert (ernie.image_processor.temporal_patch_size, ernie.video_processor.temporal_patch_size) == (1, 2)


def test_mrope_sections_fit_a_config_that_validates_them():
    """Cosmos3-Edge's config checks that the sections sum to half its head_dim."""
    config = shrink.make_config("cosmos3_edge")(_tokenizer("cosmos3_edge"))
    text = config.get_text_config()
    assert sum(text.rope_parameters["mrope_section"]) == text.head_dim // 2


def test_mrope_sections_keep_the_pairs_the_model_needs_equal():
    """Ernie 4.5 VL interleaves height and width frequencies, so its two sections must be
    equal: its code falls back to 22/22/20 where the config declares none, and the shrink's
    usual 4/6/6 failed in transformers (`stack expects each tensor to be equal size`).
    Sections whose equal pairs 4/6/6 keeps (Qwen2-VL's 16/24/24, Qwen3-VL's 24/20/20) stay as they were."""
    default = shrink.default_config("ernie4_5_vl_moe").get_text_config()
    assert shrink.default_mrope_sections("ernie4_5_vl_moe", default) == [22, 22, 20]
    text = shrink.make_config("ernie4_5_vl_moe")(_tokenizer("ernie4_5_vl_moe")).get_text_config()
    sections = text.rope_parameters["mrope_section"]
    assert sections[0] == sections[1] and sum(sections) == text.hidden_size // text.num_attention_heads // 2
    for default in ([16, 24, 24], [24, 20, 20]):
        assert shrink.mrope_sections(text, default) == shrink.mrope_sections(text) == [4, 6, 6]


def test_a_tower_of_waveform_frames_takes_the_extractor_frame():
    """Gemma 4 Unified embeds raw 640-sample frames as audio tokens: its audio config's width
    is the frame length, which the shrink had cut to 32 (transformers: `mat1 and mat2 shapes
    cannot be multiplied (25x640 and 32x64)`)."""
    config, processor = _generic("gemma4_unified")
    assert config.audio_config.audio_samples_per_token == processor.feature_extractor.audio_samples_per_token == 640


def test_audio_tower_reads_the_extractor_mel_bins():
    config = shrink.make_config("glmasr")(_tokenizer("glmasr"))
    processor = shrink.make_processor("glmasr")(_tokenizer("glmasr"))
    assert config.audio_config.num_mel_bins == processor.feature_extractor.feature_size


def test_longest_audio_is_what_the_extractor_takes_whole():
    from transformers import WhisperFeatureExtractor

    from hf_bridge.probes import AUDIO_SECONDS, longest_audio_seconds

    class Processor:
        feature_extractor = WhisperFeatureExtractor(chunk_length=30)

    assert longest_audio_seconds(Processor()) == 30.0
    assert longest_audio_seconds(object()) == AUDIO_SECONDS


def _tokenizer(model_type: str):
    from hf_bridge.zoo.tokenizer import build_tokenizer

    spec = shrink.generic_spec(model_type)
    return build_tokenizer(spec.special_tokens, add_bos=False, extra_attributes=spec.tokenizer_attributes)


def test_a_dynamic_resolution_processor_gives_the_tower_no_side():
    """PaddleOCR-VL's size holds pixel counts (shortest_edge 147456): read as a side, its
    tower's position table grew past the machine's memory."""
    image_processor = shrink._sub_processor_class("paddleocr_vl", "image_processor")()
    assert shrink._output_height(image_processor) is None
    clip = shrink._sub_processor_class("llava", "image_processor")(crop_size={"height": 56, "width": 56}, do_center_crop=True)
    assert shrink._output_height(clip) == 56


def test_towers_configured_in_sub_configs_of_a_sub_config_are_shrunk():
    """DeepSeek-OCR-2's vision config holds a SAM tower and a 4096-wide encoder of its own;
    left whole, its tiny checkpoint did not fit in memory (`build failed (exit -9)`)."""
    from transformers import AutoConfig

    config = AutoConfig.for_model("deepseek_ocr2")
    towers = shrink.tower_configs(config, config.get_text_config())
    assert [type(t).__name__ for t in towers] == ["DeepseekOcr2VisionConfig", "DeepseekOcr2SamVisionConfig", "DeepseekOcr2VisionEncoderConfig"]
    assert config.text_config not in towers


def _generic(model_type: str):
    """The generic spec's config and processor for `model_type`, as the sweep builds them."""
    from hf_bridge.zoo.build import build_tokenizer

    spec = shrink.generic_spec(model_type)
    tokenizer = build_tokenizer(spec.special_tokens, add_bos=False, extra_attributes=spec.tokenizer_attributes)
    return spec.make_config(tokenizer), spec.make_processor(tokenizer)


def test_fields_a_config_derives_follow_the_shrink():
    """MiniMax-M3-VL derives `merged_hidden_size` (text width x merge square) on construction;
    saved, the default's 24576 came back over the shrunk width's, and its projector failed."""
    config, _ = _generic("minimax_m3_vl")
    assert "merged_hidden_size" in shrink.derived_attributes(type(config))
    assert config.merged_hidden_size == config.text_config.hidden_size * config.vision_config.spatial_merge_size**2


def test_towers_take_the_view_and_patch_their_processor_gives_them():
    """DeepSeek-VL-Hybrid's second tower reads the processor's `high_res_size`, its first the
    plain `size`, and its global-attention layers stay inside its depth; Step-3.7's ViT patch is the processor's `vision_patch_size`, its
    `patch_size` being a crop's side."""
    config, processor = _generic("deepseek_vl_hybrid")
    assert config.high_res_vision_config.image_size == processor.image_processor.high_res_size["height"]
    assert config.vision_config.image_size == processor.image_processor.size["height"]
    high_res = config.high_res_vision_config  # its SAM tower's global layers, 2, 5, 8, 11 by default
    assert high_res.global_attn_indexes == [high_res.num_hidden_layers - 1]
    config, processor = _generic("step3p7")
    assert config.vision_config.patch_size == processor.image_processor.vision_patch_size != processor.image_processor.patch_size


def test_a_recipe_writes_each_item_as_its_checkpoints_template_does():
    """Cosmos3-Edge's template marks each image with the processor's vision markers: bare,
    two images in a row read as one span to its M-RoPE positions (transformers raised)."""
    _, processor = _generic("cosmos3_edge")
    marked = processor.vision_start_token + processor.image_token + processor.vision_end_token
    assert marked in processor.chat_template
    _, processor = _generic("llava")
    assert processor.image_token in processor.chat_template
    _, processor = _generic("ernie4_5_vl_moe")  # its own start and end markers, per modality
    for modality in ("image", "video"):
        marked = [getattr(processor, f"{modality}_{part}") for part in ("start_token", "token", "end_token")]
        assert "".join(marked) in processor.chat_template


def test_the_shrink_builds_transformers_own_config_where_vllm_registered_its_own():
    """vLLM registers its own config class into `AutoConfig` when it loads such a checkpoint
    (Cosmos3-Edge's: a Nemotron-H config without `rope_parameters`); a later shrink in that
    process still builds transformers' default. In a child process: the registration is global."""
    import subprocess
    import sys

    code = (
        "from transformers import AutoConfig; from vllm.transformers_utils.configs import Cosmos3EdgeConfig; "
        "AutoConfig.register('cosmos3_edge', Cosmos3EdgeConfig, exist_ok=True); "
        "assert type(AutoConfig.for_model('cosmos3_edge')) is Cosmos3EdgeConfig; "
        "from hf_bridge.zoo import shrink; config = shrink.default_config('cosmos3_edge'); "
        "print(type(config).__module__, type(config.get_text_config()).__module__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["transformers.models.cosmos3_edge.configuration_cosmos3_edge"] * 2


def test_a_towers_layer_index_stays_inside_the_shrunk_tower():
    """MiniCPM-V's ViT merger runs after the tower's layer `insert_layer_id` (6 of 27), which
    its top-level config hands down to the tower on load. Past the shrunk depth the merger
    never ran, while `get_image_features` halved each image's grid anyway, so a second image
    was read from the first one's rows."""
    config, _ = _generic("minicpmv4_6")
    depth = config.vision_config.num_hidden_layers
    assert config.insert_layer_id == config.vision_config.insert_layer_id == depth - 1


def test_layer_index_lists_name_layers_the_shrunk_tower_has():
    """A Qwen-style tower counts its layers in `depth`. Its full-attention blocks (7, 15,
    23, 31) and deepstack layers (8, 16, 24) stayed past the shrunk depth: every block ran
    windowed, and no deepstack feature reached the decoder, so the sweep never ran that
    path for these types."""
    config, _ = _generic("qwen2_5_vl")
    assert config.vision_config.fullatt_block_indexes == [config.vision_config.depth - 1]
    config, _ = _generic("cohere_compass")
    assert config.vision_config.deepstack_visual_indexes == [config.vision_config.depth - 1]


def test_latent_attention_without_rotary_dims_keeps_none():
    """GLM-5-Next's indexed layers are latent attention without rotary dims, and its config
    refuses any other (`Expecting NoPE for the DSA attention layers`): a 0 rotary width is
    a kind, kept, where DeepSeek-V3's shrinks (`test_derived_text_fields_follow_the_shrink`)."""
    config, _ = _generic("glm5_next")
    assert config.get_text_config().qk_rope_head_dim == 0
    assert "indexed_attention" in config.get_text_config().layer_types


def test_a_recipe_gives_what_the_default_config_and_processor_lack():
    """Qwen4-Exp builds its QSA indexer for every indexed layer, which its default config
    leaves unsized; Nemotron-H-Omni's default has no audio tower, its auto mappings name
    no feature extractor, and its video processor has no normalization."""
    from transformers import ParakeetEncoderConfig, ParakeetFeatureExtractor

    qwen4, _ = _generic("qwen4_exp")
    assert {k: getattr(qwen4.text_config, k) for k in shrink.QWEN4_EXP_INDEXER} == shrink.QWEN4_EXP_INDEXER
    omni, processor = _generic("nemotron_h_omni")
    assert isinstance(omni.audio_config, ParakeetEncoderConfig) and omni.audio_config.hidden_size == shrink.VISION_SIZES["hidden_size"]
    assert omni.audio_config.projection_hidden_size == shrink.NEMOTRON_H_OMNI_AUDIO_PROJECTION
    assert isinstance(processor.feature_extractor, ParakeetFeatureExtractor)
    assert processor.video_processor.norm_mean is not None
