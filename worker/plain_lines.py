"""Plain-text control lines, so a script can drive ``grpo-tui worker --plain`` through a pipe:

    PAUSE | RESUME | SAVE_CHECKPOINT | STOP | SET sample_display=all|best_worst|random
    SET training.learning_rate=5e-6   (any live setting, as ``--set`` reads it: docs/steering.md)

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
HELP = ("PAUSE, RESUME, SAVE_CHECKPOINT, STOP, SET sample_display=" + "|".join(_DISPLAYS)
        + ", SET KEY=VALUE (a live setting, e.g. SET training.learning_rate=5e-6) or a JSON command")


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
        if not eq or not key.strip():
            return f"no KEY=VALUE in {_short(text)}; expected SET training.learning_rate=5e-6 or SET sample_display=" + "|".join(_DISPLAYS)
        if key.strip().lower() != "sample_display":  # a live setting: checked as --set checks it (worker/live_settings.py)
            return m.SetSetting(key=key.strip(), value=value.strip(), source="stdin")
        value = value.strip().strip("\"'").lower()
        if value not in _DISPLAYS:
            return f"sample_display={value!r} is not one of " + ", ".join(_DISPLAYS)
        return m.SetSampleDisplay(mode=value)  # type: ignore[arg-type]
    return f"unknown command line {_short(text)}; expected {HELP}"


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")
