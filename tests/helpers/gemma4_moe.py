"""A Gemma 4 mixture-of-experts checkpoint, tiny: the sweep's generic Gemma 4 with its
MoE block on, as Gemma 4's MoE checkpoints have it (experts beside the dense MLP, each
a GELU-gated MLP; the experts-per-token count named `top_k_experts`). Run in a fresh
process (an engine decorates HF classes in place):

    python gemma4_moe.py OUT_DIR
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from hf_bridge.zoo.build import build_checkpoint
from hf_bridge.zoo.shrink import generation_class, generic_spec

MOE = dict(enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=48)


def main(out_dir: Path) -> None:
    spec = generic_spec("gemma4")
    make_dense = spec.make_config

    def make_config(tokenizer):
        config = make_dense(tokenizer)
        for name, value in MOE.items():
            setattr(config.get_text_config(), name, value)
        return config

    spec = dataclasses.replace(spec, name="sweep-gemma4-moe", make_config=make_config)
    build_checkpoint(spec, out_dir, {"helper": "gemma4_moe"}, 0, generation_class("gemma4"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
