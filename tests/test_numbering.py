"""Items a processor numbers in the prompt (`numbering.py`): pure functions, with hypothesis."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hf_bridge.numbering import number_window, renumber
from hf_bridge.placeholders import PlaceholderError

ID_START, ID_END, IMG, IM_START, IM_END = 90, 91, 50, 51, 52
DIGITS = list(range(10, 20))  # token of digit d: DIGITS[d]
TEXT = st.lists(st.integers(60, 80), max_size=6)


def numbered(index: int, body: list[int], at_end: bool = False) -> list[int]:
    """MiniCPM-V's layout (`<image_id>i</image_id>` then the image), or the number after it."""
    number = [ID_START, DIGITS[index], ID_END]
    return body + number if at_end else number + body


def body_of(embeds: int, extra: list[int]) -> list[int]:
    return [IM_START, *[IMG] * embeds, IM_END, *extra]


@given(st.integers(1, 9), st.integers(1, 8), st.integers(1, 30), TEXT, TEXT, st.booleans())
def test_a_real_item_takes_the_number_of_its_index(index, blank_embeds, embeds, blank_extra, extra, at_end):
    """The blank items' expansions give the window; a real item of any size gets the
    number of its index, where the blank's number sits, from either end."""
    window = number_window(numbered(0, body_of(blank_embeds, blank_extra), at_end),
                           numbered(index, body_of(blank_embeds, blank_extra), at_end))
    item = numbered(0, body_of(embeds, extra), at_end)
    is_embed = [t == IMG for t in item]
    assert renumber(item, is_embed, window) == numbered(index, body_of(embeds, extra), at_end)


@given(st.lists(st.integers(0, 99), max_size=20))
def test_a_processor_that_numbers_nothing_changes_nothing(expansion):
    assert number_window(expansion, expansion) is None
    assert renumber(expansion, [False] * len(expansion), None) == expansion


def test_a_number_of_another_width_is_refused_not_misplaced():
    """Item 10's number may take two tokens where item 0's takes one: the types and the
    embedding mask cached with the item would no longer line up, so it is refused."""
    first = [ID_START, DIGITS[0], ID_END, IM_START, IMG, IM_END]
    tenth = [ID_START, DIGITS[1], DIGITS[0], ID_END, IM_START, IMG, IM_END]
    window = number_window(first, tenth)
    with pytest.raises(PlaceholderError, match=r"numbers this item with \d+ tokens where the first item has \d+"):
        renumber(first, [t == IMG for t in first], window)


def test_an_item_without_the_blanks_number_is_refused():
    window = number_window(numbered(0, body_of(1, [])), numbered(1, body_of(1, [])))
    unnumbered = body_of(4, [70])
    with pytest.raises(PlaceholderError, match="does not hold the first item's number where a blank item's does"):
        renumber(unnumbered, [t == IMG for t in unnumbered], window)


def test_a_window_over_embedding_positions_is_refused():
    """Only text is renumbered: a window that would overwrite an embedding row is not a number."""
    window = number_window([IMG, 70], [IMG, 71])
    assert renumber([IMG, 70], [True, False], window) == [IMG, 71]
    with pytest.raises(PlaceholderError, match="does not hold the first item's number"):
        renumber([IMG, 70], [True, True], window)
