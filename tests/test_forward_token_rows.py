"""Rows the HF forward builds for some token ids in place of its tables' rows
(`forward_token_rows.py`, no engine): learnt where they differ, put in place by id."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_bridge.forward_token_rows import EMBEDS, TokenRows, agreed_rows, apply_beside_media, learn_token_rows

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


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=VOCAB, max_size=VOCAB), st.integers(1, 3))
def test_rows_beside_items_are_kept_where_every_item_agrees(kinds, items):
    """Per id: 0 keeps the table's row beside an item, 1 takes one row whatever the item
    (Ovis2's indicators), 2 a row built from the item's content. Only the 1s are learnt;
    the 2s too when a single item was tried, which cannot tell them apart."""
    kinds[0] = 0  # the ordinary token
    table = torch.randn(VOCAB, WIDTH)
    fixed = torch.randn(VOCAB, WIDTH)
    runs = []
    for _ in range(items):
        content = torch.randn(VOCAB, WIDTH)
        kind = torch.tensor(kinds)[:, None]
        runs.append(torch.where(kind == 0, table, torch.where(kind == 1, fixed, content)))
    ids = torch.arange(VOCAB)
    rows = agreed_rows(ids, runs, table, VOCAB)
    expected = [i for i, k in enumerate(kinds) if k == 1 or (k == 2 and items == 1)]
    if not expected:
        assert rows is None or rows.ids().tolist() == []
        return
    assert rows.ids().tolist() == expected
    assert torch.equal(rows.apply(ids, table), torch.where(torch.isin(ids, torch.tensor(expected))[:, None], runs[0], table))


def test_rows_beside_items_are_not_learnt_where_the_forward_changes_every_token():
    table = torch.randn(4, WIDTH)
    assert agreed_rows(torch.arange(4), [table + 1, table + 1], table, 4) is None


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(["first", "second", "both", "none"]), min_size=VOCAB, max_size=VOCAB))
def test_joined_rows_are_the_first_where_it_has_one_else_the_second(owners):
    table, first_rows, second_rows = torch.randn(VOCAB, WIDTH), torch.randn(VOCAB, WIDTH), torch.randn(VOCAB, WIDTH)
    first_ids = torch.tensor([i for i, o in enumerate(owners) if o in ("first", "both")], dtype=torch.long)
    second_ids = torch.tensor([i for i, o in enumerate(owners) if o in ("second", "both")], dtype=torch.long)
    first = TokenRows.of(first_ids, first_rows[first_ids], VOCAB)
    second = TokenRows.of(second_ids.flip(0), second_rows[second_ids.flip(0)], VOCAB)
    joined = first.joined(second)
    ids = torch.arange(VOCAB)
    expected = torch.stack([first_rows[i] if o in ("first", "both") else second_rows[i] if o == "second" else table[i]
                            for i, o in enumerate(owners)])
    assert torch.equal(joined.apply(ids, table), expected)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["text", "marker", "media"]), max_size=30))
def test_rows_beside_media_stand_only_in_runs_of_markers_around_media(kinds):
    """A marker takes its learnt row inside a run of markers and media positions that holds
    media (an item's expansion), and the table's alone or beside text only (a generated
    marker, a prompt without items)."""
    marker, text = 5, 1
    table = torch.randn(VOCAB, WIDTH)
    rows = TokenRows.of(torch.tensor([marker]), torch.full((1, WIDTH), 9.0), VOCAB)
    ids = torch.tensor([text if k == "text" else marker if k == "marker" else 2 for k in kinds], dtype=torch.long)
    media = torch.tensor([k == "media" for k in kinds], dtype=torch.bool)
    values = torch.where(media[:, None], torch.full((len(kinds), WIDTH), -1.0), table[ids]) if kinds else table[ids]
    placed = apply_beside_media(rows, ids, values, media)
    for i, kind in enumerate(kinds):
        j = i
        while j > 0 and kinds[j - 1] != "text":
            j -= 1
        k = i
        while k < len(kinds) - 1 and kinds[k + 1] != "text":
            k += 1
        beside = kind == "marker" and "media" in kinds[j:k + 1]
        expected = rows.rows[0] if beside else values[i]
        assert torch.equal(placed[i], expected), (kinds, i)
