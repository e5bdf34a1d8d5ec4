"""Rows of one-line Rich ``Text`` as Textual strips, without Rich's layout pass.

Textual draws a widget's Rich renderable through a console: it wraps each line, joins the lines,
renders them to segments, and splits and crops those again into lines. For a chart whose rows
already fit the width that is most of the cost of drawing it, every second while a run streams.
A widget that draws its rows through the line API (``render_line``) with ``text_strips`` gets the
same segments (tests/tui/test_charts.py compares them) for a fraction of the work.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip


def text_strips(rows: Sequence[Text], console: Console, base: Style) -> list[Strip]:
    """One strip per row, each segment's style on top of ``base`` (the widget's own colours), as
    Textual's renderable path would draw them. Rows wider than the widget are not cropped here."""
    return [Strip(_segments(row, console, base), row.cell_len) for row in rows]


def _segments(row: Text, console: Console, base: Style) -> list[Segment]:
    get_style = partial(console.get_style, default=Style.null())
    plain, own = row.plain, get_style(row.style)
    if not row.spans:  # Text.render leaves out a span-less row's own style; a rendered renderable keeps it
        return [Segment(plain, base + own)]
    spans = sorted((span for span in row.spans if span.end > span.start), key=lambda span: span.start)
    if any(a.end > b.start for a, b in zip(spans, spans[1:])):  # overlapping styles: Rich combines them
        return [Segment(text, base + style) for text, style, _ in row.render(console)]
    # Runs side by side (a chart's rows): each is the row's style plus its own, the gaps the row's.
    segments, at, plain_style = [], 0, base + own
    for span in spans:
        if span.start > at:
            segments.append(Segment(plain[at:span.start], plain_style))
        segments.append(Segment(plain[span.start:span.end], base + (own + get_style(span.style))))
        at = span.end
    if at < len(plain):
        segments.append(Segment(plain[at:], plain_style))
    return segments
