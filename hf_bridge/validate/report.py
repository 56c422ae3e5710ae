"""Pure: a validation's verdicts as a report for people and machines.

The same report prints as the terminal table (`repr`), shows itself in a notebook
(`_repr_html_`), writes one self-contained HTML page (`page`: images and audio inlined,
no scripts, nothing fetched) and JSON. Per case it holds the test images and clips and,
per implementation, the prompt as that implementation's processor placed it (the token strip of
`hf_bridge.display`, coloured text / embedding / grid padding).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..server import data_url
from .stages import (FAIL, NOT_APPLICABLE, NOT_CHECKED, PASS, Verdict, compared_with_nothing, exit_code, table, to_json,
                     verdict_grid)

OUTCOME_COLOURS = {PASS: "#c8f0c8", FAIL: "#ffc4c4", NOT_CHECKED: "#fff1a8", NOT_APPLICABLE: "#e8e8e8"}
EXIT_MEANINGS = {
    0: "every stage checked passed",
    1: "a stage failed (named above)",
    2: "a stage could not be checked (reason above)",
}


@dataclass
class Report:
    model: str
    verdicts: list[Verdict]
    images: dict[str, list[bytes]] = field(default_factory=dict)
    """Case -> its test images (video: its frames) as PNG."""
    audios: dict[str, list[bytes]] = field(default_factory=dict)
    """Case -> its clips as WAV, at the rate both sides read them."""
    strips: dict[tuple[str, str], str] = field(default_factory=dict)
    """(impl, case) -> the HTML of the prompt as that implementation's processor placed it."""

    @property
    def exit_code(self) -> int:
        return exit_code(self.verdicts)

    @property
    def summary(self) -> str:
        nothing = compared_with_nothing(self.verdicts)
        if self.exit_code == 2 and nothing:
            stages = ", ".join(f"{impl} {stage}" for impl, stage in nothing)
            return (f"{EXIT_MEANINGS[2]}: transformers itself could not run any case of {stages}, so the engine's "
                    f"side was compared with nothing")
        return EXIT_MEANINGS[self.exit_code]

    def __repr__(self) -> str:
        return f"{table(self.verdicts)}\n{self.summary}"

    def to_json(self) -> str:
        return to_json(self.model, self.verdicts)

    def _repr_html_(self) -> str:
        esc = html.escape
        cases = list(dict.fromkeys(v.case for v in self.verdicts))
        impls = list(dict.fromkeys(v.impl for v in self.verdicts))
        sections = [
            f"<h2>hf-bridge validate {esc(self.model)}</h2>",
            f"<p><b>exit code {self.exit_code}</b>: {esc(self.summary)}</p>",
            _verdict_table(self.verdicts),
            _details(self.verdicts),
        ]
        for case in cases:
            sections.append(f"<h3>case {esc(case)}</h3>")
            images, clips = self.images.get(case, []), self.audios.get(case, [])
            sections += _inlined("images", images, lambda i, png: (
                f'<img alt="{esc(case)} image {i}" src="{data_url("image/png", png)}" '
                'style="max-height:160px;margin:4px;border:1px solid #999">'))
            sections += _inlined("audios", clips, lambda i, wav: (
                f'<audio controls title="{esc(case)} clip {i}" src="{data_url("audio/wav", wav)}"></audio>'))
            strips = [(impl, self.strips[impl, case]) for impl in impls if (impl, case) in self.strips]
            for impl, strip in strips:
                sections.append(f'<div class="strip" data-impl="{esc(impl)}"><p>{esc(impl)}:</p>{strip}</div>')
            if not images and not clips and not strips:
                sections.append("<p>no media: a plain text prompt</p>")
        return "<div>" + "".join(sections) + "</div>"

    def page(self) -> str:
        """One self-contained HTML document."""
        return (
            "<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>hf-bridge validate {html.escape(self.model)}</title>"
            "<style>body{font-family:sans-serif;margin:16px} td,th{border:1px solid #bbb;padding:2px 8px}"
            " table{border-collapse:collapse}</style></head>"
            f"<body>{self._repr_html_()}</body></html>"
        )


def _inlined(kind: str, media: Sequence[bytes], element) -> list[str]:
    """One `<div class=kind>` of `element(i, data)` per item; nothing without items."""
    return [f'<div class="{kind}">' + "".join(element(i, data) for i, data in enumerate(media)) + "</div>"] if media else []


def _verdict_table(verdicts: Sequence[Verdict]) -> str:
    esc = html.escape
    stages, rows = verdict_grid(verdicts)
    head = "".join(f"<th>{esc(h)}</th>" for h in ["impl", "case", *stages])
    body = ""
    for (impl, case), cells in rows.items():
        body += f"<tr><td>{esc(impl)}</td><td>{esc(case)}</td>"
        for stage in stages:
            v = cells.get(stage)
            if v is None:
                body += "<td>-</td>"
            else:
                body += f'<td title="{esc(v.detail)}" style="background:{OUTCOME_COLOURS[v.outcome]}">{esc(v.outcome)}</td>'
        body += "</tr>"
    return f'<table class="verdicts"><tr>{head}</tr>{body}</table>'


def _details(verdicts: Sequence[Verdict]) -> str:
    esc = html.escape
    lines = [
        f"<li>[{esc(v.stage)}] {esc(v.impl)} / {esc(v.case)}: <b>{esc(v.outcome)}</b>: {esc(v.detail)}</li>"
        for v in verdicts
        if v.detail
    ]
    return f"<ul>{''.join(lines)}</ul>" if lines else ""
