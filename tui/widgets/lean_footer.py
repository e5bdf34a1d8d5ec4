"""Textual's Footer, without its leak.

Each FooterKey binds to the footer's ``compact`` reactive, and the footer keeps that watcher until
``compact`` changes (which it never does here). The footer is rebuilt whenever the keys on offer
change (focus moves, a tab switches, the run pauses), so without pruning every rebuild kept the old
keys alive: about 0.5 MB per tab switch in bench/tui_load.py.
"""

from __future__ import annotations

from textual.widgets import Footer


class LeanFooter(Footer):
    async def recompose(self) -> None:
        await super().recompose()
        for watchers in getattr(self, "__watchers", {}).values():
            watchers[:] = [(node, cb) for node, cb in watchers if node.is_attached and not node._closing]
