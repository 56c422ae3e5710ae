"""A tiny Gemma 4 in a form its real checkpoints take and transformers' default config
does not: the sweep's generic Gemma 4 with one change. Run in a fresh process (an engine
decorates HF classes in place):

    python gemma4_variant.py moe|kv_shared OUT_DIR

- `moe`: its MoE block on, as Gemma 4's MoE checkpoints have it (experts beside the
  dense MLP, each a GELU-gated MLP; the experts-per-token count named `top_k_experts`);
- `kv_shared`: its last layers attend over earlier layers' keys and values, as its small
  checkpoints' do (`num_kv_shared_layers`): four layers, the last two sharing.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from hf_bridge.zoo.build import build_checkpoint
from hf_bridge.zoo.shrink import generation_class, generic_spec

MOE = dict(enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=48)
KV_SHARED = dict(num_kv_shared_layers=20)
"""Of the default 30 layers; the shrink keeps one layer per kind and one sharing layer each."""


def moe_spec():
    spec = generic_spec("gemma4")
    make_dense = spec.make_config

    def make_config(tokenizer):
        config = make_dense(tokenizer)
        for name, value in MOE.items():
            setattr(config.get_text_config(), name, value)
        return config

    return dataclasses.replace(spec, name="sweep-gemma4-moe", make_config=make_config)


def kv_shared_spec():
    return dataclasses.replace(generic_spec("gemma4", KV_SHARED), name="sweep-gemma4-kv-shared")


VARIANTS = {"moe": moe_spec, "kv_shared": kv_shared_spec}


def main(variant: str, out_dir: Path) -> None:
    build_checkpoint(VARIANTS[variant](), out_dir, {"helper": f"gemma4_{variant}"}, 0, generation_class("gemma4"))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
