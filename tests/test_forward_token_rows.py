"""Rows the HF forward builds for some token ids in place of its tables' rows
(`forward_token_rows.py`, no engine): learnt where they differ, put in place by id."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_bridge.forward_token_rows import EMBEDS, learn_token_rows

VOCAB, WIDTH = 12, 3


def tables_and_forward(special: list[int]):
    """A table, and a forward that builds the `special` ids' rows elsewhere (as Gemma 3n's
    embeds its media ranges through its media embedders)."""
    table = torch.randn(VOCAB, WIDTH)
    elsewhere = torch.randn(VOCAB, WIDTH)

    def forward(ids: torch.Tensor) -> torch.Tensor:
        own = torch.isin(ids, torch.tensor(special, dtype=torch.long))
        return torch.where(own[:, None], elsewhere[ids], table[ids])

    return table, forward


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, VOCAB - 1), unique=True, max_size=5), st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=20))
def test_learnt_rows_are_the_forwards_wherever_the_ids_occur(special, prompt):
    table, forward = tables_and_forward(special)
    added = torch.arange(1, VOCAB)  # id 0 is the ordinary token the probe checks first
    probe = torch.cat([torch.tensor([0]), added])
    learnt, every_token = learn_token_rows(probe, {EMBEDS: forward(probe)}, {EMBEDS: (table[probe], torch.ones(len(probe), dtype=torch.bool))}, VOCAB)
    assert every_token == []
    ids = torch.tensor(prompt)
    if not special:
        assert learnt == {}
        return
    assert sorted(learnt[EMBEDS].index.ge(0).nonzero().flatten().tolist()) == sorted(special)
    assert torch.equal(learnt[EMBEDS].apply(ids, table[ids]), forward(ids))


def test_media_positions_keep_their_rows_and_unserved_ids_are_learnt():
    """An id the table has no row for (past Gemma 3n's per-layer table) is learnt whatever
    the rows read; a media position keeps the encoder's row."""
    table = torch.randn(4, WIDTH)
    handed = table.clone()
    handed[3] = 7.0
    served = torch.tensor([True, True, True, False])
    learnt, _ = learn_token_rows(torch.arange(4), {EMBEDS: handed}, {EMBEDS: (table, served)}, 4)
    ids = torch.tensor([3, 1, 3])
    encoder = torch.full((3, WIDTH), -1.0)
    placed = learnt[EMBEDS].apply(ids, encoder, keep=torch.tensor([False, False, True]))
    assert torch.equal(placed[0], handed[3]) and torch.equal(placed[1:], encoder[1:])


def test_a_forward_that_changes_every_row_is_not_learnt():
    """A scale applied outside the table reaches ordinary tokens too: rows learnt per id
    would serve the added tokens scaled and the others not."""
    table = torch.randn(4, WIDTH)
    learnt, every_token = learn_token_rows(torch.arange(4), {EMBEDS: 2 * table}, {EMBEDS: (table, torch.ones(4, dtype=torch.bool))}, 4)
    assert learnt == {} and every_token == [EMBEDS]
