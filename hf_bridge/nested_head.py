"""A text model with a generation head of its own runs only to its hidden states (no vLLM import).

vLLM computes the logits itself, from the hidden states the base model returns
(`lm_head`, logits processor, sampler). Most VLMs keep a bare decoder as their
`language_model`; some keep a whole generation model there, head included (Llama 4's
`Llama4ForCausalLM`, and checkpoints with their own code that build
`AutoModelForCausalLM`), whose forward would hand vLLM logits in place of hidden states.
Such a text model's forward becomes its decoder's, and its head is dropped: vLLM loads
the head's checkpoint weights into its own `lm_head` (the names match vLLM's nested
`lm_head` rule), so keeping it would only hold a second vocabulary-sized matrix.
"""

from __future__ import annotations

import types
from typing import Any

import torch

LOGITS = "logits"
HEAD_ONLY_ARGUMENTS = ("logits_to_keep", "labels")
"""Arguments a generation model's forward spends on its head, which its decoder never takes."""


def generation_head(text_model: torch.nn.Module | None) -> str | None:
    """The child name of `text_model`'s own generation head, or None where it is a bare
    decoder (no output embeddings, or no decoder inside it)."""
    get_head = getattr(text_model, "get_output_embeddings", None)
    head = get_head() if get_head is not None else None
    if head is None or decoder_of(text_model) is None:
        return None
    return next((name for name, child in text_model.named_children() if child is head), None)


def decoder_of(text_model: torch.nn.Module) -> torch.nn.Module | None:
    """The decoder inside a generation model: transformers' `get_decoder`, else its `model`
    child, the `...ForCausalLM` convention (`get_decoder` returns Llama 4's text model itself)."""
    get_decoder = getattr(text_model, "get_decoder", None)
    decoder = get_decoder() if get_decoder is not None else None
    if decoder is None or decoder is text_model:
        decoder = getattr(text_model, "model", None)
    return decoder if isinstance(decoder, torch.nn.Module) and decoder is not text_model else None


def bare_decoder(model: torch.nn.Module) -> torch.nn.Module:
    """The module holding `model`'s decoder layers: its decoder (`get_decoder`), or the one
    inside that where it is a whole generation model (Nemotron-H-Omni's language model)."""
    decoder = model.get_decoder()
    return decoder_of(decoder) if generation_head(decoder) is not None else decoder


def run_to_hidden_states(text_model: torch.nn.Module, head_name: str, read_as_logits: bool = False) -> None:
    """`text_model`'s forward made its decoder's (same arguments, the head's own left
    out), and its head dropped. `read_as_logits`: its caller reads the output's `logits`
    (a generation class holding a generation model, `hf_classes.generation_class_alone`),
    so the hidden states are handed on under that name too, and the caller returns them
    where it would return logits."""
    decoder = decoder_of(text_model)
    child = next((name for name, module in text_model.named_children() if module is decoder), None)

    def forward(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        for name in HEAD_ONLY_ARGUMENTS:
            kwargs.pop(name, None)
        # the child looked up per call: hf_bridge stands one in for it to learn what the
        # forward hands it (`features.handed_to_decoder`); the decoder held from here had run
        # whole instead, and in compiled mode vLLM's decorator compiled it for those ids alone
        output = (getattr(self, child) if child else decoder)(*args, **kwargs)
        if read_as_logits and isinstance(output, dict):  # a ModelOutput (a tuple where asked for one)
            output[LOGITS] = output[0]
        return output

    text_model.forward = types.MethodType(forward, text_model)
    setattr(text_model, head_name, torch.nn.Identity())
