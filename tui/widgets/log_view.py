"""The Logs tab's scrolling text, which also moves with mlx-node's (and vi's) keys: ``j`` / ``k`` a
line, ``g`` / ``G`` the first / last (``tui/keys.py``'s ``LOG_KEYS``)."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import BindingType
from textual.widgets import RichLog

from grpo_tui.tui.keys import LOG_KEYS


class LogView(RichLog):
    BINDINGS: ClassVar[list[BindingType]] = [*LOG_KEYS]
