"""Per-architecture recipes for the tiny zoo: real transformers configs and processors.

This is the one place in hf_bridge that names architectures: the zoo has to build a
checkpoint the way each model's authors lay it out. The wrapper that serves them
(`hf_bridge.model`, `hf_bridge.processing`) never looks at these names.

Sizes are chosen so a vLLM engine starts in seconds on 2 CPU cores: a 64-wide text
model whose head_dim (32) the CPU attention kernel supports, and vision towers of a
few layers at small image sizes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

TEXT = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=4096,
    rms_norm_eps=1e-6,
)
"""Shared text-model geometry (Llama-style names; each spec maps what differs)."""

CLIP_VISION = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=56,
    patch_size=14,
    projection_dim=32,
)

GENERIC_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ message['role'] }}: "
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ IMAGE }}"
    "{% elif part['type'] == 'video' %}{{ VIDEO }}"
    "{% elif part['type'] == 'audio' %}{{ AUDIO }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def chat_template(image: str = "", video: str = "", audio: str = "") -> str:
    """The generic template with this model's placeholder strings baked in."""
    return GENERIC_CHAT_TEMPLATE.replace("{{ IMAGE }}", image).replace("{{ VIDEO }}", video).replace("{{ AUDIO }}", audio)


@dataclass(frozen=True)
class ZooSpec:
    """How to build one tiny checkpoint."""

    name: str
    """Short name users pass to `hf-bridge demo --arch`."""
    make_config: Callable[[Any], Any]
    """Takes the tokenizer (for vocab size and special token ids), returns the config."""
    make_processor: Callable[[Any], Any]
    """Takes the tokenizer, returns the full HF processor."""
    special_tokens: list[str]
    tokenizer_attributes: dict[str, str] = field(default_factory=dict)
    image_placeholder: str = ""
    video_placeholder: str = ""
    add_bos: bool = True
    """Whether the chat template starts with BOS (Qwen's does not)."""
    min_image_side: int = 64
    """Test images are at least this large, so tiling processors make >= 2 tiles."""
    init_std: float = 0.25
    """Init scale: large enough that a random model's continuation is not one token, small
    enough that its float32 rounding leaves parity's tolerance to the implementations (at
    0.5, transformers' own float32 log-probs sat up to 1.1e-3 from float64 on image
    prompts; at 0.25, under 6e-5: `tests/helpers/conditioning.py`)."""
    notes: str = ""
    servable: bool = True
    """False for models kept to test that hf_bridge refuses them clearly."""
    centred_norm_biases: bool = False
    """Draw norm biases around 0 rather than 1. Fuyu needs it (a bias near 1 in every
    LayerNorm drowns the input: every continuation is one token); the other recipes
    keep the init their parity was established with."""
    vocabulary_pieces: list[str] | None = None
    """Set for a SentencePiece-style tokenizer holding these as plain pieces (Fuyu)."""
    beside_weights: Callable[[Path], None] | None = None
    """Writes what the checkpoint holds beside its weights and processor, where its class's
    `from_pretrained` reads it (Qwen2.5-Omni's speaker file)."""

    @property
    def has_video(self) -> bool:
        """Whether the processor takes video (listed in `VIDEO_ARCHS`)."""
        return self.name in VIDEO_ARCHS


def _vocab(tokenizer) -> int:
    return len(tokenizer)


# --- LLaVA (CLIP) -------------------------------------------------------------------


def _llava_config(tokenizer):
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig

    return LlavaConfig(
        vision_config=CLIPVisionConfig(**CLIP_VISION),
        text_config=LlamaConfig(**TEXT, vocab_size=_vocab(tokenizer)),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        projector_hidden_act="gelu",
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )


def _llava_processor(tokenizer):
    from transformers import CLIPImageProcessor, LlavaProcessor

    side = CLIP_VISION["image_size"]
    return LlavaProcessor(
        image_processor=CLIPImageProcessor(
            size={"shortest_edge": side}, crop_size={"height": side, "width": side}
        ),
        tokenizer=tokenizer,
        patch_size=CLIP_VISION["patch_size"],
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=chat_template(image="<image>"),
    )


# --- Qwen2-VL / Qwen2.5-VL (M-RoPE, image and video) --------------------------------


def _qwen2_vl_text(vocab_size: int) -> dict:
    t = dict(TEXT)
    t.pop("head_dim")
    return dict(
        t,
        vocab_size=vocab_size,
        rope_parameters={"rope_type": "default", "mrope_section": [4, 6, 6], "rope_theta": 10000.0},
    )


def _qwen_token_ids(tokenizer) -> dict:
    ids = tokenizer.convert_tokens_to_ids
    return dict(
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
    )


def _qwen2_vl_config(tokenizer):
    from transformers import Qwen2VLConfig

    return Qwen2VLConfig(
        **_qwen_token_ids(tokenizer),
        text_config=_qwen2_vl_text(_vocab(tokenizer)),
        vision_config=dict(
            depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2,
            patch_size=14, spatial_merge_size=2, temporal_patch_size=2, in_channels=3,
        ),
    )


def _qwen2_5_vl_config(tokenizer):
    from transformers import Qwen2_5_VLConfig

    return Qwen2_5_VLConfig(
        **_qwen_token_ids(tokenizer),
        text_config=_qwen2_vl_text(_vocab(tokenizer)),
        vision_config=dict(
            depth=2, hidden_size=32, out_hidden_size=64, num_heads=2, intermediate_size=64,
            patch_size=14, spatial_merge_size=2, temporal_patch_size=2, in_channels=3,
            window_size=56, fullatt_block_indexes=[1],
        ),
    )


def _qwen_vl_processor(processor_cls: str):
    def make(tokenizer):
        import transformers

        pixels = dict(shortest_edge=56 * 56, longest_edge=112 * 112)
        image_processor = transformers.Qwen2VLImageProcessor(size=pixels)
        video_processor = transformers.Qwen2VLVideoProcessor(size=pixels)
        cls = getattr(transformers, processor_cls)
        return cls(
            image_processor=image_processor,
            video_processor=video_processor,
            tokenizer=tokenizer,
            chat_template=chat_template(
                image="<|vision_start|><|image_pad|><|vision_end|>",
                video="<|vision_start|><|video_pad|><|vision_end|>",
            ),
        )

    return make


_QWEN_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]

SPECS: dict[str, ZooSpec] = {}
VIDEO_ARCHS = frozenset({"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "llava_onevision", "internvl", "smolvlm"})
"""Zoo models whose HF processor has a video processor."""


def _register(spec: ZooSpec) -> None:
    SPECS[spec.name] = spec


_register(
    ZooSpec(
        name="llava",
        make_config=_llava_config,
        make_processor=_llava_processor,
        special_tokens=["<image>"],
        tokenizer_attributes={"image_token": "<image>"},
        image_placeholder="<image>",
    )
)
_register(
    ZooSpec(
        name="qwen2_vl",
        make_config=_qwen2_vl_config,
        make_processor=_qwen_vl_processor("Qwen2VLProcessor"),
        special_tokens=_QWEN_TOKENS,
        tokenizer_attributes={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>"},
        image_placeholder="<|vision_start|><|image_pad|><|vision_end|>",
        video_placeholder="<|vision_start|><|video_pad|><|vision_end|>",
        add_bos=False,
    )
)
_register(
    ZooSpec(
        name="qwen2_5_vl",
        make_config=_qwen2_5_vl_config,
        make_processor=_qwen_vl_processor("Qwen2_5_VLProcessor"),
        special_tokens=_QWEN_TOKENS,
        tokenizer_attributes={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>"},
        image_placeholder="<|vision_start|><|image_pad|><|vision_end|>",
        video_placeholder="<|vision_start|><|video_pad|><|vision_end|>",
        add_bos=False,
    )
)


def _ids(tokenizer, **names: str) -> dict[str, int]:
    """`{config_field: token}` -> `{config_field: token id}`."""
    return {field: tokenizer.convert_tokens_to_ids(token) for field, token in names.items()}


def _text(vocab_size: int, **overrides) -> dict:
    return dict(TEXT, vocab_size=vocab_size, **overrides)


# --- LLaVA-NeXT (anyres tiles) and LLaVA-OneVision (image and video) ------------------

PINPOINTS = [[56, 112], [112, 56], [112, 112]]


def _llava_next_config(tokenizer):
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaNextConfig

    return LlavaNextConfig(
        vision_config=CLIPVisionConfig(**CLIP_VISION),
        text_config=LlamaConfig(**_text(_vocab(tokenizer))),
        image_grid_pinpoints=PINPOINTS,
        vision_feature_select_strategy="default",
        **_ids(tokenizer, image_token_id="<image>"),
    )


def _llava_next_processor(tokenizer):
    from transformers import LlavaNextImageProcessor, LlavaNextProcessor

    side = CLIP_VISION["image_size"]
    return LlavaNextProcessor(
        image_processor=LlavaNextImageProcessor(
            size={"shortest_edge": side}, crop_size={"height": side, "width": side}, image_grid_pinpoints=PINPOINTS
        ),
        tokenizer=tokenizer,
        patch_size=CLIP_VISION["patch_size"],
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=chat_template(image="<image>"),
    )


SIGLIP_VISION = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=56, patch_size=14
)


def _llava_onevision_config(tokenizer):
    from transformers import LlavaOnevisionConfig, Qwen2Config, SiglipVisionConfig

    t = _text(_vocab(tokenizer))
    t.pop("head_dim")
    return LlavaOnevisionConfig(
        vision_config=SiglipVisionConfig(**SIGLIP_VISION),
        text_config=Qwen2Config(**t),
        image_grid_pinpoints=PINPOINTS,
        vision_feature_select_strategy="full",
        vision_aspect_ratio="anyres_max_9",
        **_ids(tokenizer, image_token_id="<image>", video_token_id="<video>"),
    )


def _llava_onevision_processor(tokenizer):
    from transformers import LlavaOnevisionImageProcessor, LlavaOnevisionProcessor, LlavaOnevisionVideoProcessor

    side = SIGLIP_VISION["image_size"]
    return LlavaOnevisionProcessor(
        image_processor=LlavaOnevisionImageProcessor(size={"height": side, "width": side}, image_grid_pinpoints=PINPOINTS),
        video_processor=LlavaOnevisionVideoProcessor(size={"height": side, "width": side}),
        tokenizer=tokenizer,
        num_image_tokens=(side // SIGLIP_VISION["patch_size"]) ** 2,
        vision_feature_select_strategy="full",
        vision_aspect_ratio="anyres_max_9",
        chat_template=chat_template(image="<image>", video="<video>"),
    )


# --- InternVL (HF format): crop_to_patches tiles, pixel shuffle ------------------------


INTERNVL_VISION = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
    image_size=[56, 56], patch_size=[14, 14], use_mask_token=False,
)


def _internvl_config(tokenizer, vision: dict = INTERNVL_VISION):
    from transformers import InternVLConfig, InternVLVisionConfig, Qwen2Config

    t = _text(_vocab(tokenizer))
    t.pop("head_dim")
    return InternVLConfig(
        vision_config=InternVLVisionConfig(**vision),
        text_config=Qwen2Config(**t),
        downsample_ratio=0.5,
        **_ids(tokenizer, image_token_id="<IMG_CONTEXT>"),
    )


_INTERNVL_TOKENS = ["<img>", "</img>", "<IMG_CONTEXT>", "<video>", "<image>"]
_INTERNVL_TOKEN_ATTRIBUTES = {
    "start_image_token": "<img>", "end_image_token": "</img>",
    "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>",
}


def _internvl_processor(tokenizer, side: int = 56, image_seq_length: int = 4):
    from transformers import GotOcr2ImageProcessor, InternVLProcessor, InternVLVideoProcessor

    return InternVLProcessor(
        image_processor=GotOcr2ImageProcessor(
            size={"height": side, "width": side}, crop_to_patches=True, min_patches=1, max_patches=4
        ),
        video_processor=InternVLVideoProcessor(size={"height": side, "width": side}),
        tokenizer=tokenizer,
        image_seq_length=image_seq_length,
        chat_template=chat_template(image="<IMG_CONTEXT>", video="<video>"),
    )


# --- Gemma3 (SigLIP, bidirectional image attention) -----------------------------------


def _gemma3_config(tokenizer):
    from transformers import Gemma3Config, Gemma3TextConfig, SiglipVisionConfig

    return Gemma3Config(
        vision_config=SiglipVisionConfig(**SIGLIP_VISION),
        text_config=Gemma3TextConfig(
            **_text(_vocab(tokenizer)), sliding_window=512, query_pre_attn_scalar=32, tie_word_embeddings=False,
        ),
        mm_tokens_per_image=4,
        tie_word_embeddings=False,  # tied, a random model copies its last token forever
        **_ids(tokenizer, boi_token_index="<start_of_image>", eoi_token_index="<end_of_image>", image_token_index="<image_soft_token>"),
    )


def _gemma3_processor(tokenizer):
    from transformers import Gemma3ImageProcessor, Gemma3Processor

    return Gemma3Processor(
        image_processor=Gemma3ImageProcessor(size={"height": 56, "width": 56}),
        tokenizer=tokenizer,
        image_seq_length=4,
        chat_template=chat_template(image="<start_of_image>"),
    )


# --- Idefics3 and SmolVLM (image splitting, row/column markers) -----------------------

_GRID_TOKENS = [f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)]
_IDEFICS_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>", *_GRID_TOKENS]


def _idefics3_config(tokenizer, cls_name: str = "Idefics3Config", vision_cls: str = "Idefics3VisionConfig"):
    import transformers
    from transformers import LlamaConfig

    return getattr(transformers, cls_name)(
        vision_config=getattr(transformers, vision_cls)(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=56, patch_size=14
        ),
        text_config=LlamaConfig(**_text(_vocab(tokenizer))),
        scale_factor=2,
        **_ids(tokenizer, image_token_id="<image>"),
    )


def _idefics3_processor(tokenizer):
    from transformers import Idefics3ImageProcessor, Idefics3Processor

    return Idefics3Processor(
        image_processor=Idefics3ImageProcessor(
            size={"longest_edge": 112}, max_image_size={"longest_edge": 56}, do_image_splitting=True
        ),
        tokenizer=tokenizer,
        image_seq_len=4,
        chat_template=chat_template(image="<image>"),
    )


def _smolvlm_processor(tokenizer):
    from transformers import SmolVLMImageProcessor, SmolVLMProcessor, SmolVLMVideoProcessor

    return SmolVLMProcessor(
        image_processor=SmolVLMImageProcessor(
            size={"longest_edge": 112}, max_image_size={"longest_edge": 56}, do_image_splitting=True
        ),
        video_processor=SmolVLMVideoProcessor(
            size={"longest_edge": 56}, max_image_size={"longest_edge": 56}, num_frames=4, fps=1
        ),
        tokenizer=tokenizer,
        image_seq_len=4,
        chat_template=chat_template(image="<image>", video="<video>"),
    )


# --- Mistral3 (Pixtral vision: [IMG_BREAK] / [IMG_END] grid) --------------------------


def _mistral3_config(tokenizer):
    from transformers import Mistral3Config, MistralConfig, PixtralVisionConfig

    return Mistral3Config(
        vision_config=PixtralVisionConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, head_dim=16,
            image_size=112, patch_size=14,
        ),
        text_config=MistralConfig(**_text(_vocab(tokenizer)), sliding_window=None),
        spatial_merge_size=2,
        **_ids(tokenizer, image_token_index="[IMG]"),
    )


def _mistral3_processor(tokenizer):
    from transformers import PixtralImageProcessor, PixtralProcessor

    return PixtralProcessor(
        image_processor=PixtralImageProcessor(size={"longest_edge": 112}, patch_size=14),
        tokenizer=tokenizer,
        patch_size=14,
        spatial_merge_size=2,
        chat_template=chat_template(image="[IMG]"),
    )


_register(
    ZooSpec(
        name="llava_next",
        make_config=_llava_next_config,
        make_processor=_llava_next_processor,
        special_tokens=["<image>"],
        tokenizer_attributes={"image_token": "<image>"},
        min_image_side=112,
    )
)
_register(
    ZooSpec(
        name="llava_onevision",
        make_config=_llava_onevision_config,
        make_processor=_llava_onevision_processor,
        special_tokens=["<image>", "<video>"],
        tokenizer_attributes={"image_token": "<image>", "video_token": "<video>"},
        min_image_side=112,
    )
)
_register(
    ZooSpec(
        name="internvl",
        make_config=_internvl_config,
        make_processor=_internvl_processor,
        special_tokens=_INTERNVL_TOKENS,
        tokenizer_attributes=_INTERNVL_TOKEN_ATTRIBUTES,
        min_image_side=112,
    )
)
_register(
    ZooSpec(
        name="gemma3",
        make_config=_gemma3_config,
        make_processor=_gemma3_processor,
        special_tokens=["<start_of_image>", "<end_of_image>", "<image_soft_token>"],
        tokenizer_attributes={"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"},
    )
)
_register(
    ZooSpec(
        name="idefics3",
        make_config=_idefics3_config,
        make_processor=_idefics3_processor,
        special_tokens=_IDEFICS_TOKENS,
        min_image_side=112,
    )
)
_register(
    ZooSpec(
        name="smolvlm",
        make_config=lambda tok: _idefics3_config(tok, "SmolVLMConfig", "SmolVLMVisionConfig"),
        make_processor=_smolvlm_processor,
        special_tokens=[*_IDEFICS_TOKENS, "<video>"],
        tokenizer_attributes={"image_token": "<image>", "video_token": "<video>"},
        min_image_side=112,
    )
)
_register(
    ZooSpec(
        name="mistral3",
        make_config=_mistral3_config,
        make_processor=_mistral3_processor,
        special_tokens=["[IMG]", "[IMG_BREAK]", "[IMG_END]"],
        min_image_side=64,
    )
)


# --- Idefics2: a processor that reports no multimodal token types --------------------


def _idefics2_config(tokenizer):
    from transformers import Idefics2Config, MistralConfig

    return Idefics2Config(
        vision_config=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=56, patch_size=14
        ),
        perceiver_config=dict(
            hidden_act="silu", resampler_n_latents=4, resampler_depth=1, resampler_n_heads=2,
            resampler_head_dim=16, num_key_value_heads=1,
        ),
        text_config=MistralConfig(**_text(_vocab(tokenizer)), sliding_window=None),
        **_ids(tokenizer, image_token_id="<image>"),
    )


def _idefics2_processor(tokenizer):
    from transformers import Idefics2ImageProcessor, Idefics2Processor

    return Idefics2Processor(
        image_processor=Idefics2ImageProcessor(
            size={"shortest_edge": 56, "longest_edge": 56}, do_image_splitting=False
        ),
        tokenizer=tokenizer,
        image_seq_len=4,
        chat_template=chat_template(image="<image>"),
    )


_register(
    ZooSpec(
        name="idefics2",
        make_config=_idefics2_config,
        make_processor=_idefics2_processor,
        special_tokens=["<fake_token_around_image>", "<image>", "<end_of_utterance>"],
        notes="Its processor returns no mm_token_type_ids (hf_bridge types its listed image token) and rewrites the text around images (adjacent images share a marker; a space after each closing marker), from the text alone: hf_bridge lets it write the prompt (text_step.py).",
    )
)


# --- Benchmark shape: LLaVA with CLIP at 224 px and a 512-wide, 6-layer Llama ---------


def _llava_bench_config(tokenizer):
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig

    return LlavaConfig(
        vision_config=CLIPVisionConfig(**dict(CLIP_VISION, image_size=224, hidden_size=64, intermediate_size=128)),
        text_config=LlamaConfig(
            **dict(TEXT, hidden_size=512, intermediate_size=1376, num_hidden_layers=6, num_attention_heads=8,
                   num_key_value_heads=8, head_dim=64),
            vocab_size=_vocab(tokenizer),
        ),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        projector_hidden_act="gelu",
        vision_feature_select_strategy="default",
    )


def _llava_bench_processor(tokenizer):
    from transformers import CLIPImageProcessor, LlavaProcessor

    return LlavaProcessor(
        image_processor=CLIPImageProcessor(size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224}),
        tokenizer=tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=chat_template(image="<image>"),
    )


_register(
    ZooSpec(
        name="llava_bench",
        make_config=_llava_bench_config,
        make_processor=_llava_bench_processor,
        special_tokens=["<image>"],
        tokenizer_attributes={"image_token": "<image>"},
        notes="bench/throughput.py's model: CLIP 224 px, 512-wide 6-layer Llama.",
        servable=False,
    )
)


# --- Aya Vision: Cohere2 text config carries a logit_scale its HF class never applies --


def _aya_vision_config(tokenizer):
    from transformers import AyaVisionConfig, Cohere2Config, SiglipVisionConfig

    return AyaVisionConfig(
        vision_config=SiglipVisionConfig(**SIGLIP_VISION, vision_use_head=False),
        text_config=Cohere2Config(
            **dict(_text(_vocab(tokenizer)), rms_norm_eps=1e-5), logit_scale=0.0625, sliding_window=512,
            layer_types=["sliding_attention", "full_attention"], tie_word_embeddings=False,
        ),
        downsample_factor=2,
        vision_feature_select_strategy="full",
        tie_word_embeddings=False,
        **_ids(tokenizer, image_token_index="<|IMG_PATCH|>"),
    )


def _aya_vision_processor(tokenizer):
    from transformers import AyaVisionProcessor, GotOcr2ImageProcessor

    return AyaVisionProcessor(
        image_processor=GotOcr2ImageProcessor(
            size={"height": 56, "width": 56}, crop_to_patches=True, min_patches=1, max_patches=4
        ),
        tokenizer=tokenizer,
        patch_size=14,
        img_size=56,
        downsample_factor=2,
        chat_template=chat_template(image="<image>"),
    )


_register(
    ZooSpec(
        name="aya_vision",
        make_config=_aya_vision_config,
        make_processor=_aya_vision_processor,
        special_tokens=["<image>", "<|START_OF_IMG|>", "<|END_OF_IMG|>", "<|IMG_PATCH|>", "<|IMG_LINE_BREAK|>"],
        tokenizer_attributes={"image_token": "<image>"},
        min_image_side=112,
        notes="Its text config has logit_scale=0.0625, which AyaVisionForConditionalGeneration never applies.",
    )
)


# --- PaliGemma: BOS after the images and a trailing newline, added by the processor ----


def _paligemma_config(tokenizer):
    from transformers import GemmaConfig, PaliGemmaConfig, SiglipVisionConfig

    return PaliGemmaConfig(
        vision_config=SiglipVisionConfig(**SIGLIP_VISION, projection_dim=TEXT["hidden_size"]),
        text_config=GemmaConfig(**_text(_vocab(tokenizer)), tie_word_embeddings=False),
        projection_dim=TEXT["hidden_size"],
        tie_word_embeddings=False,
        **_ids(tokenizer, image_token_id="<image>"),
    )


def _paligemma_processor(tokenizer):
    from transformers import PaliGemmaProcessor, SiglipImageProcessor

    side = SIGLIP_VISION["image_size"]
    return PaliGemmaProcessor(
        image_processor=SiglipImageProcessor(size={"height": side, "width": side}, image_seq_length=16),
        tokenizer=tokenizer,
        chat_template=chat_template(image="<image>"),
    )


_register(
    ZooSpec(
        name="paligemma",
        make_config=_paligemma_config,
        make_processor=_paligemma_processor,
        special_tokens=["<image>"],
        tokenizer_attributes={"image_token": "<image>"},
        add_bos=False,
        notes="Its processor puts BOS after the last image and a newline at the end of the prompt.",
    )
)


# --- Fuyu: no vision tower, inserts its own placeholder, newline tokens in the grid ----


def _fuyu_config(tokenizer):
    from transformers import FuyuConfig

    text = dict(_text(_vocab(tokenizer)), partial_rotary_factor=0.5, qk_layernorm=True, hidden_act="relu2")
    for key in ("head_dim", "num_key_value_heads", "rms_norm_eps"):
        text.pop(key)
    return FuyuConfig(
        **text,
        text_config=dict(text, model_type="persimmon"),
        patch_size=14,
        image_size=56,
        **_ids(tokenizer, image_token_id="|SPEAKER|"),
    )


def _fuyu_processor(tokenizer):
    from transformers import FuyuImageProcessor, FuyuProcessor

    return FuyuProcessor(
        image_processor=FuyuImageProcessor(size={"height": 56, "width": 56}, patch_size={"height": 14, "width": 14}),
        tokenizer=tokenizer,
    )


_register(
    ZooSpec(
        name="fuyu",
        centred_norm_biases=True,
        make_config=_fuyu_config,
        make_processor=_fuyu_processor,
        special_tokens=["<0x04>"],
        vocabulary_pieces=["|SPEAKER|", "|NEWLINE|"],
        add_bos=False,
        notes="Its processor inserts the image itself (no placeholder in the prompt), ends each patch row "
        "with |NEWLINE|, and adds BOS after the image and <0x04> at the end.",
    )
)


# --- Chameleon: a flat config (no vision_config), VQ image tokens, trailing separator --

_CHAMELEON_CODEBOOK = 16
_CHAMELEON_IMAGE_TOKENS = [
    "IMGIMG" + "".join("ABCDEFGHIJ"[int(d)] for d in str(i)) + "Z" for i in range(_CHAMELEON_CODEBOOK)
]


def _chameleon_config(tokenizer):
    from transformers import ChameleonConfig, ChameleonVQVAEConfig

    text = _text(_vocab(tokenizer))
    text.pop("head_dim")
    return ChameleonConfig(
        **text,
        vq_config=ChameleonVQVAEConfig(
            embed_dim=32, num_embeddings=_CHAMELEON_CODEBOOK, latent_channels=32, resolution=32,
            base_channels=32, channel_multiplier=[1, 1, 1, 1], num_res_blocks=1, attn_resolutions=[],
        ),
        vocabulary_map=dict(tokenizer.get_vocab()),
        tie_word_embeddings=False,
    )


def _chameleon_processor(tokenizer):
    from transformers import ChameleonImageProcessor, ChameleonProcessor

    tokenizer.sep_token = "<reserved08706>"  # appended to every prompt by the processor
    processor = ChameleonProcessor(
        image_processor=ChameleonImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}),
        tokenizer=tokenizer,
        image_seq_length=16,
    )
    processor.chat_template = chat_template(image="<image>")  # its __init__ takes none
    return processor


_register(
    ZooSpec(
        name="chameleon",
        make_config=_chameleon_config,
        make_processor=_chameleon_processor,
        special_tokens=["<image>", "<racm3:break>", "<eoss>", "<reserved08706>", *_CHAMELEON_IMAGE_TOKENS],
        tokenizer_attributes={"image_token": "<image>", "boi_token": "<racm3:break>", "eoi_token": "<eoss>"},
        notes="Flat config: vLLM resolves it to TransformersForCausalLM. Its processor ends every prompt "
        "with the separator token.",
    )
)


# --- Qwen3-VL: multi-level (deepstack) visual features added inside decoder layers -----


def _qwen3_vl_config(tokenizer):
    from transformers import Qwen3VLConfig

    text = dict(_qwen2_vl_text(_vocab(tokenizer)), head_dim=32)
    text["rope_parameters"] = dict(text["rope_parameters"], mrope_interleaved=True)
    return Qwen3VLConfig(
        **_qwen_token_ids(tokenizer),
        text_config=text,
        vision_config=dict(
            depth=2, hidden_size=32, out_hidden_size=64, num_heads=2, intermediate_size=64,
            patch_size=16, spatial_merge_size=2, temporal_patch_size=2, in_channels=3,
            num_position_embeddings=16, deepstack_visual_indexes=[0, 1],
        ),
        tie_word_embeddings=False,
    )


def _qwen3_vl_processor(tokenizer):
    import transformers

    pixels = dict(shortest_edge=64 * 64, longest_edge=128 * 128)
    return transformers.Qwen3VLProcessor(
        image_processor=transformers.Qwen2VLImageProcessor(size=pixels, patch_size=16),
        video_processor=transformers.Qwen3VLVideoProcessor(size=pixels, patch_size=16),
        tokenizer=tokenizer,
        chat_template=chat_template(
            image="<|vision_start|><|image_pad|><|vision_end|>",
            video="<|vision_start|><|video_pad|><|vision_end|>",
        ),
    )


_register(
    ZooSpec(
        name="qwen3_vl",
        make_config=_qwen3_vl_config,
        make_processor=_qwen3_vl_processor,
        special_tokens=_QWEN_TOKENS,
        tokenizer_attributes={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>"},
        add_bos=False,
        min_image_side=64,
        notes="Deepstack: features from intermediate vision layers are added to the first decoder layers' "
        "hidden states at the image positions.",
    )
)


# --- Qwen3-VL-MoE: Qwen3-VL with a mixture-of-experts text model (fused 3-D experts) ----

def _qwen3_vl_moe_config(tokenizer):
    from transformers import Qwen3VLMoeConfig

    dense = _qwen3_vl_config(tokenizer)
    experts = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48, decoder_sparse_step=1)
    text = dict(dense.text_config.to_dict(), **experts)
    for key in ("model_type", "architectures", "transformers_version", "dtype"):
        text.pop(key, None)
    return Qwen3VLMoeConfig(
        **_qwen_token_ids(tokenizer),
        text_config=text,
        vision_config={k: v for k, v in dense.vision_config.to_dict().items() if k not in ("model_type", "transformers_version", "dtype")},
        tie_word_embeddings=False,
    )


_register(
    dataclasses.replace(
        SPECS["qwen3_vl"],
        name="qwen3_vl_moe",
        make_config=_qwen3_vl_moe_config,
        notes="Qwen3-VL with 4 experts (top-2) in every decoder layer, stored as fused 3-D tensors; "
        "vLLM resolves it to TransformersMultiModalMoEForCausalLM.",
    )
)


# --- Benchmark shape: an InternVL-shaped tower (24 layers, 448 px tiles, width 64) -------

INTERNVL_BENCH_VISION = dict(
    hidden_size=64, intermediate_size=256, num_hidden_layers=24, num_attention_heads=4,
    image_size=[448, 448], patch_size=[14, 14], use_mask_token=False,
)


def _internvl_bench_config(tokenizer):
    return _internvl_config(tokenizer, INTERNVL_BENCH_VISION)


def _internvl_bench_processor(tokenizer):
    return _internvl_processor(tokenizer, side=448, image_seq_length=256)


_register(
    ZooSpec(
        name="internvl_bench",
        make_config=_internvl_bench_config,
        make_processor=_internvl_bench_processor,
        special_tokens=_INTERNVL_TOKENS,
        tokenizer_attributes=_INTERNVL_TOKEN_ATTRIBUTES,
        notes="bench/encoder_graphs.py's model: the InternVL-shaped tower at 448 px tiles.",
        servable=False,
    )
)
