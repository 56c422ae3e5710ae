"""A MiniMax-M3-VL checkpoint, tiny, with the sparse attention its real checkpoints have:
the sweep's generic MiniMax-M3-VL, whose first layer is a `minimax_m3_sparse` layer (a
Lightning Indexer picks the key blocks each query attends to) with blocks of 4 tokens, 2
of them kept, so that any prompt past 8 tokens attends sparsely. Run in a fresh process
(an engine decorates HF classes in place):

    python minimax_sparse.py OUT_DIR
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from hf_bridge.zoo.build import build_checkpoint
from hf_bridge.zoo.shrink import generation_class, generic_spec

SPARSE = dict(index_block_size=4, index_topk_blocks=2, index_local_blocks=1, index_n_heads=2, index_head_dim=32)


def main(out_dir: Path) -> None:
    spec = generic_spec("minimax_m3_vl")
    make_dense = spec.make_config

    def make_config(tokenizer):
        config = make_dense(tokenizer)
        text = config.get_text_config()
        for name, value in SPARSE.items():
            setattr(text, name, value)
        text.layer_types = ["minimax_m3_sparse", *text.layer_types[1:]]
        return config

    spec = dataclasses.replace(spec, name="sweep-minimax-m3-sparse", make_config=make_config)
    build_checkpoint(spec, out_dir, {"helper": "minimax_sparse"}, 0, generation_class("minimax_m3_vl"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
