"""Plain-text control lines, so a script can drive ``grpo-tui worker --plain`` through a pipe:

    PAUSE | RESUME | SAVE_CHECKPOINT | STOP | SET sample_display=all|best_worst|random

Case-insensitive, surrounding blanks ignored. A line that starts with ``{`` is a JSON command and
is left to the codec. Anything else is answered with a warning that lists what is understood;
nothing stops because of it.
"""

from __future__ import annotations

import typing
from typing import Callable

from grpo_tui.protocol import messages as m

_WORDS: dict[str, Callable[[], m.Command]] = {
    "PAUSE": m.Pause,
    "RESUME": m.Resume,
    "SAVE_CHECKPOINT": m.SaveCheckpoint,
    "SAVE": m.SaveCheckpoint,
    "STOP": m.Stop,
}
_DISPLAYS: tuple[str, ...] = typing.get_args(m.SampleDisplay)
HELP = "PAUSE, RESUME, SAVE_CHECKPOINT, STOP, SET sample_display=" + "|".join(_DISPLAYS) + " or a JSON command"


def is_json(line: str) -> bool:
    return line.lstrip().startswith("{")


def parse_plain(line: str) -> m.Command | str:
    """The command a plain line asks for, or a warning (str) that says why it is not one."""
    text = line.strip()
    word = text.upper()
    if word in _WORDS:
        return _WORDS[word]()
    head, _, rest = text.partition(" ")
    if head.upper() == "SET":
        key, eq, value = rest.partition("=")
        key, value = key.strip().lower(), value.strip().strip("\"'").lower()
        if key != "sample_display" or not eq:
            return f"unknown setting in {_short(text)}; expected SET sample_display=" + "|".join(_DISPLAYS)
        if value not in _DISPLAYS:
            return f"sample_display={value!r} is not one of " + ", ".join(_DISPLAYS)
        return m.SetSampleDisplay(mode=value)  # type: ignore[arg-type]
    return f"unknown command line {_short(text)}; expected {HELP}"


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")
