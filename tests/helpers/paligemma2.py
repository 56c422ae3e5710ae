"""A PaliGemma 2 checkpoint, tiny: the zoo's PaliGemma recipe with Gemma 2's text model
(attention scores soft-capped at 50, logits at 30, sliding-window layers beside full
ones), as the real PaliGemma 2 checkpoints are. Run in a fresh process (an engine
decorates HF classes in place):

    python paligemma2.py OUT_DIR WINDOW
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from hf_bridge.zoo import SPECS, specs
from hf_bridge.zoo.build import build_checkpoint

ATTENTION_SOFTCAP = 50.0
LOGIT_SOFTCAP = 30.0
"""Gemma 2's (and PaliGemma 2's) caps."""


def main(out_dir: Path, window: int) -> None:
    def make_config(tokenizer):
        from transformers import Gemma2Config, PaliGemmaConfig, SiglipVisionConfig

        width = specs.TEXT["hidden_size"]
        return PaliGemmaConfig(
            vision_config=SiglipVisionConfig(**specs.SIGLIP_VISION, projection_dim=width),
            text_config=Gemma2Config(
                **specs._text(len(tokenizer)), tie_word_embeddings=False, sliding_window=window,
                attn_logit_softcapping=ATTENTION_SOFTCAP, final_logit_softcapping=LOGIT_SOFTCAP,
                query_pre_attn_scalar=specs.TEXT["head_dim"],
            ),
            projection_dim=width,
            tie_word_embeddings=False,
            image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        )

    spec = dataclasses.replace(SPECS["paligemma"], name="paligemma2", make_config=make_config)
    build_checkpoint(spec, out_dir, {"helper": "paligemma2", "window": window})


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
