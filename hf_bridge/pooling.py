"""hf_bridge for vLLM's pooling runner: embeddings and sequence classification.

vLLM resolves a multimodal checkpoint whose architecture defaults to pooling (a base
model saved as `Qwen3VLModel`, an `...EmbeddingModel`, a `...ForSequenceClassification`)
to its in-tree `TransformersMultiModalEmbeddingModel` or
`TransformersMultiModalForSequenceClassification`. Those classes put vLLM's pooling
mixins on the in-tree multimodal backend; the classes here put the same mixins on
hf_bridge's, so pooled checkpoints get what generation gets: the processor's own
placeholders, per-item encoding, the HF model's side features (Qwen3-VL's deepstack,
which the in-tree backend drops) and M-RoPE positions from the processor's token types.

Both pool the *last* token by default, where vLLM's in-tree classes pool the first
(`CLS`, right for the encoder-only text models they were written for): hf_bridge's models
are decoders, whose first token sees nothing after it, so its state never depends on the
prompt's images; the HF `...ForSequenceClassification` classes read the last token too.
A pooling setting of the checkpoint's own (sentence-transformers) or the user's
`pooler_config` still wins, as vLLM orders them.

A generation checkpoint served with `runner="pooling"` needs nothing here: vLLM wraps
`HFBridgeForConditionalGeneration` in its own pooling adapter, which pools the last
token as well.
"""

from __future__ import annotations

import torch
from vllm.model_executor.models.interfaces_base import default_pooling_type
from vllm.model_executor.models.transformers.pooling import (
    ClassifierWithReshape,
    EmbeddingMixin,
    SequenceClassificationMixin,
)

from .model import HFBridgeBase
from .moe import HFBridgeMoEMixin
from .state_layers import CarriedStateMixin

LAST_TOKEN = "LAST"


@default_pooling_type(seq_pooling_type=LAST_TOKEN)
class HFBridgeEmbeddingModel(EmbeddingMixin, HFBridgeBase):
    """Embeddings pooled from the HF base model's last hidden states (vLLM's pooler)."""


@default_pooling_type(seq_pooling_type=LAST_TOKEN)
class HFBridgeForSequenceClassification(SequenceClassificationMixin, HFBridgeBase):
    """The HF `...ForSequenceClassification` class's own classifier on the pooled states."""

    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        head = self.classifier
        if isinstance(head, torch.nn.Linear) and isinstance(head, ClassifierWithReshape):
            # vLLM gives the head a token axis for encoder heads that read `[:, 0]`; a
            # decoder's `score` is a Linear over every token, so the pooled one goes in as is
            head.__class__ = next(c for c in type(head).__mro__ if not issubclass(c, ClassifierWithReshape))

    def load_weights(self, weights):
        """The HF class's head under the name vLLM's mixin keeps it by (`classifier`):
        vLLM's in-tree class finds Gemma3's head by its name `score`, then cannot load
        `score.weight` from the checkpoint."""
        return super().load_weights((classifier_name(name), tensor) for name, tensor in weights)


class HFBridgeMoEEmbeddingModel(HFBridgeMoEMixin, HFBridgeEmbeddingModel):
    """Embeddings from an MoE VLM's base model, its experts on vLLM's fused-MoE layer."""


class HFBridgeHybridEmbeddingModel(CarriedStateMixin, HFBridgeEmbeddingModel):
    """Embeddings from a base model whose decoder layers carry a state (`state_layers.py`)."""


class HFBridgeHybridMoEEmbeddingModel(CarriedStateMixin, HFBridgeMoEEmbeddingModel):
    """The same, with the experts on vLLM's fused-MoE layer."""


class HFBridgeHybridForSequenceClassification(CarriedStateMixin, HFBridgeForSequenceClassification):
    """The HF classifier over a decoder whose layers carry a state (`state_layers.py`)."""


CLASSIFIER = "classifier"
HF_HEAD_NAMES = (CLASSIFIER, "score")
"""The attributes vLLM's `SequenceClassificationMixin` looks the HF class's head up by, in
its order; it keeps the head as `classifier`."""


def classifier_name(name: str) -> str:
    """Checkpoint name `name` with the HF head's own prefix (`score.`) made `classifier.`."""
    head, _, rest = name.partition(".")
    return f"{CLASSIFIER}.{rest}" if head in HF_HEAD_NAMES and rest else name
