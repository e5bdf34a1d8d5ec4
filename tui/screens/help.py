"""The keys, in one place."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from grpo_tui.tui.views import DISPLAY_MODES, VIEW_TITLES, VIEWS

KEYS = (
    ("p", "pause training (at the next step boundary)"),
    ("r", "resume training"),
    ("s", "save a checkpoint now"),
    ("m", f"cycle the sample display: {' · '.join(DISPLAY_MODES)}"),
    ("t", "tune the live settings: learning rate, sampler, lengths... from the next step on"),
    (f"1-{len(VIEWS)} / tab", f"{' · '.join(VIEW_TITLES[v] for v in VIEWS)} tabs"),
    ("z", "the active tab full screen, and back (esc too)"),
    ("enter", "open the selected sample (g: its group side by side), step, or chart"),
    ("[ / ]", "less / more chart smoothing (EMA), main chart and Charts tab"),
    ("w", "Charts tab: last 100 / last 500 steps / the whole run"),
    ("arrows", "Charts tab: move between charts; enter: full screen"),
    ("l", "cycle the log level filter (Logs tab)"),
    ("C", "compare runs: pick other runs (parent, forks, runs beside it) to draw over the charts"),
    ("a", "Doctor tab: apply the finding's suggested change; enter: its evidence"),
    ("j / k / G", "a row down / up, the last row (tables and the log; g: the log's first line)"),
    ("/", "Database search: the text as typed; fts: a OR b, NOT, pre* for operators"),
    ("text box", "takes every printable key as text (1-6, p, q... too); esc leaves it, tab goes to the next tab"),
    ("ctrl+p", "command palette with the same actions"),
    ("?", "this help"),
    ("d", "detach: close the dashboard, the run goes on (grpo-tui attach returns)"),
    ("q", "quit (while training asks: stop the run, stop it and stay, leave it running, or cancel)"),
)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        text = Text()
        text.append("Keys\n\n", "bold")
        for key, what in KEYS:
            text.append(f"{key:>10}  ", "bold cyan").append(f"{what}\n")
        text.append("\nescape closes this window", "dim")
        with Vertical(id="help-box", classes="dialog"):
            yield Static(text)
