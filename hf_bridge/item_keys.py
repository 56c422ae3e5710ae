"""The names under which hf_bridge's processor stores an item's fields for the model (no
vLLM import): the processor's own output, and the fields hf_bridge adds beside it.
"""

from __future__ import annotations

DATA_KEY = "{}.{}"
"""An item's processor output `key` is stored as `"<modality>.<key>"`: two modalities
may use one name (InternVL's videos arrive as `pixel_values`, like its images)."""
ENCODER_KEY = "hf_bridge_{}_encoder"
EXPANSION_KEY = "hf_bridge_{}_expansion"
IS_EMBED_KEY = "hf_bridge_{}_is_embed"
TYPE_IDS_KEY = "hf_bridge_{}_type_ids"
NUM_EMBEDS_KEY = "hf_bridge_{}_num_embeds"
STACKS_KEY = "hf_bridge_{}_stacks"
"""Per-item fields hf_bridge adds to the processor output (see `own_keys`)."""


def own_keys(modality: str) -> tuple[str, ...]:
    return tuple(
        k.format(modality) for k in (EXPANSION_KEY, IS_EMBED_KEY, TYPE_IDS_KEY, NUM_EMBEDS_KEY, ENCODER_KEY, STACKS_KEY)
    )
