"""Rows of one-line Rich ``Text`` as Textual strips, without Rich's layout pass.

Textual draws a widget's Rich renderable through a console: it wraps each line, joins the lines,
renders them to segments, and splits and crops those again into lines. For a chart whose rows
already fit the width that is most of the cost of drawing it, every second while a run streams.
A widget that draws its rows through the line API (``render_line``) with ``text_strips`` gets the
same segments (tests/tui/test_charts.py compares them) for a fraction of the work.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip


def text_strips(rows: Sequence[Text], console: Console, base: Style) -> list[Strip]:
    """One strip per row, each segment's style on top of ``base`` (the widget's own colours), as
    Textual's renderable path would draw them. Rows wider than the widget are not cropped here."""
    strips = []
    for row in rows:
        if row.spans:
            segments = [Segment(text, base + style) for text, style, _ in row.render(console, end="")]
        else:  # Text.render leaves out a span-less row's own style; a rendered renderable keeps it
            segments = [Segment(row.plain, base + console.get_style(row.style))]
        strips.append(Strip(segments, row.cell_len))
    return strips
