"""Per-token decoder inputs the processor derives from the token ids alone (no vLLM import).

Ernie 4.5 VL's processor returns `moe_mm_token_type_ids` beside the ids: per token, the
modality whose experts it goes to (text 0, image 1, video 2), each item's start and end
markers included, which `mm_token_type_ids` leaves as text. Its decoder routes every token
by them. vLLM hands the model each step's ids (`embed_input_ids`), never a processor output
per prompt token, so hf_bridge learns the value of each token id from the processor once
(`learn_token_tables`) and looks every step's ids up (`TokenTableInputs`).

Generated tokens are looked up as well: transformers' `generate` passes no such field after
the prompt (all text), which differs only where a model generates a media marker itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from .step_kwargs import hand_step_kwargs

READ_ELSEWHERE = ("input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids", "labels")
"""Per-token processor outputs hf_bridge reads otherwise (M-RoPE positions, placeholders,
bidirectional attention) or never hands the model (training labels)."""


PER_TOKEN_SUFFIX = "_ids"
"""How transformers names a per-token input (`input_ids`, `token_type_ids`,
`moe_mm_token_type_ids`): a forward taking none besides those read elsewhere and
positions needs no processor loaded to learn tables."""
POSITIONS_SUFFIX = "position_ids"
"""Positions, vLLM's own (`position_ids`) or an item's patches' (Gemma 4's `image_position_ids`)."""


def may_take_token_fields(forward_arguments: list[str]) -> bool:
    return any(name.endswith(PER_TOKEN_SUFFIX) and not name.endswith(POSITIONS_SUFFIX) and name not in READ_ELSEWHERE
               for name in forward_arguments)


def token_fields(processor: Any, takes: Callable[[str], bool]) -> list[str]:
    """The outputs the processor adds itself, beyond its tokenizer's and its media
    processors' (which are per item), that the HF base model's forward takes (`takes(name)`)
    and hf_bridge hands it nowhere else: the candidates for a table per token id."""
    parts = [getattr(processor, name, None) for name in processor.get_attributes()]
    of_parts = {name for part in parts for name in (getattr(part, "model_input_names", None) or ())}
    return [name for name in processor.model_input_names
            if name not in of_parts and name not in READ_ELSEWHERE and takes(name)]


def learn_token_tables(processor: Any, fields: list[str]) -> dict[str, dict[int, int]]:
    """For each of `fields` that the processor returns one value per token for, the nonzero
    value of each token id. Learned from one call on text of every token the tokenizer adds
    to its vocabulary (specials and media markers: the ones such fields tell apart); any
    other id reads 0. A field the call returns no per-token row for is left out."""
    tokenizer = getattr(processor, "tokenizer", processor)
    added = list(tokenizer.get_added_vocab())
    output = processor(text=["".join(added)])
    ids = [int(i) for i in _row(output["input_ids"])]
    tables = {}
    for name in fields:
        values = _row(output.get(name))
        if values is None or len(values) != len(ids):
            continue
        tables[name] = {token: int(value) for token, value in zip(ids, values) if int(value)}
    return tables


def _row(values: Any) -> list | None:
    if values is None:
        return None
    first = values[0]
    return first.tolist() if hasattr(first, "tolist") else list(first)


class TokenTableInputs:
    """One step's table values, from `embed_input_ids` to the HF base model's forward.

    Like `token_inputs.PerLayerTokenInputs`, each lives in one buffer sized for the most
    tokens a step holds, whose address never changes."""

    def __init__(self, tables: Mapping[str, Mapping[int, int]], vocab_size: int, max_tokens: int, device: torch.device):
        self.lookups = {}
        for name, table in tables.items():
            lookup = torch.zeros(max(vocab_size, max(table, default=0) + 1), dtype=torch.long, device=device)
            for token, value in table.items():
                lookup[token] = value
            self.lookups[name] = lookup
        self.buffers = {name: torch.zeros(max_tokens, dtype=torch.long, device=device) for name in tables}

    def record(self, input_ids: torch.Tensor) -> None:
        for name, lookup in self.lookups.items():
            self.buffers[name][: input_ids.shape[0]].copy_(lookup[input_ids.to(lookup.device)])

    def decoder_kwargs(self, num_tokens: int) -> dict[str, object]:
        return {name: buffer[:num_tokens][None] for name, buffer in self.buffers.items()}

    def install(self, hf_model: torch.nn.Module) -> None:
        hand_step_kwargs(hf_model, self.decoder_kwargs)
