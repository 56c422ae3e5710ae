"""The zoo's LLaVA over other decoders: its CLIP tower and processor, its text model swapped
for transformers' default config of another text type, shrunk as the sweep shrinks text.

A VLM pairs a tower with whatever decoder its authors chose, and hf_bridge's decoder side
(attention, state slots, experts) is the same whichever tower feeds it. These checkpoints
check that side on decoders no VLM type in transformers ships yet (`scripts/backbones.py`,
BACKBONES.md; `tests/test_backbones.py`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from .shrink import TEXT_SIZES, rederived, shrink
from .specs import SPECS, ZooSpec

BACKBONE_SETTINGS: dict[str, dict[str, Any]] = {
    # Mamba heads that tile the shrunk width (2 x 64 = 8 x 16): the defaults fail the config's own
    # check; and an attention layer after the Mamba one, as their hybrid checkpoints have (the
    # defaults have none)
    "bamba": dict(mamba_n_heads=8, mamba_d_head=16, attn_layer_indices=[1]),
    "granitemoehybrid": dict(mamba_n_heads=8, mamba_d_head=16, layer_types=["mamba", "attention"]),
    "mamba2": dict(num_heads=8, head_dim=16, n_groups=1),
    # every other layer attends, as in its checkpoints: the default period (8) leaves two layers none
    "jamba": dict(attn_layer_offset=1, attn_layer_period=2),
    # a short convolution, then attention, as in its checkpoints: the default attends in every layer
    "lfm2": dict(layer_types=["conv", "full_attention"]),
    # the same, its second layer's MLP one of experts
    "lfm2_moe": dict(layer_types=["conv", "full_attention"], num_dense_layers=1),
    # query heads counted per layer, as its config allows: the default's list, derived before the
    # shrink, keeps the full size's 48 in every layer
    "laguna": dict(num_attention_heads_per_layer=[2, 4]),
    # more query heads than its sliding-window layers' key heads (twice the config's), as in its
    # checkpoints (64 query heads, 4 and 8 key heads): the shrink leaves 2 query heads over 4 key
    # heads, which transformers' repeat_kv cannot group
    "mimo_v2_flash": dict(num_attention_heads=4, num_key_value_heads=1),
    # top-2 routing among the shrunk experts, as its checkpoints route (the default names no count)
    "deepseek_v2": dict(num_experts_per_tok=2),
    # experts, as its checkpoints have (128, top-6, 2 shared, the first layer dense): the default
    # names no expert count, so transformers cannot build it
    "dots1": dict(n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1),
    # its checkpoints' attention settings (rope_theta kept in `attn_config`, which transformers'
    # attention reads and its default lacks; queries, keys and values clipped), and experts routed
    # top-2 of 4 (its checkpoints: top-4 of 16), narrowed as the shrink narrows other experts
    "dbrx": dict(attn_config=dict(kv_n_heads=1, rope_theta=10000.0, clip_qkv=8.0),
                 ffn_config=dict(ffn_hidden_size=48, moe_num_experts=4, moe_top_k=2)),
    # one global and one local layer, as its checkpoints alternate them: its config builds the
    # per-layer kinds from `attention_types` (24 layers by default), not from the layer count
    "gpt_neo": dict(attention_types=[[["global", "local"], 1]]),
    # the shrink's context length: its own field for it is `max_seq_len` (2048 by default)
    "mpt": dict(max_seq_len=4096),
    # its embeddings as wide as its layers, as in its checkpoints but the 350M (the default's 768
    # stays unshrunk beside the shrunk width, which transformers' own forward cannot multiply)
    "opt": dict(word_embed_proj_dim=64),
    # top-1 routing, the one its config accepts: the shrink's top-2 fails its own check
    "zaya": dict(num_experts_per_tok=1),
}
"""Text-config values set after the shrink, where the default shrunk would not build or
would lose a kind of layer its checkpoints have."""

CENTRED_NORM_BIASES = frozenset({"gpt2"})
"""Decoders whose norm biases are drawn around 0 (`ZooSpec.centred_norm_biases`): GPT-2's
every LayerNorm has a bias, near 1 a constant that drowned its input, so every prompt's
greedy tokens repeated one id in transformers (four seeds tried)."""


def backbone_config(text_type: str, vocab_size: int, settings: dict[str, Any] | None = None) -> Any:
    """transformers' default config of `text_type`, shrunk, with its `BACKBONE_SETTINGS` and
    then `settings` (a benchmark's variant: the same decoder attending in every layer)."""
    from transformers import AutoConfig

    text = AutoConfig.for_model(text_type)
    shrink(text, dict(TEXT_SIZES, vocab_size=vocab_size))
    for name, value in {**BACKBONE_SETTINGS.get(text_type, {}), **(settings or {})}.items():
        setattr(text, name, value)
    text.tie_word_embeddings = False
    return rederived(text)


def backbone_spec(text_type: str, settings: dict[str, Any] | None = None) -> ZooSpec:
    llava = SPECS["llava"]

    def make_config(tokenizer):
        config = llava.make_config(tokenizer)
        config.text_config = backbone_config(text_type, len(tokenizer), settings)
        return config

    return dataclasses.replace(
        llava, name=f"llava-over-{text_type}", make_config=make_config,
        centred_norm_biases=text_type in CENTRED_NORM_BIASES,
        notes=f"The zoo's LLaVA with a shrunk default {text_type} decoder (hf_bridge/zoo/backbones.py).",
    )


def build_backbone_model(text_type: str, directory: Path, seed: int = 0, settings: dict[str, Any] | None = None) -> Path:
    """Build the LLaVA over `text_type` (with `settings`, see `backbone_config`) into
    `directory` (this interpreter)."""
    from .build import build_checkpoint

    stamp = {"backbone": text_type, "seed": seed, "settings": settings or {}}
    return build_checkpoint(backbone_spec(text_type, settings), Path(directory), stamp, seed)
