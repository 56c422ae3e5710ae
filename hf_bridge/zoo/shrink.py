"""One generic shrinker: a tiny checkpoint of any HF VLM type from transformers' own classes.

The hand-written recipes in `specs.py` cover the divergence classes the test suite
pins down; the sweep (`scripts/sweep.py`) needs every decoder-only model type whose
processor returns `mm_token_type_ids`, and a recipe per type does not scale. This
module builds one from the type's default config and processor classes alone:

- the tokenizer is the zoo's tiny BPE, given every special token the processor's
  module names (`tokenizer.<name>_token` attributes, `"<|...|>"`-style literals);
- every sub-config is shrunk through the field names transformers' configs share
  (`hidden_size`, `num_hidden_layers`, ...), keeping what ties a tower to its
  processor (image and patch sizes);
- the config's `<name>_token_id` / `<name>_token_index` fields point at the
  processor's tokens.

Types that need more get a `RECIPE_OVERRIDES` entry here, never code elsewhere.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import PreTrainedConfig
from transformers.image_utils import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD

from ..hf_classes import text_generation_delegate, transformers_config_class
from ..kv_sharing import KV_SHARED_LAYERS
from .specs import ZooSpec

TEXT_SIZES = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
    head_dim=32, max_position_embeddings=4096, max_window_layers=2,
    num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
    n_shared_experts=1, first_k_dense_replace=1, kv_lora_rank=512, qk_rope_head_dim=64,
    qk_nope_head_dim=16, v_head_dim=32, n_group=1, topk_group=1,
)
"""Text-model geometry: 64 wide, 2 layers, head_dim 32 (a size vLLM's CPU attention has);
MLA's latent KV is 512 + 64 wide, the one size vLLM's CPU MLA decode kernel compiles."""
EXPERT_FIELDS = frozenset(
    {"num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts"}
)
"""Fields that a dense model leaves None (Gemma 4): the shrink keeps them so."""
ZERO_KEPT = frozenset({"qk_rope_head_dim"})
"""Fields whose 0 is a kind, not a size, kept so: latent attention without rotary dims
(GLM-5-Next's, whose config refuses any other)."""
VISION_SIZES = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
    depth=2, embed_dim=32, num_heads=2, head_dim=16, width=32, layers=2, heads=2,
)
"""Vision-tower geometry; image and patch sizes are kept (the processor depends on them)."""
PER_LAYER_CONFIG = "per_layer_config"
"""transformers' key for a heterogeneous config's per-layer values (not a dataclass field)."""
TOKEN_LITERAL = re.compile(r"""["'](<\|?[A-Za-z_][\w ]*\|?>|\[[A-Z_]{2,}\])["']""")
TOKEN_ATTRIBUTE = re.compile(r"tokenizer\.([a-z_]*token)\b")
TOKEN_ATTRIBUTE_DEFAULT = re.compile(r"""getattr\(tokenizer,\s*["']([a-z_]*token)["'],\s*["']([^"']+)["']\)""")
TOKEN_ATTRIBUTE_OPTIONAL = re.compile(r"""getattr\(tokenizer,\s*["']([a-z_]*token)["'],\s*None\)""")
"""A token the processor reads if the tokenizer has it (Gemma 4's audio tokens, whose
absence its processor refuses on every call)."""
TOKEN_CONSTANT = re.compile(r"""^\s+[A-Z_]*TOKEN\s*=\s*["']([^"']+)["']""", re.MULTILINE)
"""A token the processor class keeps as a constant (MiniMax-M3-VL's `IMAGE_TOKEN =
"]<]image[>["`), which a real checkpoint's tokenizer holds as one token."""


@dataclass(frozen=True)
class Override:
    """What one type needs beyond the generic shrink."""

    tokens: tuple[str, ...] = ()
    """Extra special tokens (e.g. a VQ codebook's image tokens)."""
    last_tokens: tuple[str, ...] = ()
    """Tokenizer attributes (`image_token`, ...) whose tokens get the vocabulary's last ids,
    in this order (where a model reads ranges of ids: Gemma 3n's)."""
    tokenizer_attributes: dict[str, str] = field(default_factory=dict)
    """Tokens the model looks up by their exact string (Emu3's `<image>`)."""
    sub_processors: dict[str, dict] = field(default_factory=dict)
    """Constructor kwargs per sub-processor attribute (`image_processor`, ...)."""
    sub_processor_classes: dict[str, str] = field(default_factory=dict)
    """transformers' class per sub-processor attribute, where the type's auto mappings name
    none (Nemotron-H-Omni's feature extractor is its Parakeet tower's)."""
    processor: dict[str, Any] = field(default_factory=dict)
    """Constructor kwargs of the processor itself."""
    configure: Callable[[Any, Any], None] | None = None
    """`configure(config, tokenizer)`, after the generic shrink."""
    config_tokens: dict[str, str] = field(default_factory=dict)
    """Config token fields naming another token than the processor's namesake (set last)."""
    chat_placeholders: dict[str, str] = field(default_factory=dict)
    """What the checkpoint's own chat template writes for one item, per modality, where it
    wraps the processor's token (`chat_placeholder` otherwise); `{name}` reads the processor's
    attribute `name`."""
    init_std: float = ZooSpec.init_std
    """Init scale, where the default leaves transformers' own float32 result too far from
    its float64 one to test parity (`ZooSpec.init_std`)."""
    text_settings: dict[str, Any] = field(default_factory=dict)
    """Text-config values its checkpoints hold where transformers' default differs, set
    before the shrink (LFM2-VL's short-convolution layers)."""
    beside_weights: Callable[[Path], None] | None = None
    """Writes the files its checkpoints hold beside the weights into the checkpoint
    directory, where its class's `from_pretrained` reads them (`ZooSpec.beside_weights`)."""


EMU3_CODEBOOK = 16
LFM2_LAYERS = 32
LFM2_CONV_THEN_ATTENTION = dict(layer_types=["conv", "full_attention"] * (LFM2_LAYERS // 2),
                                full_attn_idxs=list(range(1, LFM2_LAYERS, 2)))
"""LFM2-VL's checkpoints put short convolutions between its attention layers, where
transformers' default config attends in every layer; over its default 32 layers, the
shrink keeps one of each kind, in this order."""
MOBILENETV5_CHANNELS = 0.125
"""timm's channel multiplier for Gemma 3n's MobileNetV5 tower."""
GEMMA3N_MEDIA_TOKENS = ("eoi_token", "image_token", "eoa_token", "audio_token")
"""Gemma 3n's image range (its checkpoints' `<end_of_image>` 262144, `<image_soft_token>`
262145, of 128 ids), then its audio range (262272, 262273, of 128), at the vocabulary's end."""


def _emu3(config, tokenizer) -> None:
    """Emu3 maps VQ codes to `<|visual token NNNNNN|>` vocabulary entries by name."""
    config.vocabulary_map = dict(tokenizer.get_vocab())
    vq = config.vq_config
    for name, value in dict(
        codebook_size=EMU3_CODEBOOK, embed_dim=4, latent_channels=4, base_channels=32,
        channel_multiplier=[1, 1, 1, 1], num_res_blocks=1, attn_resolutions=[], hidden_size=32,
    ).items():
        setattr(vq, name, value)


PERCEPTION_LM_TILE = 64
"""Perception LM's tile side: 4x4 patches of 16 px, pooled 2x2, per tile."""


def _perception_lm(config, tokenizer) -> None:
    """Its default tower is timm's ResNet-50 (no `embed_dim`); real checkpoints use PE-Core."""
    from transformers import TimmWrapperConfig

    config.vision_config = TimmWrapperConfig(
        architecture="vit_pe_core_tiny_patch16_384",
        model_args=dict(embed_dim=32, depth=2, num_heads=2, img_size=PERCEPTION_LM_TILE),
    )
    config.projector_pooling_ratio = 2


def _gemma3n(config, tokenizer) -> None:
    """Its tower is timm's MobileNetV5 encoder, whose width no config field sets: it always
    gives the default 2048 features, which the shrink's width would not match. Its blocks
    are thinned instead (300M parameters to 16M).

    Its forward reads ranges of ids, as its checkpoints lay them out: the vocabulary's last
    ids are media tokens, which its image and audio embedders embed (an item's end marker
    and its soft token), and which read no per-layer embedding of their own. The shrink
    keeps that layout, two ids per range (`GEMMA3N_MEDIA_TOKENS`)."""
    vision = config.vision_config
    vision.hidden_size = type(vision)().hidden_size
    vision.model_args = dict(channel_multiplier=MOBILENETV5_CHANNELS)
    ids = tokenizer.convert_tokens_to_ids([getattr(tokenizer, name) for name in GEMMA3N_MEDIA_TOKENS])
    if ids != list(range(len(tokenizer) - len(ids), len(tokenizer))):
        raise ValueError(f"Gemma 3n's media tokens must take the vocabulary's last ids (`last_tokens`), not {ids}")
    config.vision_config.vocab_offset, config.audio_config.vocab_offset = ids[0], ids[2]
    config.vision_config.vocab_size = config.audio_config.vocab_size = 2
    config.text_config.vocab_size_per_layer_input = ids[0]


def _cohere_compass(config, tokenizer) -> None:
    """Its default config names no RoPE parameters, though its rotary embedding reads
    them per layer type (transformers warns "no RoPE parameters were found")."""
    text = config.get_text_config()
    shared = {"rope_type": "default", "rope_theta": 10000.0, **(text.rope_parameters or {})}
    if not set(shared) & set(text.layer_types):
        text.rope_parameters = {kind: dict(shared) for kind in set(text.layer_types)}


def _aria(config, tokenizer) -> None:
    """Its default tower is Idefics3's (224 px, 32 px patches), whose patch counts the
    projector's `patch_to_query_dict` does not know; Aria's checkpoints use 14 px patches."""
    config.vision_config.patch_size = 14
    config.vision_config.image_size = ARIA_IMAGE_SIDE


ARIA_IMAGE_SIDE = 490
"""35x35 patches of 14 px: one of the two counts Aria's projector maps to queries (128)."""


LLAMA4_PROJECTOR_WIDTH = 48
"""Narrower than the text model, as in Llama 4's checkpoints (4096 against Scout's 5120):
its projector, outside `get_image_features`, widens the rows to the text model's."""


def _llama4(config, tokenizer) -> None:
    """Its vision MLP takes the pixel-shuffled patches (the tower's width over the shuffle
    ratio squared) and the projector that MLP's output; Llama 4's checkpoints tie these
    widths (1408 / 0.5**2 = 5632; 4096 throughout the projector), its default config does
    not (a `vision_output_dim` of 7680 against projector widths of 4096)."""
    vision = config.vision_config
    vision.intermediate_size = round(vision.hidden_size / vision.pixel_shuffle_ratio**2)
    vision.projector_input_dim = vision.projector_output_dim = vision.vision_output_dim = LLAMA4_PROJECTOR_WIDTH


STEP3P7_WINDOW = 8
"""Tokens in the sliding window of the shrunk Step-3.7's sliding layer: shorter than the
sweep's prompts, so the window is exercised."""


def _step3p7(config, tokenizer) -> None:
    """Its default config names no sliding window and no sliding layer, though its text
    model always builds a sliding-window mask (transformers raises without a window);
    Step-3.7's checkpoints interleave sliding and full attention."""
    text = config.get_text_config()
    text.sliding_window = STEP3P7_WINDOW
    text.layer_types = ["sliding_attention", *text.layer_types[1:]]


def _phi4_multimodal(config, tokenizer) -> None:
    """Its audio encoder's convolution channels equal its width in Phi-4-multimodal's
    checkpoint (1024 throughout), which the generic shrink narrows alone; its depth is
    `num_blocks`, a name the shrink does not know."""
    audio = config.audio_config
    audio.ext_pw_out_channel = audio.depthwise_separable_out_channel = audio.nemo_conv_channels = audio.hidden_size
    audio.num_blocks = VISION_SIZES["num_hidden_layers"]


def _deepseek_ocr2(config, tokenizer) -> None:
    """Its SAM tower's last downsampling convolution feeds its encoder (896 wide in
    DeepSeek-OCR-2's checkpoint, as that encoder is); its default config names no
    experts-per-token count and no layer kinds (its checkpoint's first layer is dense, the
    rest mixture-of-experts)."""
    sam, encoder = config.vision_config.sam_config, config.vision_config.encoder_config
    sam.downsample_channels = [2 * encoder.hidden_size, encoder.hidden_size]
    text = config.text_config
    text.num_experts_per_tok = TEXT_SIZES["num_experts_per_tok"]
    text.mlp_layer_types = ["dense", *["sparse"] * (text.num_hidden_layers - 1)]


def _muse_glimmer(config, tokenizer) -> None:
    """Its adapter takes the tower's pixel-shuffled rows: the tower's width times its merge
    square (1536 x 4 = 6144 in its checkpoint), not a width the shrink follows."""
    tower = config.vision_config
    config.out_hidden_size = tower.hidden_size * tower.merge_size**2
    config.projector_hidden_size = config.text_config.hidden_size


VISION_MARKED_IMAGE = {"image": "{vision_start_token}{image_token}{vision_end_token}"}
"""An image as Qwen-VL-style templates write it: bare, two images in a row would read as one
span to the model's M-RoPE positions."""
ITEM_MARKED = {m: f"{{{m}_start_token}}{{{m}_token}}{{{m}_end_token}}" for m in ("image", "video")}
"""Each item between its modality's own start and end tokens (Ernie 4.5 VL, HunYuan-VL)."""
GLM4V_CHAT = Override(
    tokens=("<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>", "<|end_of_video|>"),
    chat_placeholders={"image": "<|begin_of_image|>{image_token}<|end_of_image|>",
                       "video": "<|begin_of_video|>{video_token}<|end_of_video|>"},
)
"""GLM-4V's template marks each item: bare, two images read as one span, and its processor
types a video's tokens by the video markers around them."""


OVIS2_INDICATORS = ("<IMG_START>", "<IMG_GRID>", "<IMG_COL>", "<IMG_ROW>", "<IMG_END>")
"""The visual indicator tokens its processor writes around and between an image's tiles,
in the order its config lists their ids (its checkpoints: 151666-151670)."""


def _ovis2(config, tokenizer) -> None:
    """Its top level repeats the text model's width and vocabulary, and names its visual
    indicators by id, which the shrink's tokenizer numbers otherwise."""
    config.hidden_size = config.text_config.hidden_size
    config.vocab_size = config.text_config.vocab_size
    config.visual_indicator_token_ids = tokenizer.convert_tokens_to_ids(list(OVIS2_INDICATORS))


GRANITE4_VISION_DOWNSAMPLE = "1/2"
"""Queries over window side of its Q-Former projectors: 2x2 patches to one, as its four
spatial-offset projectors take them."""
PINPOINTS_224 = [[224, 448], [448, 224], [448, 448]]
"""Tile layouts in 224 px tiles, for an any-resolution processor whose default tile is
224 px but whose default layouts (and its config's) are 336 px multiples: Granite 4
Vision's, LLaVA-NeXT-Video's, whose images transformers could not then pack."""


def _pinpoints_224(config, tokenizer) -> None:
    config.image_grid_pinpoints = PINPOINTS_224


def _granite4_vision(config, tokenizer) -> None:
    """Its default config names no deepstack map and no downsample rate, both of which its
    model requires, and injects spatial features at decoder layers 12-21: the recipe maps
    two tower layers and four spatial groups to six decoder layers, one each, as its
    checkpoints do. Its SigLIP tower has no class token to drop ("full" features)."""
    config.downsample_rate = GRANITE4_VISION_DOWNSAMPLE
    config.vision_feature_select_strategy = "full"
    _pinpoints_224(config, tokenizer)
    config.text_config.num_hidden_layers = 6
    config.deepstack_layer_map = [(-1, 0), (1, 1)]
    config.spatial_target_layers = [2, 3, 4, 5]
    qformer, width = config.qformer_config, config.vision_config.hidden_size
    qformer.hidden_size = qformer.encoder_hidden_size = width


QWEN4_EXP_INDEXER = dict(indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=32, indexer_budget=8, indexer_compress_ratio=4)
"""Its QSA indexer, which its model builds for every indexed layer though its default
config leaves the indexer's fields None (`None // None` on building): blocks of 4
tokens, 8 tokens kept, so that the sweep's prompts attend sparsely."""


def _qwen4_exp(config, tokenizer) -> None:
    for name, value in QWEN4_EXP_INDEXER.items():
        setattr(config.text_config, name, value)


NEMOTRON_H_OMNI_AUDIO_PROJECTION = 64
"""The width of Nemotron-H-Omni's audio projector between its Parakeet tower and the text
model, a field its checkpoints add to the Parakeet config (`projection_hidden_size`)."""


def _nemotron_h_omni(config, tokenizer) -> None:
    """Its default config has no audio tower (`audio_config` None: no audio branch), which
    its checkpoints have: a Parakeet encoder, read as theirs (no attention bias, unscaled
    input) with the projector's fields they add."""
    from transformers import ParakeetEncoderConfig

    audio = ParakeetEncoderConfig(attention_bias=False, scale_input=False)
    shrink(audio, VISION_SIZES)
    audio.projection_hidden_size, audio.projection_bias = NEMOTRON_H_OMNI_AUDIO_PROJECTION, False
    config.audio_config = audio


QWEN_OMNI_MARKERS = {"vision_start": "vision_bos", "vision_end": "vision_eos", "audio_start": "audio_bos", "audio_end": "audio_eos"}
"""The Qwen-Omni thinkers' config fields (`<field>_token_id`), which their M-RoPE reads, and
the processor token each names (`<token>_token`): their checkpoints' thinker configs hold
all four, their default configs some, at ids of the real vocabulary."""
QWEN_OMNI_ITEMS = {"image": "{vision_bos_token}{image_token}{vision_eos_token}",
                   "video": "{vision_bos_token}{video_token}{vision_eos_token}",
                   "audio": "{audio_bos_token}{audio_token}{audio_eos_token}"}
"""Each item between its modality's markers, as its checkpoints' chat template writes it."""


def _mark_thinker_items(config, tokenizer) -> None:
    thinker = config.thinker_config
    for field_name, token in QWEN_OMNI_MARKERS.items():
        setattr(thinker, f"{field_name}_token_id", tokenizer.convert_tokens_to_ids(getattr(tokenizer, f"{token}_token")))


def _qwen3_omni_moe(config, tokenizer) -> None:
    """Its talker's decoder builds a shared expert, and its talker reads the vision tower's
    merge size, both of which its default config lacks (its checkpoints hold them): the
    routed experts' width, and the thinker's tower's merge."""
    talker = config.talker_config
    talker.text_config.shared_expert_intermediate_size = talker.text_config.moe_intermediate_size
    talker.spatial_merge_size = config.thinker_config.vision_config.spatial_merge_size
    _mark_thinker_items(config, tokenizer)


def _no_speakers(directory: Path) -> None:
    """Its speaker file (`spk_dict.pt`), which its whole model's `from_pretrained` loads:
    empty, as its thinker, which writes the text, reads no speaker."""
    import torch

    torch.save({}, directory / "spk_dict.pt")


RECIPE_OVERRIDES: dict[str, Override] = {
    "aria": Override(sub_processors={"image_processor": dict(max_image_size=ARIA_IMAGE_SIDE)}, configure=_aria),
    "cohere_compass": Override(configure=_cohere_compass, chat_placeholders=VISION_MARKED_IMAGE),
    **dict.fromkeys(("qwen3_5", "qwen3_5_moe"), Override(chat_placeholders=VISION_MARKED_IMAGE)),
    "cosmos3_edge": Override(chat_placeholders={
        **VISION_MARKED_IMAGE, "video": "{vision_start_token}{video_token}{vision_end_token}"}),
    # its model scatters image features at `<|patch|>` (real checkpoints' `image_token_index`);
    # its processor's `image_token` is the `<|image|>` that closes each image's tiles
    "llama4": Override(configure=_llama4, config_tokens={"image_token_index": "<|patch|>"}),
    # its default 384 px tiles are no multiple of the tower's 14 px patches; checkpoints use 448
    # and at most 4 tiles (of 256 tokens) per image, so two images fit the parity engines' 4096
    "qianfan_ocr": Override(sub_processors={"image_processor": dict(size={"height": 448, "width": 448}, max_patches=4)}),
    "perception_lm": Override(
        sub_processors={
            "image_processor": dict(tile_size=PERCEPTION_LM_TILE, max_num_tiles=4, size={"height": PERCEPTION_LM_TILE, "width": PERCEPTION_LM_TILE}),
            "video_processor": dict(size={"height": PERCEPTION_LM_TILE, "width": PERCEPTION_LM_TILE}),
        },
        processor=dict(patch_size=16, pooling_ratio=2),
        configure=_perception_lm,
    ),
    # its default draws timestamps on frames with a font file no offline machine has
    "ernie4_5_vl_moe": Override(sub_processors={"video_processor": dict(draw_on_frames=False)}, chat_placeholders=ITEM_MARKED),
    "emu3": Override(
        tokens=("<|extra_200|>", *(f"<|visual token {i:06d}|>" for i in range(EMU3_CODEBOOK))),
        tokenizer_attributes={"image_token": "<image>"},
        # 8x8 to 16x16 latent codes per image instead of 64x64 and more (min 512x512 px)
        sub_processors={"image_processor": dict(min_pixels=64 * 64, max_pixels=128 * 128)},
        configure=_emu3,
    ),
    # its processor takes the tokenizer's `audio_token` over its own default, which its chat
    # template writes (`<|AUDIO|>`, as real checkpoints' tokenizers leave it)
    "qwen2_audio": Override(tokenizer_attributes={"audio_token": "<|AUDIO|>", "audio_bos_token": "<|audio_bos|>", "audio_eos_token": "<|audio_eos|>"}),
    "step3p7": Override(configure=_step3p7),
    "gemma3n": Override(configure=_gemma3n, last_tokens=GEMMA3N_MEDIA_TOKENS, init_std=0.125),
    # its image atoms are `<IMG_ATOM>` (the config's `image_token_id`; `<image>` is the prompt's
    # marker); 224 px tiles give its default 256 atoms per tile (384 px is no multiple of 14)
    "ovis2": Override(tokens=OVIS2_INDICATORS, configure=_ovis2, config_tokens={"image_token_id": "<IMG_ATOM>"},
                      sub_processors={"image_processor": dict(size={"height": 224, "width": 224})}),
    "phi4_multimodal": Override(configure=_phi4_multimodal),
    "qwen3_omni_moe": Override(configure=_qwen3_omni_moe, chat_placeholders=QWEN_OMNI_ITEMS),
    "qwen2_5_omni": Override(configure=_mark_thinker_items, chat_placeholders=QWEN_OMNI_ITEMS, beside_weights=_no_speakers),
    "lfm2_vl": Override(text_settings=LFM2_CONV_THEN_ATTENTION),
    "deepseek_ocr2": Override(configure=_deepseek_ocr2),
    "muse_glimmer": Override(configure=_muse_glimmer),
    "qwen4_exp": Override(configure=_qwen4_exp),
    # its video processor has no normalization default, which checkpoints store (its image processor's: CLIP's)
    "nemotron_h_omni": Override(
        configure=_nemotron_h_omni, sub_processor_classes={"feature_extractor": "ParakeetFeatureExtractor"},
        sub_processors={"video_processor": dict(norm_mean=list(OPENAI_CLIP_MEAN), norm_std=list(OPENAI_CLIP_STD))},
    ),
    # its processor writes 256 tokens per image, what its tower gives at its checkpoints' 1024 px
    "got_ocr2": Override(sub_processors={"image_processor": dict(size={"height": 1024, "width": 1024})}),
    # templates that mark each item: bare, two images in a row read as one span
    "hunyuan_vl": Override(chat_placeholders={"image": ITEM_MARKED["image"]}),
    "paddleocr_vl": Override(tokens=("<|IMAGE_START|>", "<|IMAGE_END|>"),
                             chat_placeholders={"image": "<|IMAGE_START|>{image_token}<|IMAGE_END|>"}),
    **dict.fromkeys(("glm4v", "glm4v_moe", "glm46v"), GLM4V_CHAT),
    # its CLIP tower's class token, which the processor's default (0) leaves out of each tile's count
    "llava_next_video": Override(sub_processors={"image_processor": dict(image_grid_pinpoints=PINPOINTS_224)},
                                 processor=dict(num_additional_image_tokens=1), configure=_pinpoints_224),
    "granite4_vision": Override(
        sub_processors={"image_processor": dict(image_grid_pinpoints=PINPOINTS_224)},
        processor=dict(downsample_rate=GRANITE4_VISION_DOWNSAMPLE, vision_feature_select_strategy="full"),
        configure=_granite4_vision,
        # six levels added into the decoder: at 0.25 its float32 prompt log-probs sat 1.1e-3 from
        # float64 (every seed); at 0.125, 1.7e-5
        init_std=0.125,
    ),
}


def processor_class(model_type: str):
    import transformers
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    name = PROCESSOR_MAPPING_NAMES.get(model_type)
    return getattr(transformers, name) if isinstance(name, str) else None


def generation_class(model_type: str):
    """The class a transformers user generates with for `model_type`, or None."""
    from ..hf_classes import multimodal_generation_class

    return multimodal_generation_class(model_type)


def tokens_named_by(processor_cls) -> tuple[list[str], dict[str, str]]:
    """(special tokens, tokenizer attributes) the processor's module asks the tokenizer for."""
    source = inspect.getsource(inspect.getmodule(processor_cls))
    attributes = {name: f"<|{name}|>" for name in TOKEN_ATTRIBUTE.findall(source) if name not in ("pad_token", "bos_token", "eos_token", "unk_token")}
    attributes.update({name: default for name, default in TOKEN_ATTRIBUTE_DEFAULT.findall(source)})
    attributes.update({name: f"<|{name}|>" for name in TOKEN_ATTRIBUTE_OPTIONAL.findall(source) if name not in attributes})
    literals = [t for t in [*TOKEN_LITERAL.findall(source), *TOKEN_CONSTANT.findall(source)] if "{" not in t]
    return list(dict.fromkeys([*attributes.values(), *literals])), attributes


MROPE_SECTIONS = (4, 6, 6)
"""M-RoPE's temporal/height/width split of head_dim 32's 16 rotary frequencies."""

SECTIONS_FALLBACK = re.compile(r"""get\(\s*["']mrope_section["']\s*,\s*[\[(]([\d,\s]+)[\])]""")
"""The sections a model's code falls back to where its config declares none
(`rope_parameters.get("mrope_section", [22, 22, 20])`)."""


def mrope_sections(text: Any, default: list[int] | None = None) -> list[int]:
    """`MROPE_SECTIONS` scaled to the rotary half-dimension (partial rotary included). Where
    the default sections are equal in pairs that those are not, the default scaled instead: a
    model may rely on them being equal (Ernie 4.5 VL interleaves height and width, 22/22/20)."""
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    partial = getattr(text, "partial_rotary_factor", None) or text.rope_parameters.get("partial_rotary_factor", 1.0)
    half = int(head_dim * partial) // 2
    sections = [section * half // sum(MROPE_SECTIONS) for section in MROPE_SECTIONS]
    if not default or len(default) != len(sections) or _keeps_equal_pairs(default, sections):
        return sections
    sections = [section * half // sum(default) for section in default]
    # the rounding's rest goes to a section equal to no other, so equal pairs stay equal
    unpaired = [i for i, section in enumerate(default) if default.count(section) == 1] or [len(default) - 1]
    sections[unpaired[-1]] += half - sum(sections)
    return sections


def _keeps_equal_pairs(default: list[int], sections: list[int]) -> bool:
    return all(sections[i] == sections[j] for i in range(len(default)) for j in range(i) if default[i] == default[j])


def default_mrope_sections(model_type: str, text: Any) -> list[int] | None:
    """The sections the default config declares, or else the ones the generation class's
    module, or its text model's, falls back to."""
    declared = (getattr(text, "rope_parameters", None) or {}).get("mrope_section")
    if declared:
        return list(declared)
    for source in _model_sources(model_type, text):
        if match := SECTIONS_FALLBACK.search(source):
            return [int(section) for section in match.group(1).split(",") if section.strip()]
    return None


def _model_sources(model_type: str, text: Any) -> list[str]:
    import transformers
    from transformers.models.auto import modeling_auto

    classes = [generation_class(model_type), getattr(transformers, str(modeling_auto.MODEL_MAPPING_NAMES.get(text.model_type)), None)]
    return [inspect.getsource(inspect.getmodule(cls)) for cls in classes if cls is not None]


def _reads_mrope_sections(model_type: str, text: Any) -> bool:
    """Whether the default config carries `mrope_section` (its config validates the sum:
    Cosmos3-Edge), or the generation class's module, or its text model's (GLM-4.6V reuses
    GLM-4V's text model), reads it."""
    if "mrope_section" in (getattr(text, "rope_parameters", None) or {}):
        return True
    return any("mrope_section" in source for source in _model_sources(model_type, text))


def align_towers(config: Any, processor: Any) -> None:
    """Make each tower's image and patch size (an audio tower's mel bins or waveform frame)
    the processor's, where the defaults disagree."""
    image_processor = getattr(processor, "image_processor", None)
    height = _output_height(image_processor)
    # Step-3.7's `patch_size` is its local crop's side (504 px); its ViT patch is `vision_patch_size`
    patch = getattr(image_processor, "vision_patch_size", None) or getattr(image_processor, "patch_size", None)
    patch = patch if isinstance(patch, int) else None
    extractor = getattr(processor, "feature_extractor", None)
    mel_bins = getattr(extractor, "feature_size", None)
    frame = getattr(extractor, "audio_samples_per_token", None)
    for name, sub in sub_configs(config).items():
        if isinstance(getattr(sub, "num_mel_bins", None), int) and isinstance(mel_bins, int):
            sub.num_mel_bins = mel_bins  # an audio tower reads the extractor's mel bins
        if isinstance(getattr(sub, "audio_samples_per_token", None), int) and isinstance(frame, int):
            # one that embeds raw waveform frames, its width their length (Gemma 4 Unified: 640)
            sub.audio_samples_per_token = frame
        # a second tower named by its view reads that view's size (DeepSeek-VL-Hybrid's
        # `high_res_vision_config`, the processor's `high_res_size`)
        view = name.removesuffix("vision_config") if name.endswith("vision_config") else ""
        view_height = _side(getattr(image_processor, f"{view}size", None)) if view else None
        if isinstance(getattr(sub, "image_size", None), int) and isinstance(view_height or height, int):
            sub.image_size = view_height or height
        if isinstance(getattr(sub, "patch_size", None), int) and patch:
            sub.patch_size = patch


def _output_height(image_processor: Any) -> int | None:
    """The side of the images the processor gives the tower: its crop where it crops (CLIP),
    else its size's height or shortest edge. None for a dynamic-resolution processor, whose
    `shortest_edge`/`longest_edge` are pixel counts (Qwen2-VL's family: PaddleOCR-VL)."""
    if getattr(image_processor, "do_center_crop", False) and _side(getattr(image_processor, "crop_size", None)):
        return _side(image_processor.crop_size)
    return _side(getattr(image_processor, "size", None))


def _side(size: Any) -> int | None:
    size = (size if size is None or isinstance(size, dict) else vars(size)) or {}
    if size.get("longest_edge") is not None and size.get("height") is None:
        return None
    return size.get("height") or size.get("shortest_edge")


DEPTH_FIELDS = ("num_hidden_layers", "depth")
"""A config's layer count: a text model's or CLIP-style tower's, or a Qwen-style tower's."""
LAYER_INDEX_FIELDS = ("global_attn_indexes", "fullatt_block_indexes", "deepstack_visual_indexes")
"""Lists of layer indices which must name layers the shrunk depth has: a SAM tower's
global-attention layers (2, 5, 8, 11 by default), a Qwen2.5-VL-style tower's
full-attention blocks (7, 15, 23, 31: past the depth, every block windowed), a
Qwen3-VL-style tower's deepstack layers (8, 16, 24: past the depth, no deepstack
features at all)."""
LAYER_INDEX_SCALARS = ("insert_layer_id",)
"""A layer index after which a tower does more, which must name a layer the shrunk depth
has: MiniCPM-V's ViT merger runs after layer 6 of 27. Past the shrunk depth it never ran,
while `get_image_features` still halved each image's grid, so an image after the first
was read from another image's rows."""


def shrink(config: Any, sizes: dict) -> None:
    """Set each field of `sizes` that `config` has (an expert field only where it is set);
    lists with one entry per layer (`layer_types`, `mlp_layer_types`, ...) are cut to the
    new depth, keeping one layer of each kind first (a hybrid model keeps its
    full-attention layer). A heterogeneous config's per-layer values follow
    (`shrink_per_layer_config`)."""
    per_layer = _per_layer_overrides(config)
    old = {name: config._getattr_without_heterogeneous_validation(name) for name in per_layer_attributes(per_layer)}
    old_layer_types = list(getattr(config, "layer_types", None) or [])
    if per_layer is not None:
        config.per_layer_config = None  # read and written as one global config meanwhile
    depth_field = next((name for name in DEPTH_FIELDS if isinstance(getattr(config, name, None), int)), None)
    depth = getattr(config, depth_field) if depth_field else None
    vocabularies = vocabulary_twins(config) if "vocab_size" in sizes else []
    for name, value in sizes.items():
        if name in EXPERT_FIELDS and getattr(config, name, None) is None:
            continue  # a dense model (Gemma 4's): an expert count would make vLLM take it for MoE
        if name in ZERO_KEPT and getattr(config, name, None) == 0:
            continue
        if hasattr(config, name) and not isinstance(getattr(config, name), (dict, list)) and not _derived(config, name):
            setattr(config, name, value)
    for name in vocabularies:
        setattr(config, name, config.vocab_size)
    layers = getattr(config, depth_field) if depth_field else None
    if isinstance(depth, int) and isinstance(layers, int):
        for name, value in list(vars(config).items()):
            if isinstance(value, list) and len(value) == depth and not name.startswith("_"):
                kinds = list(dict.fromkeys(v for v in value if isinstance(v, (str, int, bool))))
                setattr(config, name, (kinds + value)[:layers] if len(kinds) == len(set(map(repr, value))) else value[:layers])
        for name in LAYER_INDEX_FIELDS:
            indexes = getattr(config, name, None)
            if isinstance(indexes, (list, tuple)) and indexes and max(indexes) >= layers:
                setattr(config, name, [layers - 1])  # the last layer keeps the kind
        for name in LAYER_INDEX_SCALARS:
            index = getattr(config, name, None)
            if isinstance(index, int) and index >= layers:
                setattr(config, name, layers - 1)
        if (getattr(config, KV_SHARED_LAYERS, 0) or 0) > 0:
            layers = share_second_half_kv(config)
    if per_layer:
        config.per_layer_config = shrink_per_layer_config(
            per_layer, old, {name: getattr(config, name) for name in old}, old_layer_types, list(getattr(config, "layer_types", None) or []), layers
        )


def _derived(config: Any, name: str) -> bool:
    """Whether `name` is a read-only property the config derives from other fields
    (Falcon's `head_dim`, its width over its heads), which follows their shrink."""
    attribute = getattr(type(config), name, None)
    return isinstance(attribute, property) and attribute.fset is None


def share_second_half_kv(config: Any) -> int:
    """Repeat the shrunk decoder's layers once and let the repeats attend over the first
    half's keys and values (`num_kv_shared_layers`), each its own kind's, as Gemma 3n's
    and Gemma 4's small checkpoints share their last layers'. Cut to one layer per kind,
    no shared layer had an earlier one of its kind (`'sliding_attention' is not in list`).
    Returns the new depth."""
    depth = config.num_hidden_layers
    for name, value in list(vars(config).items()):
        if isinstance(value, list) and len(value) == depth and not name.startswith("_"):
            setattr(config, name, value * 2)
    config.num_hidden_layers = 2 * depth
    setattr(config, KV_SHARED_LAYERS, depth)
    return 2 * depth


def vocabulary_twins(config: Any) -> list[str]:
    """Other `vocab_size_*` fields sized to the vocabulary or its first ids (Gemma 4's
    per-layer embedding table, `vocab_size_per_layer_input`, covers all of it; Gemma 3n's
    the ids below its media tokens): they shrink with it, or that table keeps its full
    262k rows, a gigabyte in a tiny checkpoint."""
    vocab_size = getattr(config, "vocab_size", None)
    return [
        name for name, value in vars(config).items()
        if name.startswith("vocab_size_") and isinstance(vocab_size, int) and isinstance(value, int) and value <= vocab_size
    ]


def _per_layer_overrides(config: Any) -> dict[int, dict[str, Any]] | None:
    """A heterogeneous config's per-layer overrides (transformers' `per_layer_config`), or None."""
    spec = vars(config).get("_heterogeneity_spec")
    return None if spec is None else {i: dict(o) for i, o in spec.per_layer_overrides.items()}


def per_layer_attributes(per_layer: dict[int, dict[str, Any]] | None) -> set[str]:
    return {name for overrides in (per_layer or {}).values() for name in overrides if name != "skip"}


def shrink_per_layer_config(
    per_layer: dict[int, dict[str, Any]], old: dict, new: dict, old_layer_types: list, new_layer_types: list, layers: int
) -> dict[int, dict[str, Any]]:
    """Per-layer overrides for the shrunk depth. A new layer takes the overrides of the
    first old layer of its type (`layer_types`; by index without them), and a shrunk
    size keeps its ratio to the global value (Gemma 4's full-attention head_dim, twice the
    sliding layers', stays twice the new one)."""
    result = {}
    for index in range(layers):
        kind = new_layer_types[index] if index < len(new_layer_types) else None
        source = old_layer_types.index(kind) if kind in old_layer_types else index
        overrides = {}
        for name, value in per_layer.get(source, {}).items():
            scaled = isinstance(value, int) and isinstance(old.get(name), int) and old[name] and new.get(name) != old[name]
            overrides[name] = new[name] * value // old[name] if scaled else value
        if overrides:
            result[index] = overrides
    return result


def default_config(model_type: str) -> Any:
    """transformers' own default config of `model_type` (`AutoConfig` builds another class
    where vLLM registered its own under the name, as it does on loading such a checkpoint)."""
    return transformers_config_class(model_type)()


def use_own_text_config(config: Any, model_type: str) -> None:
    """Give a type whose default text config is borrowed (Granite4-Vision's is Llama's) the
    `<type>_text` config its own text model reads, as its real checkpoints do."""
    own = transformers_config_class(f"{model_type}_text")
    text = getattr(config, "text_config", None)
    if own is not None and text is not None and text.model_type != own.model_type:
        config.text_config = own()


def build_absent_towers(config: Any) -> None:
    """Give a type whose default config has no towers (Gemma 4: `vision_config` and
    `audio_config` are None, so its model has none) each tower's default config, as its
    real checkpoints have them."""
    for name, cls in getattr(config, "sub_configs", {}).items():
        # `AutoConfig` (a text model any config may fill) cannot be built without a type
        if getattr(config, name, None) is None and isinstance(cls, type) and issubclass(cls, PreTrainedConfig):
            setattr(config, name, cls())


def rederived(config: Any) -> Any:
    """`config` rebuilt from its declared fields, so those it derives follow the shrink
    (DeepSeek-V3's MLA `qk_head_dim` and rotary `head_dim`); a heterogeneous config keeps
    its shrunk per-layer values (Gemma 4's would be rebuilt from its defaults)."""
    import dataclasses

    if not dataclasses.is_dataclass(config):
        return config
    kept = {f.name for f in dataclasses.fields(config)} | {PER_LAYER_CONFIG}
    values = {k: v for k, v in config.to_dict().items() if k in kept}
    # sub-configs handed back as themselves: DBRX's refuse the keys `to_dict` adds to theirs
    values.update({k: v for k, v in vars(config).items() if k in values and isinstance(v, PreTrainedConfig)})
    return type(config)(**values)


def follow_tower_widths(config: Any, widths: dict[str, int | None]) -> None:
    """Top-level `*hidden_size` fields that repeated a tower's width (Kimi-K2.5's
    `projection_hidden_size`) take its shrunk width."""
    for name, width in widths.items():
        new = getattr(getattr(config, name), "hidden_size", None)
        for field_name, value in list(vars(config).items()):
            if field_name.endswith("hidden_size") and isinstance(width, int) and value == width:
                setattr(config, field_name, new)


def follow_tower_layer_indexes(config: Any) -> None:
    """Top-level copies of a tower's layer index take its shrunk value: MiniCPM-V's config
    hands its own `insert_layer_id` down to the tower when it is built or loaded."""
    for name in LAYER_INDEX_SCALARS:
        if isinstance(getattr(config, name, None), int):
            shrunk = next((getattr(sub, name) for sub in sub_configs(config).values() if isinstance(getattr(sub, name, None), int)), None)
            if shrunk is not None:
                setattr(config, name, shrunk)


def clamp_feature_layers(config: Any) -> None:
    """Keep the hidden-state indices a projector reads (`vision_feature_layers`, VipLLaVA
    reads five down to -11) inside the shrunk tower: its depth + 1 states."""
    tower = next((c for n, c in sub_configs(config).items() if "vision" in n), None)
    depth = getattr(tower, "num_hidden_layers", None)
    if not isinstance(depth, int):
        return
    for name in ("vision_feature_layer", "vision_feature_layers"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            setattr(config, name, max(-depth - 1, min(depth, value)))
        elif isinstance(value, (list, tuple)):
            setattr(config, name, [max(-depth - 1, min(depth, v)) for v in value])


def sub_configs(config: Any) -> dict[str, Any]:
    return {name: getattr(config, name) for name in getattr(config, "sub_configs", {}) if getattr(config, name, None) is not None}


def tower_configs(config: Any, text: Any) -> list[Any]:
    """Every sub-config but the text model's, nested ones included (DeepSeek-OCR-2's vision
    config holds a SAM tower and a 4096-wide encoder, which left whole did not fit in memory)."""
    found = []
    for sub in sub_configs(config).values():
        if sub is not text:
            found += [sub, *tower_configs(sub, text)]
    return found


def make_config(model_type: str, text_settings: dict[str, Any] | None = None):
    """`text_settings`: text-config values a checkpoint of the type may hold instead of
    transformers' defaults, set before the shrink (as the original sizes they are)."""
    def make(tokenizer):
        config = default_config(model_type)
        use_own_text_config(config, model_type)
        build_absent_towers(config)
        text = config.get_text_config()
        for name, value in (text_settings or {}).items():
            setattr(text, name, value)
        widths = {name: getattr(sub, "hidden_size", None) for name, sub in sub_configs(config).items() if sub is not text}
        for sub in tower_configs(config, text):
            shrink(sub, VISION_SIZES)
        follow_tower_widths(config, widths)
        follow_tower_layer_indexes(config)
        shrink(text, dict(TEXT_SIZES, vocab_size=len(tokenizer)))
        fits_mrope = _reads_mrope_sections(model_type, text) and isinstance(getattr(text, "rope_parameters", None), dict)
        default_sections = default_mrope_sections(model_type, text) if fits_mrope else None
        if fits_mrope and "mrope_section" in text.rope_parameters:
            # before `rederived`: a config that validates the sections' sum (Cosmos3-Edge) is rebuilt there
            text.rope_parameters["mrope_section"] = mrope_sections(text, default_sections)
        if getattr(config, "text_config", None) is text:
            config.text_config = text = rederived(text)
        if fits_mrope:
            # after: a config whose default RoPE has no sections refuses the key when rebuilt
            # (PaddleOCR-VL), though its model reads them
            text.rope_parameters["mrope_section"] = mrope_sections(text, default_sections)
        # a whole model's towers may sit in the model it generates text with (Qwen2.5-Omni's thinker)
        delegate = text_generation_delegate(config)
        generating = [config] if delegate is None else [config, delegate.config]
        for sub in (sub for part in generating for sub in sub_configs(part).values()):
            for name in ("out_hidden_size", "projection_dim", "text_hidden_size", "output_dim"):
                if hasattr(sub, name):
                    setattr(sub, name, text.hidden_size)
        clamp_feature_layers(config)
        config.tie_word_embeddings = False
        override = RECIPE_OVERRIDES.get(model_type)
        if override is not None and override.configure is not None:
            override.configure(config, tokenizer)
        processor = make_processor(model_type)(tokenizer)
        for part in generating:
            align_towers(part, processor)
        point_token_fields(config, processor, tokenizer)
        for name, token in (override.config_tokens if override is not None else {}).items():
            setattr(config, name, tokenizer.convert_tokens_to_ids(token))
        return as_reloaded(config)

    return make


def as_reloaded(config: Any) -> Any:
    """`config` as it reads back from its saved form, so the weights are built to the sizes
    a load gives: a config may derive a size on load from fields the shrink left alone
    (Step-3.7's vision `intermediate_size`, recomputed from `mlp_ratio`). What its class
    derives rather than declares (`derived_attributes`) is derived again from the shrunk
    fields: saved, the value from before the shrink would win."""
    derived = derived_attributes(type(config))
    return type(config).from_dict({k: v for k, v in config.to_dict().items() if k not in derived})


def derived_attributes(cls: type) -> frozenset[str]:
    """The public attributes a config class sets in its `__post_init__` beyond its declared
    fields (MiniMax-M3-VL's `merged_hidden_size`: the text width times the merge square)."""
    import dataclasses

    if not dataclasses.is_dataclass(cls):
        return frozenset()
    declared = {f.name for f in dataclasses.fields(cls)}
    return frozenset(k for k in vars(cls()) if k not in declared and not k.startswith("_"))


def make_processor(model_type: str):
    def make(tokenizer):
        import transformers

        from .specs import chat_template

        cls = processor_class(model_type)
        parts = {}
        for name in cls.get_attributes():
            if name == "tokenizer":
                parts[name] = tokenizer
                continue
            override = RECIPE_OVERRIDES.get(model_type, Override())
            named = override.sub_processor_classes.get(name)
            cls_of_part = getattr(transformers, named) if named else _sub_processor_class(model_type, name)
            parts[name] = cls_of_part(**override.sub_processors.get(name, {}))
        settings = dict(settings_from_config(cls, model_type), **RECIPE_OVERRIDES.get(model_type, Override()).processor)
        processor = cls(**parts, **settings)
        match_patch_geometry(processor)
        if getattr(processor, "chat_template", None) is None:  # the generic one, with its tokens
            written = RECIPE_OVERRIDES.get(model_type, Override()).chat_placeholders
            image, video, audio = (chat_placeholder(processor, m, written.get(m, "")) for m in ("image", "video", "audio"))
            processor.chat_template = chat_template(image=image, video=video, audio=audio)
        return processor

    return make


def chat_placeholder(processor: Any, modality: str, written: str = "") -> str:
    """What a chat template emits for one item: `written` with the processor's attributes
    filled in, where a recipe gives it (`Override.chat_placeholders`); else the processor's
    `<modality>_placeholder_token` where it keeps one apart from the token it expands to
    (Qianfan-OCR: `<image>` becomes `<|context_image_token|>` x 256), else its `<modality>_token`."""
    if written:
        return written.format_map({name: getattr(processor, name) for name in re.findall(r"{(\w+)}", written)})
    for name in (f"{modality}_placeholder_token", f"{modality}_token"):
        value = getattr(processor, name, None)
        if isinstance(value, str) and value:
            return value
    return ""


def match_patch_geometry(processor: Any) -> None:
    """Give the video processor the image processor's spatial patch size where their
    defaults differ (Cohere Compass: 16 px against 14 px): one tower's patch embedding
    encodes both. Temporal patch and merge sizes stay the video processor's own
    (Ernie 4.5 VL's video processor requires 2 frames per patch, its images 1;
    VideoLLaMA3 merges video patches more than image patches)."""
    image, video = getattr(processor, "image_processor", None), getattr(processor, "video_processor", None)
    value = getattr(image, "patch_size", None)
    if isinstance(value, int) and isinstance(getattr(video, "patch_size", None), int):
        video.patch_size = value


def settings_from_config(processor_cls, model_type: str) -> dict:
    """The processor's unset settings that the model's config names (LLaVA's `patch_size`),
    as a real checkpoint's `processor_config.json` carries them."""
    config = default_config(model_type)
    levels = [config, *sub_configs(config).values()]
    unset = [name for name, p in inspect.signature(processor_cls.__init__).parameters.items() if p.default is None]
    found = {name: next((getattr(c, name) for c in levels if getattr(c, name, None) is not None), None) for name in unset}
    return {name: value for name, value in found.items() if isinstance(value, (int, str))}


UNNAMED_FEATURE_EXTRACTOR = "WhisperFeatureExtractor"
"""The feature extractor of an audio processor whose type no auto mapping names one for
(Music Flamingo's, which windows clips by the extractor's `chunk_length` as Audio Flamingo
3's does, for which transformers names Whisper's)."""


def _sub_processor_class(model_type: str, attribute: str):
    import transformers
    from transformers.models.auto import feature_extraction_auto, image_processing_auto, video_processing_auto

    mappings = {
        "image_processor": image_processing_auto.IMAGE_PROCESSOR_MAPPING_NAMES,
        "video_processor": video_processing_auto.VIDEO_PROCESSOR_MAPPING_NAMES,
        "feature_extractor": feature_extraction_auto.FEATURE_EXTRACTOR_MAPPING_NAMES,
        # transformers' processors name an audio feature extractor either way (Phi-4-multimodal)
        "audio_processor": feature_extraction_auto.FEATURE_EXTRACTOR_MAPPING_NAMES,
    }
    # a processor shared by several types (Glm4vProcessor for glm4v_moe) may list its
    # sub-processors under its own type only
    own_type = inspect.getmodule(processor_class(model_type)).__name__.split(".")[-2]
    names = mappings[attribute].get(model_type) or mappings[attribute].get(own_type)
    if isinstance(names, (tuple, list)):
        names = next((n for n in names if n), None)
    if isinstance(names, dict):
        names = next(iter(names.values()), None)
    if names is None and attribute == "feature_extractor":
        names = UNNAMED_FEATURE_EXTRACTOR
    return getattr(transformers, names)


def point_token_fields(config: Any, processor: Any, tokenizer: Any) -> None:
    """Set the config's `<name>_token_id`/`_token_index` fields to the processor's tokens."""
    for cfg in [config, *sub_configs(config).values()]:
        for name in list(vars(cfg)):
            match = re.fullmatch(r"(\w+?)_token_(id|index)", name)
            if not match:
                continue
            base = match.group(1)
            token_id = getattr(processor, f"{base}_token_id", None)
            token = getattr(processor, f"{base}_token", None) or getattr(tokenizer, f"{base}_token", None)
            if not isinstance(token_id, int) and isinstance(token, str):
                token_id = tokenizer.convert_tokens_to_ids(token)
            if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
                setattr(cfg, name, token_id)


def generic_spec(model_type: str, text_settings: dict[str, Any] | None = None) -> ZooSpec:
    cls = processor_class(model_type)
    special, attributes = tokens_named_by(cls)
    override = RECIPE_OVERRIDES.get(model_type, Override())
    attributes.update(override.tokenizer_attributes)
    special = list(dict.fromkeys([*special, *override.tokens, *override.tokenizer_attributes.values()]))
    # the tokenizer adds its attributes' tokens first, in their order, then the other tokens
    attributes = {name: token for name, token in attributes.items() if name not in override.last_tokens} | {
        name: attributes[name] for name in override.last_tokens}
    last = list(attributes.values())[-len(override.last_tokens):] if override.last_tokens else []
    special = [token for token in special if token not in last] + last
    return ZooSpec(
        name=f"sweep-{model_type}",
        make_config=make_config(model_type, {**override.text_settings, **(text_settings or {})}),
        make_processor=make_processor(model_type),
        special_tokens=special,
        tokenizer_attributes=attributes,
        servable=False,
        init_std=override.init_std,
        beside_weights=override.beside_weights,
        notes=f"Generic shrink of {model_type}'s default config and processor (scripts/sweep.py).",
    )


def build_sweep_model(model_type: str, directory, seed: int = 0):
    """Build the generic tiny checkpoint of `model_type` into `directory` (this interpreter)."""
    from .build import build_checkpoint

    stamp = {"sweep": model_type, "seed": seed}
    return build_checkpoint(generic_spec(model_type), directory, stamp, seed, generation_class(model_type))
