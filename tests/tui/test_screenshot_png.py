"""screenshots/make.py --png: a PNG shows what the SVG (and the terminal) shows."""

from __future__ import annotations

import html
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = re.compile(r'<text [^>]*?x="([0-9.]+)" y="([0-9.]+)" textLength="([0-9.]+)"[^>]*>([^<]*)</text>')


def _make():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("screenshots_make", ROOT / "screenshots" / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cells(svg: str) -> dict[tuple[float, float], str]:
    """(x, y) of each box, block or braille glyph -> the glyph, from where its run starts and its cell width."""
    out = {}
    for x, y, length, body in RUN.findall(svg):
        chars = html.unescape(body)
        for i, c in enumerate(chars):
            if ord(c) >= 0x2500:
                out[(round(float(x) + i * float(length) / len(chars), 1), float(y))] = c
    return out


def test_the_png_draws_every_chart_glyph_in_its_own_cell():
    """The compare view's lines and the tiles' sparklines: a converter that ignores textLength
    (rsvg, braille from a wider fallback font) drew a run past the chart's right edge."""
    svg = (ROOT / "screenshots" / "dashboard-compared.svg").read_text(encoding="utf-8")
    pinned = _make().pinned_to_cells(svg)
    assert cells(pinned) == cells(svg)  # the same glyph in the same cell
    runs = [html.unescape(body) for *_, body in RUN.findall(pinned)]
    assert not [r for r in runs if len(r) > 1 and any(ord(c) >= 0x2500 for c in r)]
    assert any(0x2800 < ord(c) < 0x2900 for r in runs for c in r)  # the chart's braille is there
