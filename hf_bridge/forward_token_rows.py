"""Rows the HF forward hands its decoder for some token ids in place of its tables' rows
(no vLLM import).

vLLM embeds every prompt token through the text model's embedding table, and hf_bridge
looks per-layer embeddings up in theirs (`token_inputs.py`). An HF forward may build some
ids' rows otherwise: Gemma 3n's embeds the ids of its media ranges (an item's end marker,
its soft token) through its image and audio embedders, and gives them id 0's per-layer
embedding. Those ids are tokens the tokenizer adds, so hf_bridge asks the forward once,
after loading, what it hands its decoder for each added token (`features.handed_to_decoder`),
keeps the rows that differ from the tables' (`learn_token_rows`), and puts them in place
of the tables' rows at every step (`TokenRows.apply`), generated tokens included, as
transformers' forward does.

Some forwards build such rows only when the prompt holds an item: Ovis2's gives its visual
indicator tokens (`<IMG_START>`, `<IMG_GRID>`, ...) rows of its visual embedding table
beside an image, its text table's otherwise (a generated one included). Those are asked
beside items (`rows_beside_items.py`), kept where every item tried agrees (`agreed_rows`):
rows that depend on an item being there, not on what it shows; and put in place around
media positions only (`apply_beside_media`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch

EMBEDS = "inputs_embeds"
"""The field holding the input embeddings the forward hands its decoder."""


@dataclass
class TokenRows:
    """Rows by token id: `index[id]` is the row of `rows` an id takes, -1 where the
    tables' row stands."""

    index: torch.Tensor
    rows: torch.Tensor

    @classmethod
    def of(cls, ids: torch.Tensor, rows: torch.Tensor, vocab_size: int) -> TokenRows:
        index = torch.full((vocab_size,), -1, dtype=torch.long, device=rows.device)
        index[ids.to(rows.device)] = torch.arange(len(ids), device=rows.device)
        return cls(index, rows)

    def ids(self) -> torch.Tensor:
        return (self.index >= 0).nonzero().flatten()

    def joined(self, other: TokenRows | None) -> TokenRows:
        """These rows, and `other`'s for the ids these have none for."""
        if other is None:
            return self
        extra = other.ids()
        extra = extra[self.index.to(extra.device)[extra] < 0]
        ids = torch.cat([self.ids(), extra.to(self.index.device)])
        rows = torch.cat([self.rows[self.index[self.ids()]], other.rows[other.index[extra]].to(self.rows)])
        return TokenRows.of(ids, rows, len(self.index))

    def covers(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.index.to(input_ids.device)[input_ids] >= 0

    def apply(self, input_ids: torch.Tensor, values: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """`values` (the tables' rows for 1-D `input_ids`, one per id) with the learnt ids'
        rows in their place, except where `keep` (media positions, whose rows are the
        encoder's)."""
        found = self.index.to(input_ids.device)[input_ids]
        replace = found >= 0 if keep is None else (found >= 0) & ~keep.to(found.device)
        learnt = self.rows.to(values.device, values.dtype)[found.clamp(min=0)]
        return torch.where(replace.view(-1, *[1] * (values.dim() - 1)), learnt, values)


def apply_beside_media(rows: TokenRows, input_ids: torch.Tensor, values: torch.Tensor, media: torch.Tensor) -> torch.Tensor:
    """`values` (the rows for 1-D `input_ids`) with `rows`' ids' rows in their place where
    they lie beside media positions (`media`): in a run of consecutive positions, each a
    media position or one of those ids, that holds a media position, as a processor writes
    an item's markers around its media tokens. Elsewhere the rows stand: transformers'
    forward builds them only where it processes an item with the prompt, never for a
    generated token."""
    covered = rows.covers(input_ids)
    media = media.to(covered.device)
    run = torch.cumsum(~(covered | media), 0)
    media_in_run = torch.zeros(len(input_ids) + 1, dtype=torch.long, device=covered.device).index_add_(0, run, media.long())
    beside = covered & ~media & (media_in_run[run] > 0)
    return rows.apply(input_ids, values, keep=~beside)


def learn_token_rows(
    ids: torch.Tensor,
    handed: Mapping[str, torch.Tensor],
    tables: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
    vocab_size: int,
) -> tuple[dict[str, TokenRows], list[str]]:
    """For each field of `tables`, the ids among 1-D `ids` whose row the forward handed its
    decoder (`handed[field]`, one row per id) differs from the tables' row
    (`tables[field]`: the rows, and where the tables have a row for the id at all).

    `ids[0]` is an ordinary token: a field whose row differs there too is one the forward
    changes for every token (a scale applied outside the table), which per-id rows cannot
    reproduce; such fields are returned second, unlearnt."""
    learnt, every_token = {}, []
    for field, (rows, served) in tables.items():
        given = handed.get(field)
        if given is None:
            continue
        given = given.reshape(rows.shape).to(rows.dtype)
        differs = ~served.to(rows.device) | (given != rows).flatten(1).any(1)
        if differs[0]:
            every_token.append(field)
        elif differs.any():
            learnt[field] = TokenRows.of(ids.to(rows.device)[differs], given[differs].clone(), vocab_size)
    return learnt, every_token


ROUNDING_TOLERANCE = 1e-5
"""Relative and absolute: a row built beside an item this close to the one built without
is the same row computed in another batch shape (Gemma 3n's media markers, 3.6e-7 apart),
not one the forward builds otherwise."""


def asked_ids(added: Iterable[int], vocab_size: int) -> list[int] | None:
    """The ids the forward is asked for at load: an ordinary token's first (its row is the
    check that per-id rows can follow), then each added token's below `vocab_size`, in
    order. None where the tokenizer adds none, or adds every id."""
    added = {i for i in added if i < vocab_size}
    ordinary = next((i for i in range(vocab_size) if i not in added), None)
    return None if not added or ordinary is None else [ordinary, *sorted(added)]


def beyond_rounding(given: torch.Tensor, alone: torch.Tensor) -> torch.Tensor:
    """Per row (the first axis), whether `given` differs from `alone` by more than rounding."""
    return ~torch.isclose(given.to(alone), alone, rtol=ROUNDING_TOLERANCE, atol=ROUNDING_TOLERANCE).flatten(1).all(1)


def agreed_rows(ids: torch.Tensor, runs: list[torch.Tensor], alone: torch.Tensor, vocab_size: int) -> TokenRows | None:
    """The rows the forward handed its decoder for 1-D `ids` in each of `runs` (one per item
    tried beside them, a row per id) where every run agrees and differs by more than
    rounding from `alone`, the rows it hands for them with no item. None where the forward
    changed `ids[0]`, an ordinary token, beside an item: per-id rows cannot follow that."""
    agree = torch.ones(len(ids), dtype=torch.bool, device=alone.device)
    for run in runs[1:]:
        agree &= (run.to(runs[0]) == runs[0]).flatten(1).all(1).to(agree.device)
    given = runs[0].to(alone)
    given = torch.where((agree & beyond_rounding(given, alone)).view(-1, *[1] * (alone.dim() - 1)), given, alone)
    served = torch.ones(len(ids), dtype=torch.bool, device=alone.device)
    learnt, every_token = learn_token_rows(ids, {EMBEDS: given}, {EMBEDS: (alone, served)}, vocab_size)
    return None if every_token else learnt.get(EMBEDS)
