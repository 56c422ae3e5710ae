"""The processor's own tokens outside the items' expansions (`hf_bridge.frame`), pure.

The probes below are written as the processors lay them out (see the module doc):
`ph S` and `ph S ph S` with blank items, `E` a blank item's expansion.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hf_bridge.frame import PromptFrame, apply_frame, frame_from_probes, strip_frame, text_only_frame
from hf_bridge.placeholders import PlaceholderError

IMG, BOS, NL, SEP, BOI, EOI, ROW, BOA = 900, 1, 10, 99, 901, 902, 903, 4
S = [50, 51]  # the sentinel text's ids
E = [BOI, IMG, IMG, EOI]


def types(ids):
    return [1 if t in (IMG, BOI, EOI, ROW) else 0 for t in ids]


def test_paligemma_bos_after_last_item_and_trailing_newline():
    one = [*E, BOS, *S, NL]
    two = [*E, *S, *E, BOS, *S, NL]
    frame = frame_from_probes(one, types(one), two, S)
    assert frame == PromptFrame(leading=(), after_last_item=(BOS,), trailing=(NL,))


def test_chameleon_trailing_separator_only():
    one = [*E, *S, SEP]
    frame = frame_from_probes(one, types(one), [*E, *S, *E, *S, SEP], S)
    assert frame == PromptFrame(trailing=(SEP,))


def test_leading_token_added_by_processor_not_by_tokenizer():
    """Emu3-style: BOS the processor adds is the frame's; BOS the tokenizer adds is not."""
    one = [BOS, *E, *S]
    assert frame_from_probes(one, types(one), [BOS, *E, *S, *E, *S], S) == PromptFrame(leading=(BOS,))
    assert frame_from_probes(one, types(one), [BOS, *E, *S, *E, *S], S, text_before=[BOS]) == PromptFrame()


def test_untyped_markers_inside_each_item_stay_in_the_expansion():
    """SmolVLM types its row markers as text: they repeat per item, so they are not frame."""
    item = [ROW, 0, IMG, 0, IMG]
    one = [*item, *S]
    assert frame_from_probes(one, types(one), [*item, *S, *item, *S], S) == PromptFrame()


def test_one_item_processor_that_inserts_the_item_itself():
    """Fuyu: no P2; the untyped tokens after the last typed one follow the item."""
    grid = [IMG, IMG, ROW, IMG, IMG, ROW]
    one = [*grid, BOS, *S, BOA]
    frame = frame_from_probes(one, types(one), None, S, inserts_item=True)
    assert frame == PromptFrame(after_last_item=(BOS,), trailing=(BOA,), inserts_item=True)


def test_inconsistent_probes_are_refused():
    with pytest.raises(PlaceholderError, match="text after the placeholder"):
        frame_from_probes([*E], types(E), None, S)
    with pytest.raises(PlaceholderError, match="not the same for every item"):
        frame_from_probes([*E, *S], types([*E, *S]), [*E, *E, *E, *S, *S], S)


def test_strip_frame_leaves_tokenizer_text_and_expansion():
    frame = PromptFrame(leading=(7,), after_last_item=(BOS,), trailing=(NL,))
    ids = [7, 5, *E, BOS, NL]
    body, body_types = strip_frame(frame, ids, types(ids))
    assert body == [5, *E] and body_types == types([5, *E])
    with pytest.raises(PlaceholderError):
        strip_frame(frame, [7, 5, *E, NL], types([7, 5, *E, NL]))


def test_apply_frame_paligemma_two_images():
    frame = PromptFrame(after_last_item=(BOS,), trailing=(NL,))
    prompt = [20, IMG, 21, IMG, 22]
    assert apply_frame(prompt, [(frame, [IMG], 2)]) == [20, IMG, 21, IMG, BOS, 22, NL]


def test_apply_frame_inserting_processor_puts_placeholder_first():
    frame = PromptFrame(after_last_item=(BOS,), trailing=(BOA,), inserts_item=True)
    assert apply_frame([30, 31], [(frame, [IMG], 1)]) == [IMG, BOS, 30, 31, BOA]


def test_apply_frame_adds_leading_and_trailing_once_across_modalities():
    image = PromptFrame(leading=(BOS,), trailing=(SEP,))
    video = PromptFrame(leading=(BOS,), trailing=(SEP,))
    assert apply_frame([IMG, 3, ROW], [(image, [IMG], 1), (video, [ROW], 1)]) == [BOS, IMG, 3, ROW, SEP]


tokens = st.lists(st.integers(2, 60), max_size=6)


@given(
    before=tokens, between=st.lists(tokens, min_size=1, max_size=3), lead=tokens, after=tokens, trail=tokens,
)
def test_apply_frame_keeps_the_prompt_and_adds_exactly_the_frame(before, between, lead, after, trail):
    """The prompt's own tokens survive in order; the frame adds exactly its tokens, the
    `after_last_item` ones right after the last placeholder."""
    prompt = list(before)
    for chunk in between:
        prompt += [IMG, *chunk]
    frame = PromptFrame(tuple(lead), tuple(after), tuple(trail))
    out = apply_frame(prompt, [(frame, [IMG], len(between))])
    last = len(prompt) - 1 - prompt[::-1].index(IMG)
    expected = [*lead, *prompt[: last + 1], *after, *prompt[last + 1 :], *trail]
    assert out == expected


@given(lead=tokens, after=tokens, trail=tokens, body=st.lists(st.integers(2, 60), min_size=1, max_size=8))
def test_frame_learnt_from_probes_is_the_frame_that_made_them(lead, after, trail, body):
    """Round trip: lay out the probes with a frame, learn it back."""
    item = [BOI, *body, EOI]
    one = [*lead, *item, *after, *S, *trail]
    two = [*lead, *item, *S, *item, *after, *S, *trail]
    if S[0] in lead + item + after or any(S == (lead + item + after)[i : i + 2] for i in range(len(lead + item + after))):
        return  # the sentinel must not occur before its place
    assert frame_from_probes(one, types(one), two, S) == PromptFrame(tuple(lead), tuple(after), tuple(trail))


def test_text_only_frame_chameleon_separator_and_emu3_bos():
    """A prompt without items: the processor's ids for the sentinel alone against the
    tokenizer's; the tokenizer's own BOS is the prompt's, not the frame's."""
    assert text_only_frame([*S, SEP], S) == PromptFrame(trailing=(SEP,))
    assert text_only_frame([BOS, *S], S) == PromptFrame(leading=(BOS,))
    assert text_only_frame([BOS, *S], [BOS, *S]) == PromptFrame()
    assert text_only_frame([50, 52], S) is None  # the processor rewrote the text itself


@given(lead=tokens, trail=tokens, text=st.lists(st.integers(2, 60), min_size=1, max_size=8))
def test_text_only_frame_is_the_frame_that_made_the_ids(lead, trail, text):
    """Round trip: the frame read off `lead + text + trail` adds back exactly those tokens."""
    if any(text == (lead + text)[i : i + len(text)] for i in range(len(lead))):
        return  # the text must not occur inside what comes before it
    learnt = text_only_frame([*lead, *text, *trail], text)
    assert learnt == PromptFrame(leading=tuple(lead), trailing=tuple(trail))
    assert apply_frame(text, [(learnt, (), 1)]) == [*lead, *text, *trail]
