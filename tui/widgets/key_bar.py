"""The keys on offer, as one line of text: a footer that costs a string per change.

Textual's Footer rebuilds a widget per key (mount, CSS, layout) whenever the keys on offer
change, and they change on every focus move and tab switch: in bench/tui_load.py that rebuild
was the bulk of a tab switch. This bar redraws one Text, and only when the keys really differ.
"""

from __future__ import annotations

from rich.text import Text
from textual.screen import Screen
from textual.widgets import Static

from grpo_tui.tui.glyph_text import tidy


class KeyBar(Static):
    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        height: 1;
        background: $footer-background;
        color: $footer-description-foreground;
    }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._shown: tuple[tuple[str, str, bool], ...] | None = None

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)
        self.call_after_refresh(self._bindings_changed, self.screen)

    def _bindings_changed(self, screen: Screen[object]) -> None:
        if not self.is_attached or screen is not self.screen:
            return
        keys: list[tuple[str, str, bool]] = []
        seen: set[str] = set()
        for _node, binding, enabled, _tooltip in screen.active_bindings.values():
            if not binding.show or binding.action in seen:  # one entry per action, like Footer
                continue
            seen.add(binding.action)
            keys.append((self.app.get_key_display(binding), binding.description, enabled))
        shown = tuple(keys)
        if shown == self._shown:
            return
        self._shown = shown
        text = Text(no_wrap=True, overflow="ellipsis", end="")
        for key, description, enabled in shown:
            cap = "reverse" if enabled else "dim reverse"
            text.append(" ", cap).append(key, "bold " + cap).append(" ", cap)
            text.append(f" {description} ", "" if enabled else "dim")
        self.update(tidy(text), layout=False)

    def keys(self) -> list[str]:
        """The descriptions on offer (tests)."""
        return [description for _, description, enabled in self._shown or () if enabled]
