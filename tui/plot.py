"""Small terminal charts drawn straight into Rich ``Text``: braille line charts and a heat strip.

The Charts tab shows ~20 charts at once. plotext (the main chart) takes milliseconds per chart and
redraws its whole canvas; these are a few hundred cells each, cached by the widgets, and cost well
under a millisecond to draw. No Textual here, so the drawing is tested on its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rich.style import Style
from rich.text import Span, Text

from grpo_tui.tui.format import number
from grpo_tui.tui.glyph_text import tidy

LINE_COLORS = ("green", "dark_orange", "cyan", "magenta", "yellow")
# braille dot bits by (column, row) inside one 2 x 4 cell
_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
# the bits of dots ``a`` to ``b`` (rows inside the cell, inclusive) of one column: _SPANS[column][a][b]
_SPANS = tuple(tuple(tuple(sum(dots[a:b + 1]) for b in range(4)) for a in range(4)) for dots in _DOTS)
_BRAILLE = 0x2800
AXIS_WIDTH = 8  # y-axis labels (7 characters: number's "0.0002", "-1.2e-05") and a rule
HEAT = tuple(
    Style(bgcolor=f"rgb({r},{g},{b})")
    for r, g, b in ((30, 40, 90), (40, 80, 140), (30, 130, 150), (60, 170, 120), (150, 200, 60), (250, 220, 40))
)


SMOOTHING_LEVELS = (0.0, 0.3, 0.6, 0.8, 0.9, 0.95, 0.99)  # [ and ] step through them


@dataclass
class ChartSettings:
    """What every chart of the dashboard shares, in one place: the EMA factor (``[`` ``]``) and the
    Charts tab's step window (``w``). ``version`` moves on every change: part of each chart's cache key."""

    smoothing: float = 0.6
    window: int | None = 100  # the last N steps; None: the whole run
    version: int = 0

    def change(self, **values: object) -> None:
        for name, value in values.items():
            setattr(self, name, value)
        self.version += 1

    def step_smoothing(self, direction: int) -> float:
        """The next smoothing level up (+1) or down (-1); returns the new factor."""
        levels = SMOOTHING_LEVELS
        i = min(range(len(levels)), key=lambda k: abs(levels[k] - self.smoothing))
        self.change(smoothing=levels[max(0, min(len(levels) - 1, i + direction))])
        return self.smoothing


@dataclass(frozen=True)
class Series:
    label: str
    steps: Sequence[int]
    values: Sequence[float | None]
    style: str | None = None  # None: the next of LINE_COLORS (a compared run has its own)


def column_spans(n: int, width: int) -> list[range]:
    """The steps (of ``n``) each of ``width`` columns stands for: a run of steps, or one step over
    several columns when there are fewer steps than columns."""
    return [range(c * n // width, max(c * n // width + 1, (c + 1) * n // width)) for c in range(width)]


def axis_label(value: float, width: int = AXIS_WIDTH - 1) -> str:
    text = number(value)
    if len(text) > width:
        text = f"{value:.1e}"
    return text[:width].rjust(width)


def bounds(values: Sequence[float]) -> tuple[float, float]:
    """A y range around ``values`` that never collapses to a point (a flat series sits mid-height)."""
    lo, hi = min(values), max(values)
    if hi - lo < 1e-12 * max(1.0, abs(hi)):
        pad = abs(hi) * 0.1 or 1.0
        # a flat non-negative series (a ratio stuck at 0) keeps 0 as its floor
        return (max(lo - pad, 0.0) if lo >= 0 else lo - pad), hi + pad
    return lo, hi


def points(series: Series) -> list[tuple[int, float]]:
    return [(s, v) for s, v in zip(series.steps, series.values) if v is not None and math.isfinite(v)]


class _Canvas:
    """Braille dots on a ``width`` x ``height`` grid of cells; each cell remembers which line drew it last."""

    def __init__(self, width: int, height: int, x0: int, x1: int) -> None:
        self.width, self.height, self.x0, self.x1 = width, height, x0, x1
        self.cells = [[0] * width for _ in range(height)]
        self.owner = [[-1] * width for _ in range(height)]

    def dots(self, px: int, lo: int, hi: int, who: int) -> None:
        """The dots ``lo`` to ``hi`` (inclusive) of pixel column ``px``: one cell at a time, not one dot."""
        col, spans = px // 2, _SPANS[px % 2]
        for row in range(lo // 4, hi // 4 + 1):
            top = row * 4
            self.cells[row][col] |= spans[max(lo - top, 0)][min(hi - top, 3)]
            self.owner[row][col] = who

    def line(self, pts: list[tuple[int, float]], y0: float, y1: float, who: int) -> None:
        # one column of dots per x pixel, spanning every value that lands there, joined to the previous
        # pixel's last value: spikes survive downsampling and the line stays connected
        dots_w, dots_h = self.width * 2, self.height * 4
        x0, x1 = self.x0, self.x1
        columns: dict[int, list[int]] = {}  # px -> [lowest, highest, first, last] dot row
        for x, y in pts:
            px = 0 if x1 == x0 else round((x - x0) / (x1 - x0) * (dots_w - 1))
            py = min(dots_h - 1, max(0, round((y1 - y) / (y1 - y0) * (dots_h - 1))))
            if px in columns:
                col = columns[px]
                col[0], col[1], col[3] = min(col[0], py), max(col[1], py), py
            else:
                columns[px] = [py, py, py, py]
        previous: tuple[int, int] | None = None
        for px in sorted(columns):
            lo, hi, first, last = columns[px]
            if previous is not None:  # interpolate across the pixels between two steps
                ppx, py0 = previous
                for x in range(ppx + 1, px + 1):
                    ya = round(py0 + (first - py0) * (x - 1 - ppx) / (px - ppx))
                    yb = round(py0 + (first - py0) * (x - ppx) / (px - ppx))
                    self.dots(x, min(ya, yb), max(ya, yb), who)
            self.dots(px, lo, hi, who)
            previous = (px, last)

    def row(self, r: int, text: Text, styles: Sequence[str]) -> None:
        """Append row ``r`` to ``text``, one span per run of a colour (not one per cell); line ``who``
        is drawn in ``styles[who]``."""
        cells, owner = self.cells[r], self.owner[r]
        chars = "".join([chr(_BRAILLE + bits) if bits else " " for bits in cells])
        offset, start, spans = len(text), 0, text.spans
        whos = [who if bits else -1 for bits, who in zip(cells, owner)]
        for end in range(1, len(whos) + 1):
            if end == len(whos) or whos[end] != whos[start]:
                if whos[start] >= 0:
                    spans.append(Span(offset + start, offset + end, styles[whos[start]]))
                start = end
        text.append(chars)


def _labels(y0: float, y1: float, rows: int, scale: float) -> list[str]:
    """Axis labels per row: top, bottom, and the middle when there is room to spare."""
    out = [""] * rows
    out[0], out[-1] = axis_label(y1 * scale), axis_label(y0 * scale)
    if rows >= 7:
        mid = y1 - (y1 - y0) * (rows // 2) / (rows - 1)
        out[rows // 2] = axis_label((0.0 if abs(mid) < (y1 - y0) * 1e-6 else mid) * scale)
    return out


def line_chart(series: Sequence[Series], width: int, height: int, *, percent: bool = False,
               right: Sequence[Series] = (), marks: Sequence[tuple[int, str]] = ()) -> list[Text]:
    """``height`` rows of ``width`` cells: y labels on the left, braille lines, then an x-axis row.

    ``right`` series get their own scale, labelled on the right. Lines take ``LINE_COLORS`` in
    order (left first) unless a series names its own ``style``; where two share a cell the later
    one's colour wins. ``marks`` (step, short
    label): a tick on the x-axis row at each step in view, its label after it where there is room
    (a live change, docs/steering.md).
    """
    right_w = AXIS_WIDTH if right else 0
    plot_w, plot_h = width - AXIS_WIDTH - right_w, height - 1
    if plot_w < 4 or plot_h < 1:
        return [Text("") for _ in range(max(height, 0))]
    sides = [[(i, points(s)) for i, s in enumerate(series)],
             [(len(series) + j, points(s)) for j, s in enumerate(right)]]
    sides = [[(i, p) for i, p in side if p] for side in sides]
    if not sides[0] and not sides[1]:
        blank = [Text(" " * width) for _ in range(height)]
        blank[plot_h // 2] = Text("no data yet".center(width), "dim")
        return blank
    styles = [s.style or LINE_COLORS[i % len(LINE_COLORS)] for i, s in enumerate([*series, *right])]
    xs = [x for side in sides for _, p in side for x, _ in p]
    canvas = _Canvas(plot_w, plot_h, min(xs), max(xs))
    scale = 100.0 if percent else 1.0
    labels: list[list[str]] = []
    for side in sides:
        if not side:
            labels.append([""] * plot_h)
            continue
        y0, y1 = bounds([y for _, p in side for _, y in p])
        for who, pts in side:
            canvas.line(pts, y0, y1, who)
        labels.append(_labels(y0, y1, plot_h, scale))
    rows: list[Text] = []
    for r in range(plot_h):
        row = Text().append(labels[0][r].ljust(AXIS_WIDTH - 1) + "│", "dim")
        canvas.row(r, row, styles)
        if right:
            row.append("│" + labels[1][r].strip().ljust(AXIS_WIDTH - 1), "dim")
        rows.append(tidy(row))
    left, last = str(canvas.x0), str(canvas.x1)
    axis = " " * AXIS_WIDTH + left + last.rjust(plot_w - len(left))
    rows.append(tidy(_marked(axis[:width].ljust(width), canvas, marks)))
    return rows


def _marked(axis: str, canvas: _Canvas, marks: Sequence[tuple[int, str]]) -> Text:
    """The x-axis row with a ``▲`` and its label at each mark's column (a later mark's label wins)."""
    cells = list(axis)
    ticks: list[int] = []
    x0, x1, dots_w = canvas.x0, canvas.x1, canvas.width * 2
    for step, label in marks:
        if not x0 <= step <= x1:
            continue
        col = AXIS_WIDTH + (0 if x1 == x0 else round((step - x0) / (x1 - x0) * (dots_w - 1))) // 2
        text = "▲" + label
        for i, char in enumerate(text[: len(cells) - col]):
            cells[col + i] = char
        ticks.append(col)
    out = Text("".join(cells), "dim")
    for col in ticks:
        out.stylize("bold yellow", col, col + 1)
    return out


def heat_strip(columns: Sequence[Sequence[float]], width: int, height: int,
               lo: float, hi: float) -> list[list[Style | None]]:
    """A ``height`` x ``width`` grid of cell styles: column c is the histogram of ``columns`` mapped
    to it (time runs left to right), row 0 the top (highest) bin; brighter = more of the column's values."""
    grid: list[list[Style | None]] = [[None] * width for _ in range(height)]
    n = len(columns)
    if n == 0 or width <= 0 or height <= 0:
        return grid
    span = hi - lo if hi > lo else 1.0
    for c in range(width):
        first = c * n // width
        last = max(first + 1, (c + 1) * n // width)
        counts = [0] * height
        total = 0
        for values in columns[first:last]:
            for v in values:
                b = min(height - 1, max(0, int((v - lo) / span * height)))
                counts[height - 1 - b] += 1
                total += 1
        for r, count in enumerate(counts):
            if count:
                share = count / total
                grid[r][c] = HEAT[min(len(HEAT) - 1, int(share * len(HEAT)))]
    return grid
