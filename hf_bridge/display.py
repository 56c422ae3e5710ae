"""Pure: a processed prompt shown as text (terminals, `repr`) and as HTML (notebooks).

Every position of the prompt is one of three kinds: text, an item's embedding position
(`is_embed`: the encoder's rows land there) or an item's grid padding (inside the item's
range, no row: `[IMG_BREAK]`, `<img>`, row/column markers). Both views show the kinds,
each item's range, and the data the processor made for it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TEXT, EMBED, PADDING = "text", "embed", "padding"
KIND_COLOURS = {TEXT: "#f3f3f3", EMBED: "#cfe3ff", PADDING: "#ffd9a8"}
"""Token strip colours: grey text, blue embedding positions, orange grid padding."""


@dataclass(frozen=True)
class ItemPlacement:
    """Where one item sits in its prompt: its range and `is_embed` mask."""

    modality: str
    index: int
    """Among the prompt's items of its modality."""
    offset: int
    length: int
    is_embed: Sequence[bool]

    @property
    def num_embeds(self) -> int:
        return sum(self.is_embed)

    @property
    def num_padding(self) -> int:
        return self.length - self.num_embeds

    @property
    def label(self) -> str:
        return f"{self.modality} {self.index}"


@dataclass(frozen=True)
class ItemSummary(ItemPlacement):
    shapes: dict[str, str]
    """Field name -> the shape (or value) of the item's data as the processor made it."""


def describe_data(value: Any) -> str:
    """A short, exact description of one field of an item's data."""
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"{tuple(shape)} {str(getattr(value, 'dtype', '')).removeprefix('torch.')}".strip()
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__} of {len(value)}"
    return repr(value)


def position_kinds(num_tokens: int, items: Sequence[ItemSummary]) -> list[tuple[str, ItemSummary | None]]:
    """(kind, item or None) for every prompt position."""
    kinds: list[tuple[str, ItemSummary | None]] = [(TEXT, None)] * num_tokens
    for item in items:
        for i, embedded in enumerate(item.is_embed):
            kinds[item.offset + i] = (EMBED if embedded else PADDING, item)
    return kinds


def runs(tokens: Sequence[str], kinds: Sequence[tuple[str, ItemSummary | None]]) -> list[tuple[str, int, str, ItemSummary | None]]:
    """Consecutive equal (token, kind, item) positions merged: (token, count, kind, item)."""
    merged: list[tuple[str, int, str, ItemSummary | None]] = []
    for token, (kind, item) in zip(tokens, kinds):
        if merged and merged[-1][0] == token and merged[-1][2] == kind and merged[-1][3] is item:
            last = merged[-1]
            merged[-1] = (token, last[1] + 1, kind, item)
        else:
            merged.append((token, 1, kind, item))
    return merged


def _item_line(item: ItemSummary) -> str:
    data = ", ".join(f"{k} {v}" for k, v in item.shapes.items()) or "no data"
    return (
        f"{item.label}: positions {item.offset}..{item.offset + item.length - 1} ({item.length}), "
        f"{item.num_embeds} embedding, {item.num_padding} grid padding; {data}"
    )


def as_text(title: str, facts: Sequence[str], tokens: Sequence[str], items: Sequence[ItemSummary]) -> str:
    """The plain-text view: title, facts, one line per item, the token strip with runs
    collapsed (`<|image_pad|>x32`), items in brackets and grid padding in braces."""
    lines = [title, *(f"  {fact}" for fact in facts)]
    lines += [f"  {_item_line(item)}" for item in items] or ["  no multimodal items"]
    strip, open_item = [], None
    for token, count, kind, item in runs(tokens, position_kinds(len(tokens), items)):
        if item is not open_item:
            if open_item is not None:
                strip.append("]")
            if item is not None:
                strip.append(f"[{item.label}:")
            open_item = item
        shown = f"{token}x{count}" if count > 1 else token
        strip.append(f"{{{shown}}}" if kind == PADDING else shown)
    if open_item is not None:
        strip.append("]")
    lines += ["  tokens: " + " ".join(strip)]
    return "\n".join(lines)


def as_html(title: str, facts: Sequence[str], tokens: Sequence[str], items: Sequence[ItemSummary]) -> str:
    """The notebook view: one self-contained block (inline styles, no scripts)."""
    esc = html.escape
    legend = " ".join(
        f'<span style="background:{colour};padding:0 4px">{esc(kind)}</span>' for kind, colour in KIND_COLOURS.items()
    )
    rows = "".join(
        f"<tr><td>{esc(item.label)}</td><td>{item.offset}..{item.offset + item.length - 1}</td>"
        f"<td>{item.length}</td><td>{item.num_embeds}</td><td>{item.num_padding}</td>"
        f"<td>{esc(', '.join(f'{k} {v}' for k, v in item.shapes.items()))}</td></tr>"
        for item in items
    )
    table = (
        "<table><tr><th>item</th><th>positions</th><th>length</th><th>embedding</th><th>grid padding</th>"
        f"<th>data</th></tr>{rows}</table>"
        if items
        else "<p>no multimodal items</p>"
    )
    spans = []
    position = 0
    for token, count, kind, item in runs(tokens, position_kinds(len(tokens), items)):
        where = f"{position}" if count == 1 else f"{position}..{position + count - 1}"
        tip = f"{where}: {kind}" + (f" of {item.label}" if item is not None else "")
        shown = esc(token) + (f"<sub>x{count}</sub>" if count > 1 else "")
        spans.append(
            f'<span title="{esc(tip)}" style="background:{KIND_COLOURS[kind]};margin:1px;padding:0 2px;'
            f'font-family:monospace;display:inline-block">{shown}</span>'
        )
        position += count
    facts_html = "".join(f"<li>{esc(fact)}</li>" for fact in facts)
    return (
        f"<div><b>{esc(title)}</b><ul>{facts_html}</ul>{table}<p>{legend}</p>"
        f'<div style="line-height:1.8">{"".join(spans)}</div></div>'
    )
