"""What a status looks like, wherever the dashboard shows one: the live run's state (the header:
its glyph and word, and its style), a stored run's status (the Database tab's runs) and a
completion's finish reason (its generations)."""

from __future__ import annotations

# the live run's state (RunState.status) as the header writes it
STATUS_GLYPHS: dict[str, str] = {
    "starting": "… starting",
    "running": "▶ running",
    "paused": "⏸ paused",
    "stopping": "■ stopping…",
    "done": "✓ done",
    "error": "✗ error",
    "restarting": "↻ restarting",
}

STATUS_STYLE: dict[str, str] = {
    # the live run (RunState.status)
    "starting": "bold", "running": "bold green", "paused": "bold yellow", "stopping": "bold yellow",
    "done": "bold cyan", "error": "bold red", "restarting": "bold magenta",
    # a stored run (the store's runs.status; "running" as above)
    "completed": "cyan", "stopped": "yellow", "crashed": "bold red",
    # a completion's finish reason
    "stop": "", "length": "yellow", "repetition": "red",
}


def status_style(status: str) -> str:
    """The Rich style of ``status``; plain for one this table does not know."""
    return STATUS_STYLE.get(status, "")
