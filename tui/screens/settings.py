"""``t``: the run's live settings (docs/steering.md): each key that can change while the run trains,
its value now (edited in place), and the value in the config file. ``enter`` applies the values
edited, ``esc`` cancels. Dismissed with the ``KEY=VALUE`` items to send (the worker checks them as
``--set`` does and answers every viewer), or None."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from grpo_tui.tui.inert_text import inert


class SettingsScreen(ModalScreen[list[str] | None]):
    """``rows``: (key, value now, value in the file), each value as TOML text."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]
    DEFAULT_CSS = """
    SettingsScreen { align: center middle; }
    SettingsScreen #settings-box { width: 96; max-width: 100%; height: auto; max-height: 90%; border: thick $accent;
                                   padding: 0 1; background: $surface; }
    SettingsScreen #settings-rows { height: auto; max-height: 30; }
    SettingsScreen .setting { height: 1; }
    SettingsScreen .setting-key { width: 36; }
    SettingsScreen .setting Input { width: 1fr; height: 1; border: none; padding: 0 1; }
    SettingsScreen .setting-file { width: 22; color: $text-muted; }
    """

    def __init__(self, rows: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        with Vertical(id="settings-box"):
            yield Static(Text.assemble(("Live settings", "bold"), ("  a change applies from the step after the one "
                                                                    "running (the Config tab lists them)", "dim")))
            with VerticalScroll(id="settings-rows"):
                for i, (key, now, file) in enumerate(self.rows):
                    with Horizontal(classes="setting"):
                        yield Static(Text(key), classes="setting-key")
                        yield Input(now, id=f"setting-{i}", compact=True)
                        yield Static(inert(f"file: {file}", single_line=True), classes="setting-file")
            yield Static(Text("enter applies the values you edited · esc cancels · tab / shift+tab: next / previous",
                              "dim"))

    def on_mount(self) -> None:
        self.query_one("#setting-0", Input).focus()

    def edited(self) -> list[str]:
        """The ``KEY=VALUE`` items whose value differs from the value now."""
        out = []
        for i, (key, now, _) in enumerate(self.rows):
            value = self.query_one(f"#setting-{i}", Input).value.strip()
            if value and value != now:
                out.append(f"{key}={value}")
        return out

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(self.edited())

    def action_cancel(self) -> None:
        self.dismiss(None)
