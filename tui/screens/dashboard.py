"""The dashboard's own screen: the one the app composes into, under every pushed screen.

Textual's ``Screen.focused`` is a reactive that repaints the whole screen whenever focus moves,
and every tab switch moves focus into the new tab (tui/actions.py): in bench/tui_load.py that
repaint redrew all ~60 widgets of the screen four times a second. The widgets that gain and lose
focus repaint themselves when their :focus styles change, so nothing else needs redrawing.
"""

from __future__ import annotations

from textual.reactive import Reactive
from textual.screen import Screen
from textual.widget import Widget


class DashboardScreen(Screen[None]):
    focused: Reactive[Widget | None] = Reactive(None, repaint=False)
