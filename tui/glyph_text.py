"""Rich Text whose styled runs each start on a glyph, so screenshots render as the terminal does."""

from __future__ import annotations

from rich.style import Style
from rich.text import Span, Text

_BLANK = Style(bold=False)  # a style that draws a blank like no style at all, but ends a run


def tidy(text: Text) -> Text:
    """Make every styled run of ``text`` start on a glyph (or hold only blanks), in place.

    A screenshot (SVG) writes one text element per run of equal style, placed at its cell; some
    renderers drop a run's leading blanks and squeeze the rest into its width, so "15,360" followed
    by a dim "   tokens/s" reads "15,360tokens/s". Spans with glyphs are trimmed of their blanks,
    and blanks that still open a run are given a run of their own.
    """
    plain = text.plain
    spans = []
    for span in text.spans:
        start, end = span.start, span.end
        if plain[start:end].strip(" "):  # an all-blank span (padding of a key cap) is harmless
            while plain[start] == " ":
                start += 1
            while plain[end - 1] == " ":
                end -= 1
        spans.append(Span(start, end, span.style))
    for edge in sorted({0, *(s.start for s in spans), *(s.end for s in spans)}):
        stop = edge
        while stop < len(plain) and plain[stop] == " ":
            stop += 1
        if edge < stop < len(plain):
            spans.append(Span(edge, stop, _BLANK))
    text.spans = spans
    return text
