"""The Doctor tab (docs/doctor.md): the run doctor's findings that hold now, one row each (severity,
name, since which step, the numbers behind it); under the table the highlighted finding's sentence,
its suggested change and a small chart of its signal (the step metric it reads, from the Charts
tab's book, its first step marked).

``enter`` asks for its evidence in the Database tab (``ShowEvidence``), ``a`` for its suggested
change through the live settings (``ApplySuggestion``): typed messages up, the screen acts on them
(tui/screens/dashboard.py); ``show`` brings the findings down.
"""

from __future__ import annotations

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Static

from grpo_tui.protocol import messages as m
from grpo_tui.tui.format import number
from grpo_tui.tui.inert_text import clean
from grpo_tui.tui.plot import Series, line_chart
from grpo_tui.tui.series import SeriesBook
from grpo_tui.tui.widgets.list_table import ListTable

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
SEVERITY_STYLE = {"critical": "bold red", "warning": "bold yellow", "info": "cyan"}
# The step metric each finding reads (the Charts tab's column) and its chart's title.
SIGNALS: dict[str, tuple[str, str]] = {
    "no_signal": ("frac_reward_zero_std", "groups with equal rewards"),
    "truncation": ("completion_clipped_ratio", "share of completions cut at the length limit"),
    "pass_rate": ("frac_reward_zero_std", "groups with equal rewards"),
    "entropy_collapse": ("entropy", "token entropy"),
    "kl": ("kl", "KL to the reference"),
    "clipping": ("clip_ratio/region", "clip ratio"),
    "length_hacking": ("completion_mean_length", "mean completion length (tokens)"),
    "repetition": ("completion_mean_length", "mean completion length (tokens)"),
    "reward_dominance": ("reward_std", "reward std"),
    "reward_up_eval_down": ("reward", "reward"),
    "flat_reward": ("reward", "reward"),
    "grad_spike": ("grad_norm", "grad norm"),
    "slowdown": ("step_ms", "ms per step"),
    "converged": ("reward", "reward"),
}
CHART_HEIGHT = 8
COLUMNS = (("severity", 8), ("finding", 18), ("since", 5), ("step", 5), ("numbers", 32))


def numbers_text(finding: m.Finding) -> str:
    return "  ".join(f"{key} {number(value)}" for key, value in finding.numbers.items())


class DoctorPanel(Vertical):
    BINDINGS = [Binding("a", "apply", "apply fix")]

    class ShowEvidence(Message):
        """enter on a finding: the Database tab filtered to its evidence."""

        def __init__(self, finding: m.Finding) -> None:
            super().__init__()
            self.finding = finding

    class ApplySuggestion(Message):
        """a on a finding: its suggested change, through the live settings (source "doctor")."""

        def __init__(self, finding: m.Finding) -> None:
            super().__init__()
            self.finding = finding

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.findings: list[m.Finding] = []  # the table's rows, in order
        self.book: SeriesBook | None = None
        self._drawn: tuple[object, ...] = ()
        self.past: set[str] = set()  # findings shown as before step 1 (the probe, once the run trains)

    def compose(self) -> ComposeResult:
        yield Static(Text("the run doctor has found nothing yet", "dim"), id="doctor-title")
        table: DataTable[object] = ListTable(id="doctor-table", cursor_type="row", zebra_stripes=True)
        for label, width in COLUMNS:
            table.add_column(label, width=width)
        yield table
        yield Static("", id="doctor-message")
        yield Static("", id="doctor-chart")

    # ------------------------------------------------------------ attributes down

    def show(self, findings: dict[str, m.Finding], book: SeriesBook, step: int = 0) -> None:
        """The findings that hold now, the most severe first; the chart follows the book's steps. From
        step 1 on the probe's finding (``probe``, a measurement before step 1) is no longer a problem
        that holds: the run's own findings speak for the run; it stays, dim, last, "before step 1"."""
        self.book = book
        self.past = {"probe"} if step >= 1 and "probe" in findings else set()
        rows = sorted(findings.values(), key=lambda f: (f.name in self.past, SEVERITY_ORDER[f.severity], f.since, f.name))
        key = tuple((f.name, f.severity, f.since, f.step, f.name in self.past, tuple(f.numbers.items())) for f in rows)
        if key != self._drawn:
            self._drawn = key
            self._fill(rows)
        if self.is_on_screen:  # a hidden tab draws its chart when shown
            self._detail()

    def _fill(self, rows: list[m.Finding]) -> None:
        table = self.query_one(DataTable)
        chosen = self.selected()
        self.findings = rows
        table.clear()
        for f in rows:
            if f.name in self.past:  # said before step 1, superseded by the run's own findings
                table.add_row(Text(f.severity, "dim"), Text("probe (before 1)", "dim"), Text("0", "dim"),
                              Text("0", "dim"), Text(numbers_text(f), "dim"), key=f.name)
                continue
            table.add_row(Text(f.severity, SEVERITY_STYLE[f.severity]), f.name, str(f.since), str(f.step),
                          numbers_text(f), key=f.name)
        if chosen is not None and chosen.name in [f.name for f in rows]:
            table.move_cursor(row=[f.name for f in rows].index(chosen.name), animate=False)
        held = [f for f in rows if f.name not in self.past]
        counts = {s: sum(f.severity == s for f in held) for s in SEVERITY_ORDER}
        title = Text()
        if held:
            title.append(" · ".join(f"{n} {s}" for s, n in counts.items() if n), "bold")
            title.append("   enter: its evidence · a: apply its fix", "dim")
        else:
            title.append("✓ the run doctor sees nothing wrong (docs/doctor.md)", "green")
        if len(held) < len(rows):
            title.append("   the probe's word before step 1 is kept below, dim", "dim")
        self.query_one("#doctor-title", Static).update(title)

    def selected(self) -> m.Finding | None:
        table = self.query_one(DataTable)
        row = table.cursor_row
        return self.findings[row] if self.findings and 0 <= row < len(self.findings) else None

    def _detail(self) -> None:
        finding = self.selected()
        message, chart = self.query_one("#doctor-message", Static), self.query_one("#doctor-chart", Static)
        if finding is None:
            message.update("")
            chart.update("")
            return
        text = Text(clean(finding.message, single_line=True))
        if finding.name in self.past:
            text = Text("before step 1 (the run's own findings now speak for it): ", "dim") + text
        if finding.suggestion:
            text.append("\nsuggested change: ", "bold").append(finding.suggestion, "bold cyan")
            text.append("   a applies it from the next step", "dim")
        message.update(text)
        chart.update(self._chart(finding))

    def _chart(self, finding: m.Finding) -> Group | Text:
        if finding.name == "probe":  # measured before step 1: numbers, no curve
            return Text("the probe's numbers (before step 1): " + numbers_text(finding), "dim")
        column, title = SIGNALS.get(finding.name, ("reward", "reward"))
        width = max(self.size.width - 2, 20)
        if self.book is None or not len(self.book):
            return Text("no steps yet", "dim")
        steps = list(self.book.steps)
        series = Series(title, steps, self.book.column(column))
        rows = line_chart([series], width, CHART_HEIGHT, marks=[(finding.since, "since")])
        return Group(Text(f"{title} ({column})", "bold"), *rows)

    def on_resize(self) -> None:
        self._detail()

    def on_show(self) -> None:
        self._detail()

    # ------------------------------------------------------------ messages up

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._detail()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if (finding := self.selected()) is not None:
            self.post_message(self.ShowEvidence(finding))

    def action_apply(self) -> None:
        if (finding := self.selected()) is not None:
            self.post_message(self.ApplySuggestion(finding))
