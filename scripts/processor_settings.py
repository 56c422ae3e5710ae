"""Processor settings the tests never use, through `hf-bridge validate`: zoo checkpoints
(and the sweep's checkpoints of types outside the zoo) with a setting saved in their processor (and, where the model reads it too, their
config), or given per request as vLLM's `mm_processor_kwargs`, every stage and case
against transformers with the same setting, through hf_bridge and vLLM's in-tree
Transformers backend.

    .venv/bin/python scripts/processor_settings.py --out PROCESSOR_SETTINGS.md   # all (about 55 minutes)
    .venv/bin/python scripts/processor_settings.py --only gemma3-pan-and-scan --impls hf_bridge   # printed only
    .venv/bin/python scripts/processor_settings.py --only llava-tied --out PROCESSOR_SETTINGS.md --append
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

from mixed_modalities import write_table

ALL_STAGES = ("processing", "encoder", "decoding")
PINPOINTS = [[56, 168], [168, 56], [112, 112], [56, 56]]
PAN_AND_SCAN = {"do_pan_and_scan": True, "pan_and_scan_min_crop_size": 28, "pan_and_scan_max_num_crops": 2,
                "pan_and_scan_min_ratio_to_activate": 1.2}


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    arch: str
    """The zoo checkpoint it changes, or a type outside the zoo, built as the sweep builds it."""
    what: str
    image_processor: dict[str, Any] = dataclasses.field(default_factory=dict)
    video_processor: dict[str, Any] = dataclasses.field(default_factory=dict)
    processor: dict[str, Any] = dataclasses.field(default_factory=dict)
    config: dict[str, Any] = dataclasses.field(default_factory=dict)
    per_request: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Given as `mm_processor_kwargs` instead of saved."""
    rebuilt: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Attributes set on the zoo recipe's config and processor before its weights are drawn
    (`zoo.variant.rebuilt`; `config.` and `processor.` paths): a setting that changes their
    shapes, or is read as the model is built."""
    stages: tuple[str, ...] = ALL_STAGES


SMALL_TOWER = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
               "image_size": 56, "patch_size": 14}
"""A tower the size of the zoo LLaVA's CLIP, for its 56-pixel images."""

SETTINGS = [
    Setting("idefics3-no-splitting", "idefics3", "no tiles, one image", image_processor={"do_image_splitting": False}),
    Setting("idefics3-larger-images", "idefics3", "images up to 224 px: more tiles", image_processor={"size": {"longest_edge": 224}}),
    Setting("idefics3-no-splitting-per-request", "idefics3", "no tiles, per request", per_request={"do_image_splitting": False}),
    Setting("smolvlm-no-splitting", "smolvlm", "no tiles", image_processor={"do_image_splitting": False}),
    Setting("internvl-no-crops", "internvl", "no crops: one tile", image_processor={"crop_to_patches": False}),
    Setting("internvl-8-crops", "internvl", "up to 8 crops", image_processor={"max_patches": 8}),
    Setting("aya_vision-no-crops", "aya_vision", "no crops: one tile", image_processor={"crop_to_patches": False}),
    Setting("qwen2_vl-more-pixels", "qwen2_vl", "12544-50176 pixels: small images upscaled",
            image_processor={"size": {"shortest_edge": 12544, "longest_edge": 50176}}),
    Setting("qwen2_vl-more-pixels-per-request", "qwen2_vl", "the same, per request (images and video)",
            per_request={"size": {"shortest_edge": 12544, "longest_edge": 50176}}),
    Setting("qwen2_vl-sampled-frames", "qwen2_vl", "video frames sampled at 1 fps: one temporal patch",
            video_processor={"do_sample_frames": True, "fps": 1, "min_frames": 2}),
    Setting("qwen3_vl-1-fps", "qwen3_vl", "video frames sampled at 1 fps: one temporal patch, its timestamps",
            video_processor={"fps": 1, "min_frames": 2}),
    Setting("qwen3_vl-larger-frames", "qwen3_vl", "video frames of 16384-65536 pixels: 4x the patches",
            video_processor={"size": {"shortest_edge": 16384, "longest_edge": 65536}}),
    Setting("mistral3-224", "mistral3", "images up to 224 px: a larger patch grid with its row breaks",
            image_processor={"size": {"longest_edge": 224}}),
    Setting("llava-full-features", "llava", "CLIP's class token kept: one more image token",
            processor={"vision_feature_select_strategy": "full"}, config={"vision_feature_select_strategy": "full"}),
    Setting("llava_next-other-grid", "llava_next", "other resolutions, 1x3 and 3x1 tiles",
            image_processor={"image_grid_pinpoints": PINPOINTS}, config={"image_grid_pinpoints": PINPOINTS}),
    Setting("llava_onevision-anyres-max-1", "llava_onevision", "anyres_max_1: features pooled down to one tile's worth",
            processor={"vision_aspect_ratio": "anyres_max_1"}, config={"vision_aspect_ratio": "anyres_max_1"}),
    Setting("gemma3-pan-and-scan", "gemma3", "pan and scan, per request: an image and its crops, text between them in one item",
            per_request=PAN_AND_SCAN),
    Setting("idefics2-splitting", "idefics2", "image splitting: five sub-images per image, markers shared, written by its processor",
            image_processor={"do_image_splitting": True}),
    Setting("llava_onevision-2-frames-per-request", "llava_onevision", "video sampled to 2 frames, per request",
            per_request={"do_sample_frames": True, "num_frames": 2}),
    Setting("internvl-2-frames-per-request", "internvl", "video sampled to 2 frames, per request",
            per_request={"do_sample_frames": True, "num_frames": 2}),
    Setting("smolvlm-2-frames", "smolvlm", "video sampled to 2 frames", video_processor={"num_frames": 2}),
    # types outside the zoo, built by the sweep's shrinker
    Setting("gemma4-70-tokens-per-request", "gemma4", "70 soft tokens per image (the default 280), per request",
            per_request={"max_soft_tokens": 70}),
    Setting("qwen2_5_vl-2-fps", "qwen2_5_vl", "video frames sampled at 2 fps: its seconds per temporal patch",
            video_processor={"do_sample_frames": True, "fps": 2, "min_frames": 2}),
    Setting("qwen3_vl-more-pixels-per-request", "qwen3_vl", "16384-65536 pixels per image and video, per request",
            per_request={"size": {"shortest_edge": 16384, "longest_edge": 65536}}),
    Setting("glm4v-more-pixels", "glm4v", "12544-50176 pixels: small images upscaled",
            image_processor={"size": {"shortest_edge": 12544, "longest_edge": 50176}}),
    Setting("video_llama_3-1-fps", "video_llama_3", "video frames sampled at 1 fps", video_processor={"fps": 1}),
    Setting("paddleocr_vl-more-pixels", "paddleocr_vl", "at least 4x the default's smallest image",
            image_processor={"min_pixels": 112 * 112 * 4}),
    Setting("aria-split", "aria", "images split into crops beside the whole", image_processor={"split_image": True}),
    Setting("lfm2_vl-no-splitting", "lfm2_vl", "no tiles", image_processor={"do_image_splitting": False}),
    Setting("got_ocr2-crops-per-request", "got_ocr2", "up to 4 crops beside the whole, per request",
            per_request={"crop_to_patches": True, "max_patches": 4}),
    Setting("cohere2_vision-2-patches", "cohere2_vision", "up to 2 crops", image_processor={"max_patches": 2}),
    Setting("minicpmv4_6-one-slice-per-request", "minicpmv4_6", "one slice per image, per request",
            per_request={"max_slice_nums": 1}),
    Setting("phi4_multimodal-4-crops-per-request", "phi4_multimodal", "up to 4 crops (dynamic HD 4, the default 36), per request",
            per_request={"dynamic_hd": 4}),
    Setting("nemotron_h_omni-fewer-patches", "nemotron_h_omni", "256-1024 patches per image (the default 1024-13312)",
            image_processor={"min_num_patches": 256, "max_num_patches": 1024}),
    Setting("nemotron_h_omni-fewer-patches-per-request", "nemotron_h_omni", "at most 512 patches per image, per request",
            per_request={"max_num_patches": 512}),
    Setting("perception_lm-vanilla", "perception_lm", "one tile per image, no thumbnail (`vanilla`)",
            image_processor={"vision_input_type": "vanilla"}),
    Setting("perception_lm-2-tiles-per-request", "perception_lm", "up to 2 tiles beside the thumbnail, per request",
            per_request={"max_num_tiles": 2}),
    Setting("llama4-4-patches", "llama4", "up to 4 tiles (the default 16)", image_processor={"max_patches": 4}),
    Setting("llama4-max-canvas-per-request", "llama4", "images resized to the largest canvas of up to 4 tiles, per request",
            per_request={"resize_to_max_canvas": True, "max_patches": 4}),
    Setting("ernie4_5_vl_moe-fewer-pixels-per-request", "ernie4_5_vl_moe", "at most 50176 pixels per image, per request",
            per_request={"size": {"shortest_edge": 3136, "longest_edge": 50176}}),
    Setting("kimi_k25-fewer-patches-per-request", "kimi_k25", "at most 64 patches per image, per request",
            per_request={"max_patches": 64}),
    Setting("deepseek_ocr2-no-crops", "deepseek_ocr2", "no crops: the global view alone", image_processor={"crop_to_patches": False}),
    Setting("minicpmv4_7-no-slices", "minicpmv4_7", "no slicing (`slice_mode` off), images and video", image_processor={"slice_mode": False},
            video_processor={"slice_mode": False}),
    Setting("glm46v-1-fps", "glm46v", "video frames sampled at 1 fps", video_processor={"fps": 1}),
    Setting("granite4_vision-other-grid", "granite4_vision", "other resolutions, 1x3 and 3x1 tiles",
            image_processor={"image_grid_pinpoints": [[224, 672], [672, 224], [448, 448]]},
            config={"image_grid_pinpoints": [[224, 672], [672, 224], [448, 448]]}),
    Setting("lighton_ocr-smaller-per-request", "lighton_ocr", "images up to 128 px, per request",
            per_request={"size": {"longest_edge": 128}}),
    Setting("step3p7-smaller-crops", "step3p7", "images larger than 1008 px cropped (the default 3024)",
            image_processor={"max_image_size": 1008}),
    Setting("exaone4_5-more-pixels", "exaone4_5", "at least 4x the default's smallest image",
            image_processor={"size": {"shortest_edge": 12544, "longest_edge": 1003520}}),
    Setting("llava_next_video-2-frames-per-request", "llava_next_video", "video sampled to 2 frames, per request",
            per_request={"do_sample_frames": True, "num_frames": 2}),
    Setting("fuyu-wider-canvas", "fuyu", "a 112x84 canvas (the zoo's 56x56): more patch rows and columns, padding patches",
            image_processor={"size": {"height": 84, "width": 112}}),
    Setting("fuyu-smaller-canvas-per-request", "fuyu", "a 56x28 canvas (the zoo's 56x56), per request: images shrunk to two patch rows",
            per_request={"size": {"height": 28, "width": 56}}),
    Setting("qwen3_5-more-pixels-per-request", "qwen3_5", "16384-65536 pixels per image and video, per request",
            per_request={"size": {"shortest_edge": 16384, "longest_edge": 65536}}),
    Setting("gemma4_unified-fewer-soft-tokens-per-request", "gemma4_unified", "70 soft tokens per image (the default 280), per request",
            per_request={"max_soft_tokens": 70}),
    Setting("muse_glimmer-1-fps", "muse_glimmer", "video frames sampled at 1 fps (the default 2)", video_processor={"fps": 1.0}),
    # not to a number of frames: transformers refuses `num_frames` beside its saved `fps`
    Setting("cosmos3_edge-1-fps-per-request", "cosmos3_edge", "video frames sampled at 1 fps (the saved 2), per request",
            per_request={"fps": 1}),
    Setting("glm4v_moe-1-fps", "glm4v_moe", "video frames sampled at 1 fps", video_processor={"fps": 1}),
    Setting("qwen3_vl_moe-more-pixels-per-request", "qwen3_vl_moe", "16384-65536 pixels per image and video, per request",
            per_request={"size": {"shortest_edge": 16384, "longest_edge": 65536}}),
    Setting("hyperclovax_vision_v2-more-pixels-per-request", "hyperclovax_vision_v2",
            "12544-50176 pixels per image and video, per request",
            per_request={"size": {"shortest_edge": 12544, "longest_edge": 50176}}),
    Setting("qwen3_5_moe-1-fps", "qwen3_5_moe", "video frames sampled at 1 fps: one temporal patch, its timestamps",
            video_processor={"fps": 1, "min_frames": 2}),
    Setting("ovis2-crops", "ovis2", "up to 4 crops beside the whole: grid markers (`<IMG_COL>`, `<IMG_ROW>`) no blank holds",
            image_processor={"crop_to_patches": True, "max_patches": 4}),
    Setting("ovis2-crops-per-request", "ovis2", "up to 9 crops beside the whole, per request",
            per_request={"crop_to_patches": True, "max_patches": 9}),
    Setting("lfm2_vl-image-tokens-per-request", "lfm2_vl", "16-64 tokens per image (the default 64-256), per request",
            per_request={"min_image_tokens": 16, "max_image_tokens": 64}),
    Setting("lfm2_vl-tiles", "lfm2_vl", "images over 224 px split into 2-4 tiles beside a thumbnail (the default 512 px, 2-10)",
            image_processor={"max_image_tokens": 64, "min_image_tokens": 16, "max_tiles": 4, "tile_size": 224}),
    Setting("qwen2_5_omni-pixels-per-request", "qwen2_5_omni", "16384-65536 pixels per image and video, per request",
            per_request={"size": {"shortest_edge": 16384, "longest_edge": 65536}}),
    Setting("qwen3_omni_moe-1-fps-per-request", "qwen3_omni_moe", "video frames sampled at 1 fps, per request",
            per_request={"do_sample_frames": True, "fps": 1, "min_frames": 2}),
    Setting("qwen2_5_vl-1-fps-per-request", "qwen2_5_vl", "video frames sampled at 1 fps, per request: its seconds per temporal patch",
            per_request={"do_sample_frames": True, "fps": 1, "min_frames": 2}),
    Setting("llava_onevision-1-fps-per-request", "llava_onevision", "video frames sampled at 1 fps, per request",
            per_request={"do_sample_frames": True, "fps": 1}),
    Setting("aria-split-per-request", "aria", "images split into crops beside the whole, per request",
            per_request={"split_image": True}),
    Setting("qwen2_5_vl-min-max-pixels-per-request", "qwen2_5_vl",
            "12544-50176 pixels, per request, by the names Qwen's model cards use (`min_pixels`, `max_pixels`)",
            per_request={"min_pixels": 12544, "max_pixels": 50176}),
    Setting("internvl-no-crops-per-request", "internvl", "no crops: one tile, per request", per_request={"crop_to_patches": False}),
    Setting("aya_vision-2-crops-per-request", "aya_vision", "up to 2 crops (the zoo's 4), per request", per_request={"max_patches": 2}),
    Setting("gemma3-pan-and-scan-saved", "gemma3", "pan and scan, saved: an image and its crops, text between them in one item",
            image_processor=PAN_AND_SCAN),
    Setting("idefics3-larger-images-per-request", "idefics3", "images up to 224 px (the zoo's 112), per request: more tiles",
            per_request={"size": {"longest_edge": 224}}),
    Setting("smolvlm-2-frames-no-tiles-per-request", "smolvlm", "video sampled to 2 frames, per request, tiles off",
            per_request={"do_sample_frames": True, "num_frames": 2, "do_image_splitting": False}),
    Setting("mistral3-smaller-per-request", "mistral3", "images up to 56 px (the zoo's 112), per request: a smaller patch grid",
            per_request={"size": {"longest_edge": 56}}),
    # settings of the model itself, built into fresh weights (real checkpoints ship them)
    Setting("llava-two-feature-layers", "llava", "features of two tower layers, concatenated",
            rebuilt={"config.vision_feature_layer": [-2, -1]}),
    Setting("llava-silu-projector", "llava", "the second-last layer's features, a SiLU projector without biases",
            rebuilt={"config.vision_feature_layer": -2, "config.projector_hidden_act": "silu",
                     "config.multimodal_projector_bias": False}),
    Setting("llava-tied", "llava", "tied input and output embeddings",
            rebuilt={"config.tie_word_embeddings": True, "config.text_config.tie_word_embeddings": True}),
    Setting("llava-llama3-rope", "llava", "Llama 3's RoPE scaling (factor 8 past 64 positions)",
            rebuilt={"config.text_config.rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                            "original_max_position_embeddings": 64}}),
    Setting("llava-yarn", "llava", "YaRN RoPE (factor 4 past 64 positions)",
            rebuilt={"config.text_config.rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                                            "original_max_position_embeddings": 64}}),
    Setting("llava-biases-one-kv-head", "llava", "attention and MLP biases, one key-value head",
            rebuilt={"config.text_config.attention_bias": True, "config.text_config.mlp_bias": True,
                     "config.text_config.num_key_value_heads": 1}),
    Setting("llava_next-two-feature-layers", "llava_next", "features of two tower layers, concatenated",
            rebuilt={"config.vision_feature_layer": [-2, -1]}),
    Setting("llava_onevision-two-feature-layers", "llava_onevision", "features of two tower layers, concatenated",
            rebuilt={"config.vision_feature_layer": [-2, -1]}),
    Setting("gemma3-attention-soft-cap", "gemma3", "`attn_logit_softcapping` set, which Gemma 3's attention never applies",
            rebuilt={"config.text_config.attn_logit_softcapping": 5.0}),
    Setting("gemma3-final-soft-cap", "gemma3", "logits soft-capped at 3",
            rebuilt={"config.text_config.final_logit_softcapping": 3.0}),
    Setting("gemma3-window-8", "gemma3", "sliding layers of 8 tokens (the zoo's 512): shorter than the prompts",
            rebuilt={"config.text_config.sliding_window": 8}),
    Setting("gemma3-tied-16-tokens", "gemma3", "tied embeddings (as Gemma 3's own), 16 tokens per image (the zoo's 4)",
            rebuilt={"config.tie_word_embeddings": True, "config.text_config.tie_word_embeddings": True,
                     "config.mm_tokens_per_image": 16, "processor.image_seq_length": 16}),
    Setting("paligemma-tied", "paligemma", "tied embeddings, as PaliGemma's own",
            rebuilt={"config.tie_word_embeddings": True, "config.text_config.tie_word_embeddings": True}),
    Setting("qwen2_vl-merge-1-tied", "qwen2_vl", "no 2x2 patch merge, tied embeddings",
            rebuilt={"config.vision_config.spatial_merge_size": 1, "processor.image_processor.merge_size": 1,
                     "processor.video_processor.merge_size": 1, "config.tie_word_embeddings": True}),
    Setting("qwen2_5_vl-windows", "qwen2_5_vl", "vision windows of 112 px, full attention in the first block; "
            "the decoder's second layer sliding over 8 tokens",
            rebuilt={"config.vision_config.window_size": 112, "config.vision_config.fullatt_block_indexes": [0],
                     "config.text_config.use_sliding_window": True, "config.text_config.sliding_window": 8,
                     "config.text_config.max_window_layers": 1,
                     "config.text_config.layer_types": ["full_attention", "sliding_attention"]}),
    Setting("qwen3_vl-no-deepstack-tied", "qwen3_vl", "no deepstack levels, tied embeddings",
            rebuilt={"config.vision_config.deepstack_visual_indexes": [], "config.tie_word_embeddings": True}),
    Setting("mistral3-merge-1-window-8", "mistral3", "no patch merge; the decoder sliding over 8 tokens",
            rebuilt={"config.spatial_merge_size": 1, "processor.spatial_merge_size": 1,
                     "config.text_config.sliding_window": 8}),
    Setting("internvl-qk-norm", "internvl", "the tower's QK norm and RMS norms, the second-last layer's features",
            rebuilt={"config.vision_feature_layer": -2, "config.vision_config.use_qk_norm": True,
                     "config.vision_config.norm_type": "rms_norm"}),
    Setting("smolvlm-scale-4", "smolvlm", "pixel shuffle by 4 (the zoo's 2): one token per tile",
            rebuilt={"config.scale_factor": 4, "processor.image_seq_len": 1}),
    # LLaVA over another tower (its config names any vision model by `model_type`)
    *(Setting(f"llava-{kind}-tower", "llava", what, rebuilt={
        "config.vision_config": {"model_type": kind, **SMALL_TOWER, **tower}, "config.vision_feature_select_strategy": strategy,
        "processor.vision_feature_select_strategy": strategy, "processor.num_additional_image_tokens": extra_tokens})
      for kind, tower, strategy, extra_tokens, what in [
          ("siglip_vision_model", {}, "full", 0, "a SigLIP tower with its pooling head, every patch's features "
                                                 "(as llava-interleave's)"),
          ("dinov2", {}, "default", 1, "a DINOv2 tower, its class token dropped"),
          ("dinov2_with_registers", {"num_register_tokens": 4}, "full", 5,
           "a DINOv2 tower with 4 register tokens, class and register tokens kept"),
          ("vit", {}, "default", 1, "a ViT tower, its class token dropped"),
          ("aimv2_vision_model", {}, "full", 0, "an AIMv2 tower (no class token)"),
      ]),
    # types no other row sets anything of
    Setting("hunyuan_vl-fewer-pixels-per-request", "hunyuan_vl", "16384-65536 pixels per image (the default 262144-4194304), per request",
            per_request={"size": {"shortest_edge": 16384, "longest_edge": 65536}}),
    Setting("qianfan_ocr-crops", "qianfan_ocr", "up to 4 crops beside the whole (crops off by default)",
            image_processor={"crop_to_patches": True, "max_patches": 4}),
    Setting("minimax_m3_vl-fewer-pixels-per-request", "minimax_m3_vl", "at most 50176 pixels per image, per request",
            per_request={"size": {"shortest_edge": 3136, "longest_edge": 50176}}),
    Setting("cohere_compass-fewer-video-tokens-per-request", "cohere_compass", "at most 64 video tokens (the default 768), per request",
            per_request={"max_video_tokens": 64}),
    Setting("emu3-fewer-pixels", "emu3", "1024-4096 pixels per image (the sweep's 4096-16384): fewer VQ codes per row",
            image_processor={"min_pixels": 1024, "max_pixels": 4096, "size": {"min_pixels": 1024, "max_pixels": 4096}}),
    Setting("video_llava-2-frames-per-request", "video_llava", "video sampled to 2 frames, per request",
            per_request={"do_sample_frames": True, "num_frames": 2}),
]


IMPLS = ("hf_bridge", "intree")
DETAIL_CHARS = 240
"""Of each verdict's detail in the table: enough for the cause."""


def check(setting: Setting, scratch: Path, impl: str = "hf_bridge") -> tuple[int, str, float]:
    """(exit code, what did not pass, seconds) of validating `setting` through `impl`
    (`hf-bridge validate --impl`): the first such verdict, and how many there are. Where
    every stage checked passed, the verdicts not applicable to a case with items (one
    transformers cannot run, so nothing was compared) are named alike: a pass must not
    hide them."""
    from hf_bridge.validate import command
    from hf_bridge.validate.stages import first_of, not_passed

    model_dir = scratch / setting.name
    if not model_dir.exists():
        model_dir = _checkpoint(setting, model_dir)
    start = time.perf_counter()
    report = command.run(model_dir, impl, stage_names=setting.stages, mm_processor_kwargs=setting.per_request or None)
    others, unrun = not_passed(report.verdicts)
    unchecked = [v for v in unrun if not v.detail.startswith(command.NO_MEDIA)]
    named, what = (others, "not passed") if others else (unchecked, "not applicable")
    said = first_of(named, what, DETAIL_CHARS) if named else ""
    return report.exit_code, said, time.perf_counter() - start


def _checkpoint(setting: Setting, into: Path) -> Path:
    """A copy of the zoo checkpoint (weights linked) with `setting` saved into it: its own
    directory even where nothing is saved, for the references of its per-request setting."""
    from hf_bridge.zoo import SPECS, build
    from hf_bridge.zoo.shrink import build_sweep_model
    from hf_bridge.zoo.variant import rebuilt, variant

    if setting.rebuilt:
        parts = {part: {path.removeprefix(f"{part}."): value for path, value in setting.rebuilt.items()
                        if path.startswith(f"{part}.")} for part in ("config", "processor")}
        model_dir = rebuilt(setting.arch, into.parent / "rebuilt" / setting.name, **parts)
    elif setting.arch in SPECS:
        model_dir = build(setting.arch)
    else:  # the sweep's checkpoint of the type, built once per run (no engine runs in this process)
        model_dir = into.parent / "types" / setting.arch
        if not model_dir.exists():
            build_sweep_model(setting.arch, model_dir)
    sections = {name: keys for name, keys in (("image_processor", setting.image_processor),
                                              ("video_processor", setting.video_processor)) if keys}
    return variant(model_dir, into, processor=setting.processor, config=setting.config, **sections)


def how(setting: Setting) -> str:
    saved = {**setting.image_processor, **setting.video_processor, **setting.processor}
    parts = [f"built with `{setting.rebuilt}`"] if setting.rebuilt else []
    parts += [f"saved `{saved}`"] if saved else []
    parts += [f"config `{setting.config}`"] if setting.config else []
    parts += [f"per request `{setting.per_request}`"] if setting.per_request else []
    return ", ".join(parts).replace("|", "\\|")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=[s.name for s in SETTINGS])
    parser.add_argument("--impls", nargs="+", choices=IMPLS, default=list(IMPLS))
    parser.add_argument("--out", type=Path, help="write the table here (markdown)")
    parser.add_argument("--append", action="store_true", help="add the rows run to the table --out holds")
    args = parser.parse_args()
    if args.append and not (args.out and args.out.exists()):
        parser.error("--append adds rows to an existing table: name it with --out")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for setting in SETTINGS:
            if args.only and setting.name not in args.only:
                continue
            verdicts = []
            for impl in args.impls:
                code, others, seconds = check(setting, Path(scratch), impl)
                if code == 0:
                    verdict = f"pass ({others})" if others else "pass"
                else:
                    verdict = f"exit {code}: {others}"
                verdicts.append(verdict.replace("|", "\\|"))
                print(f"{setting.name} / {impl}: {verdicts[-1]} ({seconds:.0f} s)", flush=True)
            rows.append(f"| {setting.arch} | {setting.what} | {how(setting)} | {', '.join(setting.stages)} | {' | '.join(verdicts)} |")
    if args.append:
        args.out.write_text(args.out.read_text().rstrip("\n") + "\n" + "\n".join(rows) + "\n")
    elif args.out:
        write_table(args.out, "Processor settings", "processor_settings.py",
                    "zoo checkpoints, and the sweep's checkpoints of types outside the zoo, with settings the tests "
                    "never use, every standard case through `hf-bridge validate --impl`, against transformers with the "
                    "same setting.",
                    "Exit 1: a stage failed, each named with its cause; exit 2: one could not be checked. A pass names "
                    "the verdicts not applicable to a case with items, if any: a case transformers itself cannot run.",
                    ("architecture", "setting", "how", "stages"), rows, impls=tuple(args.impls))


if __name__ == "__main__":
    main()
