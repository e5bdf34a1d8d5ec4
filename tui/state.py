"""What the dashboard knows about the run, folded from events. No Textual here.

``RunState.apply`` is the one writer of this state: it takes one event, the worker's (a protocol
frame) or the dashboard's own (tui/run_events.py: a restart begun, a worker ended, the run's error),
and returns the names of the parts of the screen it changed, so the app can batch many events and
refresh each widget at most once per flush (docs/architecture.md, "Dashboard").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, assert_never, get_args

from grpo_tui.common.blas_warning import PREFIX as SLOW_BLAS
from grpo_tui.common.live_settings import live_keys, set_value, toml_value, value_at
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import Config
from grpo_tui.protocol.config_overrides import parse_key
from grpo_tui.protocol.control import LIVE_STATUSES
from grpo_tui.protocol.messages import finite
from grpo_tui.tui.format import duration
from grpo_tui.tui.plot import Series
from grpo_tui.tui.run_events import (
    DashboardEvent,
    DashboardNote,
    OpenedReadOnly,
    PauseAsked,
    RestartBegan,
    RunAge,
    RunFailed,
    StopAsked,
    WorkerEnded,
    WorkerSilent,
)
from grpo_tui.tui.series import HISTORY_LIMIT, RewardSpread, SeriesBook
from grpo_tui.tui.views import Part

RunStatus = Literal["starting", "running", "paused", "stopping", "done", "error", "restarting"]

# (key in Step, tile title); the order of the metric tiles.
METRICS: tuple[tuple[str, str], ...] = (
    ("loss", "loss"),
    ("reward", "reward"),
    ("reward_std", "reward std"),
    ("kl", "kl"),
    ("completion_mean_length", "mean length"),
    ("training_tokens_per_s", "tokens/s"),
)
ETA_WINDOW = 20  # recent steps used for the time-per-step estimate

ZERO_STD_NOTE = (
    "⚠ loss is 0: every group got identical rewards (frac_reward_zero_std = 1), so no advantage and no "
    "learning signal this step. Try a larger group, a higher temperature or harder prompts."
)


def ema(values: Sequence[float | None], smoothing: float) -> list[float | None]:
    """Exponential moving average with TensorBoard's debiasing; ``smoothing`` in [0, 1).

    ``None`` (a NaN step) is passed through and does not reset the average.
    """
    out: list[float | None] = []
    last, weight = 0.0, 0.0
    for v in values:
        if v is None:
            out.append(None)
            continue
        last = last * smoothing + (1 - smoothing) * v
        weight = weight * smoothing + (1 - smoothing)
        out.append(last / weight if weight else v)
    return out


@dataclass
class LogEntry:
    level: str
    message: str
    source: str  # "worker" (log frame), "stderr", "dashboard"


@dataclass
class RunTotals:
    """Best and mean reward and loss over the whole run (every step the worker has trained, a
    resume's history included: mlx-node's stats after a resume)."""

    best_reward: float | None = None
    best_loss: float | None = None
    _sums: list[float] = field(default_factory=lambda: [0.0, 0.0])
    _counts: list[int] = field(default_factory=lambda: [0, 0])

    @classmethod
    def of(cls, agg: m.Aggregates) -> RunTotals:
        """The totals a resume goes on from (the store's, over every step of the run)."""
        totals = cls(best_reward=finite(agg.best_reward), best_loss=finite(agg.best_loss))
        totals._counts = [agg.reward_steps, agg.loss_steps]
        totals._sums = [(agg.avg_reward or 0.0) * agg.reward_steps, (agg.avg_loss or 0.0) * agg.loss_steps]
        return totals

    def add(self, reward: float | None, loss: float | None) -> None:
        for i, value in enumerate((finite(reward), finite(loss))):
            if value is not None:
                self._sums[i] += value
                self._counts[i] += 1
        if (r := finite(reward)) is not None:
            self.best_reward = r if self.best_reward is None else max(self.best_reward, r)
        if (l := finite(loss)) is not None:
            self.best_loss = l if self.best_loss is None else min(self.best_loss, l)

    @property
    def mean_reward(self) -> float | None:
        return self._sums[0] / self._counts[0] if self._counts[0] else None

    @property
    def mean_loss(self) -> float | None:
        return self._sums[1] / self._counts[1] if self._counts[1] else None


@dataclass
class RunState:
    clock: Callable[[], float]
    status: RunStatus = "starting"
    pausing: bool = False  # a pause was asked for and the running step has not ended yet
    stall_after_s: float = 30.0  # a running worker silent this long (or three steps) is said to be silent
    last_heard: float = 0.0  # the clock at its last frame
    silent: WorkerSilent | None = None  # it has said nothing for a while (the header says so)
    phase: str = "loading"
    phase_message: str = "starting the worker"
    worker_version: str = ""
    model: str = ""
    model_path: str = ""
    run_name: str = ""
    output_dir: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    database: m.DatabasePath | None = None
    epoch: int = 0  # 0-based, as the worker counts; shown 1-based
    total_epochs: int = 1
    ranks: int = 1  # data-parallel ranks, and their mx.distributed backend
    backend: str = ""
    step: int = 0
    total_steps: int = 0
    steps_per_epoch: int = 0
    step_in_epoch: int = 0
    last_step: m.Step | None = None
    samples: list[m.Sample] = field(default_factory=list)
    sample_display: m.SampleDisplay | None = None  # the mode the worker says it uses (None: not said yet)
    checkpoints: list[m.Checkpoint] = field(default_factory=list)
    evals: list[m.Eval] = field(default_factory=list)  # held-out evaluations, by step and decoding mode
    changes: list[m.SettingChanged] = field(default_factory=list)  # live changes, in the order applied (docs/steering.md)
    findings: dict[str, m.Finding] = field(default_factory=dict)  # the run doctor's, those that hold now (docs/doctor.md)
    slow_blas: bool = False  # the worker warned that it runs on the reference BLAS
    total_tokens: int = 0
    totals: RunTotals = field(default_factory=RunTotals)  # best and mean reward and loss of the whole run
    error: str = ""
    fatal: m.Error | None = None  # the worker's last fatal error frame (how it ended, where its log is)
    complete: m.Complete | None = None
    started_at: float = 0.0
    ended_at: float | None = None
    step_ms: deque[float] = field(default_factory=lambda: deque(maxlen=ETA_WINDOW))
    eta_ms: deque[float] = field(default_factory=lambda: deque(maxlen=ETA_WINDOW))  # step_ms but a worker's first
    compiling: bool = True  # the next step is a worker's first: it compiles, so the ETA leaves it out
    # every metric of every step: the one home of the history the tiles, the main chart and the Charts tab draw
    book: SeriesBook = field(default_factory=SeriesBook)
    spread: RewardSpread = field(default_factory=RewardSpread)  # each step's completion rewards

    def __post_init__(self) -> None:
        self.started_at = self.last_heard = self.clock()

    # ------------------------------------------------------------ derived values

    @property
    def zero_std(self) -> bool:
        """Every group had equal rewards, so every advantage (and the loss) is 0."""
        return self.last_step is not None and self.last_step.frac_reward_zero_std == 1.0

    @property
    def no_signal_note(self) -> str | None:
        """The banner for a step without a learning signal: what the worker's warning says, the
        worse cases (every reward None, one reward for the whole batch) told apart."""
        step = self.last_step
        if step is None or step.frac_reward_zero_std != 1.0:
            return None
        rewards = step.completion_rewards
        present = [r for r in rewards if r is not None]
        stops = "; the run stops after training.silent_patience such steps in a row (Logs tab)"
        if rewards and not present:
            return ("⚠ every reward of this step is None: the reward functions scored nothing, so nothing is learned. "
                    "Check them and the data columns they read" + stops)
        if rewards and len(present) == len(rewards) and max(present) - min(present) <= 1e-12:
            return (f"⚠ every completion of this step got the same reward ({present[0]:.4g}): no advantage, nothing "
                    "is learned. The task may be always (or never) solved, or the reward may not depend on the "
                    "completion" + stops)
        return ZERO_STD_NOTE

    def elapsed(self) -> float:
        return (self.ended_at if self.ended_at is not None else self.clock()) - self.started_at

    def eta_seconds(self) -> float | None:
        if not self.eta_ms or not self.total_steps or self.status in ("done", "error"):
            return None
        per_step = sum(self.eta_ms) / len(self.eta_ms) / 1000.0
        return max(self.total_steps - self.step, 0) * per_step

    @property
    def history_steps(self) -> deque[int]:
        """The steps of the history kept (the last ``HISTORY_LIMIT``), in order."""
        return self.book.steps

    def series(self, key: str) -> list[float | None]:
        """One metric over ``history_steps`` (None where a step lacks it)."""
        return self.book.column(key)

    def eval_curves(self) -> list[Series]:
        """The eval curves, (label, steps, values) each: one per decoding mode the run evaluates
        (greedy first; ``eval.also_sampled`` makes two), accuracy when the run has an accuracy reward."""
        key = "accuracy" if any(e.accuracy is not None for e in self.evals) else "reward"
        modes = [greedy for greedy in (True, False) if any(e.greedy == greedy for e in self.evals)]
        curves = []
        for greedy in modes:
            of_mode = [e for e in self.evals if e.greedy == greedy]
            label = f"eval {key}" if len(modes) == 1 else f"eval {'greedy' if greedy else 'sampled'} {key}"
            curves.append(Series(label, [e.step for e in of_mode], [finite(getattr(e, key)) for e in of_mode]))
        return curves or [Series(f"eval {key}", [], [])]

    def live_settings(self, file: Config) -> list[tuple[str, str, str]]:
        """The ``t`` screen's rows: each live key, its value now (the worker's config, the live changes
        since in it) and in ``file`` (the config file with the run's ``--set`` items), as TOML text."""
        rows = []
        for key in live_keys(file):
            now = at(self.config, key) if self.config else value_at(file, key)
            rows.append((key, toml_value(now), toml_value(value_at(file, key))))
        return rows

    # ------------------------------------------------------------ folding events

    def apply(self, event: m.Event | DashboardEvent, *, charted: bool = True) -> set[Part]:
        """``_fold`` the event; a frame of the worker also ends a silence (``WorkerSilent``)."""
        if isinstance(event, get_args(DashboardEvent)):
            return self._fold(event, charted)
        self.last_heard = self.clock()
        if self.silent is None:
            return self._fold(event, charted)
        self.silent = None
        return self._fold(event, charted) | {"header"}

    def quiet_for(self) -> float | None:
        """Seconds since the running worker's last frame (None unless it is running)."""
        return self.clock() - self.last_heard if self.status == "running" else None

    def silence_after(self) -> float:
        """How long a running worker may say nothing before the header says so: the larger of
        ``stall_after_s`` and three of its mean steps (a long step is not a stall)."""
        mean_step = sum(self.step_ms) / len(self.step_ms) / 1000 if self.step_ms else 0.0
        return max(self.stall_after_s, 3 * mean_step)

    def _fold(self, event: m.Event | DashboardEvent, charted: bool) -> set[Part]:
        """Fold one event in; returns the names of the parts of the screen to refresh. A step that
        is not ``charted`` (more than ``HISTORY_LIMIT`` steps follow it in the batch, as ``attach``
        folds a run's history) only counts: its charts would drop it anyway.

        A ``match`` over the closed unions: a new event type without a case fails ``assert_never``
        (and tests/tui/test_state.py)."""
        match event:
            case m.Step() if not charted:
                self._count_step(event)
                return set()
            case (RunFailed() | WorkerEnded() | RestartBegan() | StopAsked() | PauseAsked() | WorkerSilent() | OpenedReadOnly()
                  | RunAge() | DashboardNote()):
                return fold_dashboard_event(self, event)
            case m.Hello():
                return self._on_hello(event)
            case m.Status():
                return self._on_status(event)
            case m.Init():
                return self._on_init(event)
            case m.DatabasePath():
                return self._on_database_path(event)
            case m.ResumeState():
                return self._on_resume_state(event)
            case m.EpochStart():
                return self._on_epoch_start(event)
            case m.Step():
                return self._on_step(event)
            case m.Sample():
                return self._on_sample(event)
            case m.Checkpoint():
                self.checkpoints.append(event)
                return {"checkpoints"}
            case m.Eval():
                self.evals = [e for e in self.evals if (e.step, e.greedy) != (event.step, event.greedy)] + [event]
                return {"metrics"}
            case m.SampleDisplayChanged():
                self.sample_display = event.mode
                return {"samples"}
            case m.Paused() | m.Resumed():
                self.pausing = False
                if self.status != "stopping":
                    self.status = "paused" if isinstance(event, m.Paused) else "running"
                return {"header", "bindings"}
            case m.SettingChanged():  # a live change (docs/steering.md): the Config tab lists them
                self.changes.append(event)
                self.book.mark(event.step, event.key)
                set_value(self.config, event.key, event.new)  # the config shown is the effective one
                if event.total_steps is not None:
                    self.total_steps = event.total_steps
                return {"header", "progress", "config"}
            case m.SettingRefused():  # said in the log (``log_entry_for``); nothing in the run changed
                return set()
            case m.StepBarrier():  # GRPOTrainer's callbacks answer it within moments: not a pause to show
                return set()
            case m.Finding():  # the run doctor's word: the header's health badge, the Doctor tab, the log
                if event.cleared:
                    self.findings.pop(event.name, None)
                else:
                    self.findings[event.name] = event
                return {"header", "doctor"}
            case m.Complete():
                return self._on_complete(event)
            case m.Error():
                if event.fatal:
                    self.status, self.error, self.fatal = "error", event.message, event
                    return {"header", "bindings"}
                return set()
            case m.Log() if event.level == "warning" and event.message.startswith(SLOW_BLAS):
                self.slow_blas = True  # also in the header: every step is several times slower
                return {"header"}
            case m.EpochEnd() | m.Log():  # shown in the log only (``log_entry_for``)
                return set()
            case _:
                assert_never(event)

    def _on_hello(self, e: m.Hello) -> set[Part]:
        self.worker_version, self.compiling = e.worker_version, True  # a new worker (a restart too) compiles again
        return {"header"}

    def _on_status(self, e: m.Status) -> set[Part]:
        self.phase, self.phase_message = e.phase, e.message
        if self.status in ("starting", "restarting") and e.phase in ("generating", "scoring", "training", "evaluating"):
            self.status = "running"
        return {"header"}

    def _on_init(self, e: m.Init) -> set[Part]:
        self.model, self.model_path, self.config = e.model, e.model_path, e.config
        self.total_steps, self.steps_per_epoch = e.total_steps, e.steps_per_epoch
        self.total_epochs, self.output_dir = max(e.num_epochs, 1), e.output_dir
        self.ranks, self.backend = e.ranks, e.backend
        self.run_name = self.run_name or (e.config.get("name") or "")
        if e.sample_display is not None:  # a restarted worker starts with the config's (its supervisor tells it again)
            self.sample_display = e.sample_display
        return {"header", "config", "progress", "samples"}

    def _on_database_path(self, e: m.DatabasePath) -> set[Part]:
        self.database, self.run_name = e, e.run_name or self.run_name
        return {"header", "database"}

    def _on_resume_state(self, e: m.ResumeState) -> set[Part]:
        self.step, self.epoch, self.total_epochs = e.step, e.epoch, max(e.total_epochs, 1)
        self.step_in_epoch, self.steps_per_epoch = e.step_in_epoch, e.steps_per_epoch
        self.evals = []  # the worker sends the stored ones again after resume_state
        self.book.clear()
        self.spread.clear()
        self.changes = list(e.changes)  # the live changes the run goes on with
        for change in e.changes:
            self.book.mark(change.step, change.key)
        self.totals = RunTotals.of(e.aggregates)  # the whole run's, older steps than the history's too
        for row in e.history:
            self._record(row.step, row)
            self.spread.add_step(row.step, row.completion_rewards)
        self.total_tokens = e.aggregates.total_tokens
        if e.aggregates.avg_generation_ms is not None and e.aggregates.avg_training_ms is not None:
            self.step_ms.append(e.aggregates.avg_generation_ms + e.aggregates.avg_training_ms)
            self.eta_ms.append(self.step_ms[-1])
        return {"header", "metrics", "progress", "stats"}

    def _on_epoch_start(self, e: m.EpochStart) -> set[Part]:
        self.epoch, self.total_epochs = e.epoch, max(e.total_epochs, 1)
        self.steps_per_epoch, self.step_in_epoch = e.steps_in_epoch or self.steps_per_epoch, 0
        return {"header", "progress"}

    def _on_step(self, e: m.Step) -> set[Part]:
        self._count_step(e)
        self._record(e.step, e)
        self.spread.add_step(e.step, e.completion_rewards)
        return {"header", "metrics", "progress", "stats"}

    def _count_step(self, e: m.Step) -> None:
        """A step's counters only (``apply``'s step that is not ``charted``)."""
        if self.status in ("starting", "restarting"):
            self.status = "running"
        if e.epoch != self.epoch:
            self.epoch, self.step_in_epoch = e.epoch, 0
        self.step, self.last_step = e.step, e
        self.totals.add(e.reward, e.loss)
        self.step_in_epoch += 1
        self.total_tokens += e.num_tokens
        parts = [finite(e.generation_ms), finite(e.scoring_ms), finite(e.training_ms)]
        if any(p is not None for p in parts):
            self.step_ms.append(sum(p or 0.0 for p in parts))
            self.eta_ms.extend([] if self.compiling else [self.step_ms[-1]])
        self.compiling = False

    def _record(self, step: int, row: m.Step) -> None:
        self.book.append_step(step, row)

    def _on_sample(self, e: m.Sample) -> set[Part]:
        if self.samples and self.samples[0].step != e.step:
            self.samples = []
        self.samples.append(e)
        if e.display is not None:
            self.sample_display = e.display
        self.spread.add_sample(e.step, e.reward)  # the distribution's fallback when steps carry none
        return {"samples"}

    def _on_complete(self, e: m.Complete) -> set[Part]:
        # A run that stopped on a fatal error (e.g. non-finite steps) keeps showing the error.
        status: RunStatus = "error" if self.status == "error" and e.status == "stopped" else "done"
        self.complete, self.status, self.phase, self.ended_at = e, status, "idle", self.clock()
        self.phase_message = f"{e.status} after {e.total_steps} steps in {duration(e.seconds)}"
        return {"header", "bindings", "progress"}


def fold_dashboard_event(state: RunState, e: DashboardEvent) -> set[Part]:
    """What the dashboard itself learned (tui/run_events.py), into ``state`` (``RunState.apply``'s)."""
    match e:
        case RunFailed(message=message):
            state.status, state.error, state.ended_at = "error", message, state.clock()
        case WorkerEnded(error=error):
            state.status, state.ended_at, state.error = "error", state.clock(), error
        case RestartBegan():
            state.status, state.complete, state.error, state.fatal, state.ended_at = "restarting", None, "", None, None
            state.phase = "loading"
            state.phase_message = "retrying" if e.retry else f"restart {e.attempt}: resuming from the latest checkpoint"
        case StopAsked():
            state.status, state.phase_message, state.pausing = "stopping", "waiting for the final checkpoint", False
        case WorkerSilent():
            state.silent = e
        case PauseAsked():
            state.pausing = state.status == "running"  # said at once; the worker pauses after the running step
        case OpenedReadOnly():
            if state.status in LIVE_STATUSES:  # it never said complete: killed, or it lost its supervisor
                state.status, state.phase_message = "error", "the run is not running"
        case RunAge(seconds=seconds):
            state.started_at = (state.ended_at if state.ended_at is not None else state.clock()) - seconds
            return set()
        case DashboardNote():
            return set()
        case _:
            assert_never(e)
    return {"header", "bindings"}


def log_entry_for(event: m.Event | DashboardEvent) -> LogEntry | None:
    """The log line an event produces (log frames, errors, checkpoints, pauses, the dashboard's
    notes and the run's error), if any."""
    if isinstance(event, (RunFailed, WorkerEnded)):
        return LogEntry("error", event.message if isinstance(event, RunFailed) else event.error, "dashboard")
    if isinstance(event, DashboardNote):
        return LogEntry(event.level, event.message, "dashboard")
    if isinstance(event, m.Log):
        return LogEntry(event.level, event.message, "worker")
    if isinstance(event, m.Error):
        text = event.message + (("\n" + event.traceback) if event.traceback else "")
        return LogEntry("error", text, "worker")
    if isinstance(event, m.Checkpoint):
        return LogEntry("info", f"checkpoint ({event.kind}) at step {event.step}: {event.path}", "dashboard")
    if isinstance(event, m.Paused):
        return LogEntry("info", f"paused at step {event.step}", "dashboard")
    if isinstance(event, m.Resumed):
        return LogEntry("info", f"resumed at step {event.step}", "dashboard")
    if isinstance(event, m.Complete):
        return LogEntry("info", f"run {event.status}: {event.total_steps} steps", "dashboard")
    if isinstance(event, m.Finding):
        level = {"info": "info", "warning": "warning", "critical": "error"}[event.severity]
        return LogEntry("info" if event.cleared else level, f"doctor: {event.name}: {event.message}", "worker")
    if isinstance(event, m.SettingRefused):
        return LogEntry("warning", f"not changed ({event.source}): {event.message}", "worker")
    if isinstance(event, m.Status) and event.message:
        return LogEntry("debug", f"[{event.phase}] {event.message}", "dashboard")
    return None


def group_of(samples: Iterable[m.Sample], group: int) -> list[m.Sample]:
    """The completions of one prompt, in generation order."""
    return sorted((s for s in samples if s.group == group), key=lambda s: s.index)


def at(config: dict[str, Any], key: str) -> Any:
    """The value of the dotted ``key`` in a config dict (None where it is not)."""
    node: Any = config
    for seg in parse_key(key, key, "<live>"):
        try:
            node = node[seg]
        except (KeyError, IndexError, TypeError):
            return None
    return node


