"""Every number, size, time and duration the dashboard and the Database tab show, with one glyph
for a missing value (docs/architecture.md, "Dashboard").

Pure functions returning plain strings; widgets wrap them (and anything model-written) in inert
``rich.text.Text`` so nothing is parsed as markup.
"""

from __future__ import annotations

import math
import time

MISSING = "—"  # no value yet, not measured, or not finite


def number(value: float | int | str | None) -> str:
    """Any number shown, live or from the store: four significant digits, thousands separators for
    big values, e-notation for tiny and huge ones; integers whole; booleans yes / no; text as is."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, str):
        return value
    if not math.isfinite(value):
        return MISSING
    size = abs(value)
    if size >= 1e6 or (0 < size < 1e-4):
        return f"{value:.2e}"
    if size >= 1000:
        return f"{value:,.0f}"
    if size >= 1:
        return f"{value:.4g}"
    return f"{value:.4f}".rstrip("0").rstrip(".")


def fit_number(value: float | None, width: int) -> str:
    """``number(value)`` in at most ``width`` characters, with fewer digits if need be, or an
    ellipsis: never a number cut short (``-4.02e-0`` read as -4.02 for -4.02e-08)."""
    text = number(value)
    if width <= 0 or len(text) <= width or value is None or not math.isfinite(value):
        return text
    for digits in (1, 0):
        shorter = f"{value:.{digits}e}".replace("e-0", "e-").replace("e+0", "e")
        if len(shorter) <= width:
            return shorter
    return "…"


def whole(value: float | None) -> str:
    """A count or a millisecond time: ``number`` of the value rounded."""
    return MISSING if value is None or not math.isfinite(value) else number(round(value))


def megabytes(value: float | None) -> str:
    """A memory size given in MB: ``812.5 MB`` or ``1.25 GB``."""
    if value is None:
        return MISSING
    return f"{value / 1024:.2f} GB" if value >= 1024 else f"{value:.1f} MB"


def human_size(n: int) -> str:
    """A size in bytes: ``512 B``, ``3.0 MB``."""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def signed(value: float | None) -> str:
    """``number`` with its sign, + included (an advantage)."""
    text = number(value)
    return f"+{text}" if value is not None and value > 0 and text != MISSING else text


def clock(ts: float | None) -> str:
    """Local date and time of a Unix timestamp."""
    if ts is None:
        return MISSING
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def duration(seconds: float | None) -> str:
    """Every length of time shown (elapsed, ETA, a run's length): ``42s``, ``3m05s``, ``2h07m``."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return MISSING
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def eval_note(evals: list) -> str:
    """The eval tile's note: which step the latest evaluation ran at, and its pass@k."""
    if not evals:
        return ""
    last = evals[-1]
    k = f" pass@{last.num_samples} {number(last.pass_at_k)}" if last.num_samples > 1 else ""
    return f"@{last.step}{k}"
