"""The items' rows: `processing.py`'s per-item data through the HF model's own encoding,
batching only items whose shapes already agree, split by each item's embedding count,
never padded or cut to fit (`split.py`).
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.model_executor.models.interfaces import MultiModalEmbeddings

from . import features, split
from .adapters import token_embedding_unadapted
from .embeds import EMBEDS_KEY
from .encoder_graphs.protocol import MODALITY as GRAPH_MODALITY
from .placeholders import MODALITY_OF_TYPE
from .probes import HF_DATA_KEYS
from .item_keys import DATA_KEY, ENCODER_KEY, NUM_EMBEDS_KEY, STACKS_KEY


class MultiModalEmbeddingMixin:
    """`embed_multimodal`: each item's rows, encoded eagerly or replayed from encoder graphs."""

    def embed_multimodal(self, **kwargs: object) -> MultiModalEmbeddings:
        graphs = self.cpu_encoder_graphs
        given_rows = DATA_KEY.format(GRAPH_MODALITY, EMBEDS_KEY.format(GRAPH_MODALITY)) in kwargs
        with token_embedding_unadapted(self.model, self.vllm_config.lora_config):
            if graphs is not None and NUM_EMBEDS_KEY.format(GRAPH_MODALITY) in kwargs and graphs.eligible and not given_rows:
                return graphs.execute(kwargs)
            return self.embed_multimodal_eagerly(kwargs)

    def embed_multimodal_eagerly(self, kwargs: dict[str, object]) -> MultiModalEmbeddings:
        modality = next((m for m in HF_DATA_KEYS if NUM_EMBEDS_KEY.format(m) in kwargs), None)
        if modality is None:
            return []
        counts = [int(c) for c in split.unbatched(kwargs.pop(NUM_EMBEDS_KEY.format(modality)))]
        stacks = all(bool(s) for s in split.unbatched(kwargs.pop(STACKS_KEY.format(modality))))
        encoder_types = {int(t) for t in split.unbatched(kwargs.pop(ENCODER_KEY.format(modality)))}
        (encoder,) = {MODALITY_OF_TYPE[t] for t in encoder_types}
        # Only the item data carries the modality prefix; hf_bridge's own fields do not
        prefix = DATA_KEY.format(modality, "")
        stacked = {k.removeprefix(prefix): v for k, v in kwargs.items() if k.startswith(prefix) and isinstance(v, torch.Tensor)}
        data = {k.removeprefix(prefix): split.unbatched(v) for k, v in kwargs.items() if k.startswith(prefix)}
        items = [{k: values[i] for k, values in data.items()} for i in range(len(counts))]
        encoder = features.encoding_modality(self.model, encoder, modality, data)
        signatures = [
            split.item_signature({k: tuple(v.shape) if isinstance(v, torch.Tensor) else repr(v) for k, v in item.items()})
            for item in items
        ]
        embeddings: list[torch.Tensor | None] = [None] * len(items)
        given_rows = EMBEDS_KEY.format(modality)
        if items and given_rows in items[0]:  # sent as embeddings (`embeds.py`): no encoder
            dtype = next(self.parameters()).dtype  # lm_head is missing on a pipeline's earlier ranks
            return [item[given_rows].to(dtype) for item in items]
        batches = stacks and not features.entry_reads_token_ids(self.model, encoder)
        groups = split.batch_groups(signatures) if batches else [[i] for i in range(len(items))]
        for group in groups:
            every_item = group == list(range(len(items)))  # in order: vLLM's stacked tensors already hold them
            fields = {k: _joined(stacked[k]) if every_item and k in stacked else features.join_items([items[i][k] for i in group])
                      for k in items[group[0]]}
            rows = self._encode(encoder, fields, sum(counts[i] for i in group))
            sizes = split.split_rows(rows.shape[0], [counts[i] for i in group])
            for i, emb in zip(group, torch.split(rows, sizes)):
                embeddings[i] = emb
        return embeddings  # type: ignore[return-value]

    def _encode(self, modality: str, fields: dict[str, Any], num_embeds: int | None = None) -> torch.Tensor:
        """The HF model's own `get_<modality>_features`, or the rows its forward places where
        it has none (`num_embeds` of them), one row per embedding (`features.py`)."""
        return features.encode(self.model, modality, fields, self.text_config.hidden_size, self.side_features, num_embeds)


def _joined(stacked: torch.Tensor) -> torch.Tensor:
    """`features.join_items` of the items vLLM stacked into `stacked`, as a view where it can be (no copy)."""
    return stacked if stacked.ndim == 1 else stacked.flatten(0, 1)
