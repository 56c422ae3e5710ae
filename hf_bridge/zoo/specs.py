"""Per-architecture recipes for the tiny zoo: real transformers configs and processors.

This is the one place in hf_bridge that names architectures: the zoo has to build a
checkpoint the way each model's authors lay it out. The wrapper that serves them
(`hf_bridge.model`, `hf_bridge.processing`) never looks at these names.

Sizes are chosen so a vLLM engine starts in seconds on 2 CPU cores: a 64-wide text
model whose head_dim (32) the CPU attention kernel supports, and vision towers of a
few layers at small image sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def chat_template(image: str = "", video: str = "") -> str:
    """The generic template with this model's placeholder strings baked in."""
    return GENERIC_CHAT_TEMPLATE.replace("{{ IMAGE }}", image).replace("{{ VIDEO }}", video)


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
    min_image_side: int = 64
    """Test images are at least this large, so tiling processors make >= 2 tiles."""
    init_std: float = 0.5
    """Init scale: large enough that a random model's continuation is not one token."""
    notes: str = ""


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
