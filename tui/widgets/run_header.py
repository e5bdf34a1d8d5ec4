"""The one-line run header: model · run · epoch · step · state · elapsed · ETA."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from grpo_tui.tui.format import MISSING, duration
from grpo_tui.tui.inert_text import clean
from grpo_tui.tui.state import RunState
from grpo_tui.tui.status_style import STATUS_GLYPHS, status_style
from grpo_tui.tui.glyph_text import tidy

def health_badge(state: RunState) -> tuple[str, str]:
    """"2 warnings · 1 critical" (what holds now) and its style, from the run doctor's findings."""
    held = [f for f in state.findings.values() if f.name != "probe" or state.step == 0]  # the probe: until step 1
    counts = {level: sum(f.severity == level for f in held) for level in ("critical", "warning", "info")}
    if not counts["critical"] and not counts["warning"]:
        return "✓ ok (doctor)", "green"
    parts = [f"{n} {level}" + ("s" if n > 1 and level == "warning" else "") for level, n in counts.items() if n and level != "info"]
    return "⚕ " + " · ".join(parts), "bold red" if counts["critical"] else "bold yellow"


class RunHeader(Static):
    _shown: Text | None = None

    def show(self, state: RunState) -> None:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(" grpo-tui ", "bold reverse")
        text.append(f" {clean(state.model, single_line=True) or MISSING}", "bold")
        text.append(f" · run {clean(state.run_name, single_line=True) or MISSING}")
        text.append(f" · epoch {state.epoch + 1}/{state.total_epochs}")
        text.append(f" · step {state.step}/{state.total_steps or '?'}")
        if state.ranks > 1:
            text.append(f" · {state.ranks} ranks ({clean(state.backend, single_line=True)})")
        text.append(" · ")
        text.append(STATUS_GLYPHS[state.status], status_style(state.status))
        if state.pausing:
            text.append(" (pausing after this step…)", "bold yellow")
        if state.status in ("starting", "restarting") or (state.status == "running" and state.phase != "training"):
            phase = state.phase + (f": {clean(state.phase_message, single_line=True)}" if state.phase_message else "")
            text.append(f" ({phase})", "dim")
        text.append(f" · elapsed {duration(state.elapsed())}")
        text.append(f" · ETA {duration(state.eta_seconds())}")
        if state.silent is not None:  # no frame for longer than its steps take: stopped, hung or lost
            what = f" (its process is {state.silent.process})" if state.silent.process else ""
            text.append(f" · ⚠ no word from the worker for {duration(state.silent.seconds)}{what}", "bold yellow")
        if state.findings:  # the run doctor's health badge (docs/doctor.md)
            text.append(" · ")
            text.append(*health_badge(state))
        if state.slow_blas:
            text.append(" · ⚠ slow BLAS (see Logs)", "bold yellow")
        tidy(text)
        if text != self._shown:  # called on every flush and every second: redraw only a change
            self._shown = text
            self.update(text, layout=False)  # one line of fixed height: never a re-layout
