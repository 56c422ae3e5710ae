"""A tiny EAGLE-3 draft for a checkpoint, random and seeded, in the layout EAGLE-3 heads are
saved in (`midlayer.*`, `fc`, `norm`, `lm_head`), for vLLM's `LlamaForCausalLMEagle3`: one
decoder layer as wide as the target's text model, reading the target's hidden states at
`layers` (`eagle_aux_hidden_state_layer_ids`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

SCALE = 0.05


def write_draft(target_dir: Path, into: Path, layers: list[int]) -> Path:
    import torch
    from safetensors.torch import save_file

    config = json.loads((target_dir / "config.json").read_text())
    text = config.get("text_config", config)
    width, heads = text["hidden_size"], text["num_attention_heads"]
    kv_heads = text.get("num_key_value_heads") or heads
    head_dim, inner, vocab = text.get("head_dim") or width // heads, text["intermediate_size"], text["vocab_size"]
    into.mkdir(parents=True)
    (into / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": width,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
        "intermediate_size": inner, "vocab_size": vocab, "draft_vocab_size": vocab, "num_hidden_layers": 1,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "hidden_act": "silu", "rope_theta": 10000.0,
        "tie_word_embeddings": False, "torch_dtype": "float32", "eagle_config": {"eagle_aux_hidden_state_layer_ids": layers},
    }))
    generator = torch.Generator().manual_seed(0)

    def random(*shape):
        return torch.randn(*shape, generator=generator) * SCALE

    ones = torch.ones(width)
    save_file({
        "midlayer.input_layernorm.weight": ones, "midlayer.hidden_norm.weight": ones.clone(),
        "midlayer.post_attention_layernorm.weight": ones.clone(), "norm.weight": ones.clone(),
        "midlayer.self_attn.q_proj.weight": random(heads * head_dim, 2 * width),
        "midlayer.self_attn.k_proj.weight": random(kv_heads * head_dim, 2 * width),
        "midlayer.self_attn.v_proj.weight": random(kv_heads * head_dim, 2 * width),
        "midlayer.self_attn.o_proj.weight": random(width, heads * head_dim),
        "midlayer.mlp.gate_proj.weight": random(inner, width), "midlayer.mlp.up_proj.weight": random(inner, width),
        "midlayer.mlp.down_proj.weight": random(width, inner),
        "fc.weight": random(width, len(layers) * width), "lm_head.weight": random(vocab, width),
    }, into / "model.safetensors")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(target_dir / name, into / name)
    return into
