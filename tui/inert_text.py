"""Model output shown as inert text.

Completions are untrusted: they can hold ANSI escapes that would move the cursor or retitle the
terminal, control characters that garble a line, and Rich markup (``[bold]``, ``[link=…]``) that
must show literally. Everything model-written goes through ``clean`` and is wrapped in
``rich.text.Text`` (never a markup string), so nothing in it is ever interpreted.
"""

from __future__ import annotations

import re

from rich.text import Text

# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ST), other two-byte ESC sequences, and 8-bit CSI.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC, terminated by BEL or ST (or cut short)
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS / SOS / PM / APC strings
    r"|\x1b[@-Z\\-_]?"  # any other ESC (+ one byte)
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
)
# C0 controls except \t and \n, DEL and C1 controls; each becomes a visible placeholder.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
REPLACEMENT = "\ufffd"


def clean(text: str | None, *, single_line: bool = False) -> str:
    """Strip escape sequences and replace control characters with U+FFFD.

    ``\\r\\n`` becomes ``\\n``; a lone ``\\r`` (which would overwrite the line) becomes a placeholder.
    With ``single_line``, newlines and tabs become ``⏎`` / a space so a row stays one row.
    """
    if not text:
        return ""
    text = _ESCAPES.sub(REPLACEMENT, text.replace("\r\n", "\n"))
    text = _CONTROLS.sub(REPLACEMENT, text)
    if single_line:
        text = text.replace("\n", " ⏎ ").replace("\t", " ")
    return text


def inert(text: str | None, style: str = "", *, single_line: bool = False, limit: int | None = None) -> Text:
    """A ``Text`` that shows ``text`` literally (no markup, no escapes), optionally truncated."""
    cleaned = clean(text, single_line=single_line)
    if limit is not None and len(cleaned) > limit:
        cleaned = cleaned[: max(limit - 1, 0)] + "…"
    return Text(cleaned, style=style, no_wrap=single_line, end="")
