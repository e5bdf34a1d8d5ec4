"""Every metric of every step as a column, for the Charts tab. No Textual here.

``SeriesBook`` is a table indexed by step whose columns appear as keys first show up, so a new
group of charts (per-reward means, eval curves) needs no change here: append a dict of values.
``flatten_step`` turns a ``Step`` frame into such a dict; ``RewardSpread`` keeps each step's
per-completion rewards for the distribution view.
"""

from __future__ import annotations

from collections import deque
from math import isfinite
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from grpo_tui.protocol import messages as m

HISTORY_LIMIT = m.HISTORY_LIMIT  # steps of history kept for the sparklines, the main chart and every book


def _finite(value: object) -> float | None:
    if value.__class__ is float:  # the common case first: a history of 10,000 steps calls this ~10^6 times
        return value if isfinite(value) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return m.finite(float(value))


class SeriesBook:
    """Columns of floats (None: missing or non-finite) aligned on a shared step axis.

    Step frames are flattened when the book is first read after them (``append_step``): a
    dashboard that folds a long history pays for its charts only once the Charts tab shows them."""

    def __init__(self, limit: int = HISTORY_LIMIT) -> None:
        self.limit = limit
        self._steps: deque[int] = deque(maxlen=limit)
        self._columns: dict[str, deque[float | None]] = {}
        self._unread: deque[tuple[int, m.Step]] = deque(maxlen=limit)
        self.version = 0  # bumped on every change: widgets redraw only when it moved
        self.marks: list[tuple[int, str]] = []  # (step, short label) of each live change: a tick on every chart

    @property
    def steps(self) -> deque[int]:
        self._settle()
        return self._steps

    def __len__(self) -> int:
        return len(self.steps)

    def keys(self) -> list[str]:
        self._settle()
        return list(self._columns)

    def append_step(self, step: int, row: m.Step) -> None:
        """Add a step frame's values (``flatten_step``), flattened when the book is next read."""
        self._unread.append((step, row))  # more than ``limit`` unread: the oldest would leave the book anyway
        self.version += 1

    def append(self, step: int, values: Mapping[str, float | None]) -> None:
        """Add one step's values; a key seen for the first time gets a column padded with None."""
        self._settle()
        self._append(step, values)
        self.version += 1

    def _append(self, step: int, values: Mapping[str, float | None]) -> None:
        self._steps.append(step)  # at the limit, every column drops its oldest value with the step
        for key in values:
            if key not in self._columns:
                column: deque[float | None] = deque(maxlen=self.limit)
                column.extend([None] * (len(self._steps) - 1))
                self._columns[key] = column
        for key, column in self._columns.items():
            column.append(_finite(values.get(key)))

    def _settle(self) -> None:
        while self._unread:
            step, row = self._unread.popleft()
            self._append(step, flatten_step(row))

    def clear(self) -> None:
        self._steps.clear()
        self._columns.clear()
        self._unread.clear()
        self.marks.clear()
        self.version += 1

    def mark(self, step: int, key: str) -> None:
        """A live change of ``key`` from ``step`` on (docs/steering.md): a tick with a short label."""
        self.marks.append((step, short_key(key)))
        self.version += 1

    def column(self, key: str) -> list[float | None]:
        self._settle()
        values = self._columns.get(key)
        return list(values) if values is not None else [None] * len(self._steps)

    def latest(self, key: str) -> float | None:
        self._settle()
        for value in reversed(self._columns.get(key, ())):
            if value is not None:
                return value
        return None


def flatten_step(step: m.Step) -> dict[str, float | None]:
    """A step frame (live, or from a resume's history) as flat ``key -> value``; per-reward means as ``rewards/NAME``."""
    out: dict[str, float | None] = {}
    for name in step.__struct_fields__:
        value = getattr(step, name)
        if name in ("step", "epoch"):
            continue
        if isinstance(value, m.ClipRatio):
            for part in value.__struct_fields__:
                out[f"clip_ratio/{part}"] = getattr(value, part)
        elif isinstance(value, dict):
            for key, item in value.items():
                out[f"{name}/{key}"] = item
        elif name == "ranks":  # several ranks: each one's busy time and its wait in collectives
            for r in value:
                out[f"ranks/rank {r.rank} ms"] = r.generation_ms + r.training_ms
                out[f"ranks/rank {r.rank} all-reduce ms"] = r.all_reduce_ms
        elif name == "all_reduce_bytes" and not getattr(step, "ranks", None):
            continue  # one rank sends nothing: no flat zero chart
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = value
    parts = (step.generation_ms, step.scoring_ms, step.training_ms)
    out["step_ms"] = sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None
    return out


@dataclass
class Spread:
    """One step's completion rewards (all of them, or the samples the worker chose to send)."""

    step: int
    rewards: list[float] = field(default_factory=list)
    complete: bool = False  # every completion of the step, not a display subset


class RewardSpread:
    """Per-step reward distributions: from the step frame's ``completion_rewards`` when the worker
    sends them, else from the step's sample frames (a subset under best_worst / random display).
    Like ``SeriesBook``, what is added is sorted into rows when they are next read."""

    def __init__(self, limit: int = HISTORY_LIMIT) -> None:
        self._rows: deque[Spread] = deque(maxlen=limit)
        self._unread: list[tuple[int, Iterable[float | None] | float | None]] = []
        self.version = 0

    @property
    def rows(self) -> deque[Spread]:
        for step, added in self._unread:
            if isinstance(added, (float, int)) or added is None:
                self._add_sample(step, added)
            else:
                self._add_step(step, added)
        self._unread.clear()
        return self._rows

    def clear(self) -> None:
        self._rows.clear()
        self._unread.clear()
        self.version += 1

    def _row(self, step: int) -> Spread:
        if not self._rows or self._rows[-1].step != step:
            self._rows.append(Spread(step))
        return self._rows[-1]

    def add_step(self, step: int, rewards: Iterable[float | None]) -> None:
        self._add_unread(step, rewards)

    def add_sample(self, step: int, reward: float | None) -> None:
        self._add_unread(step, reward)

    def _add_unread(self, step: int, added: Iterable[float | None] | float | None) -> None:
        self._unread.append((step, added))
        self.version += 1
        if len(self._unread) > 4 * (self._rows.maxlen or 0):  # never read (the tab never shown): bounded all the same
            _ = self.rows

    def _add_step(self, step: int, rewards: Iterable[float | None]) -> None:
        values = [v for v in (_finite(r) for r in rewards) if v is not None]
        if values:
            row = self._row(step)
            row.rewards, row.complete = values, True

    def _add_sample(self, step: int, reward: float | None) -> None:
        value = _finite(reward)
        if value is None:
            return
        row = self._row(step)
        if not row.complete:
            row.rewards.append(value)

    @property
    def partial(self) -> bool:
        """True when some shown step has only the display subset of its rewards."""
        return any(not r.complete for r in self.rows)


# ------------------------------------------------------------------ what the Charts tab shows


@dataclass(frozen=True)
class PanelSpec:
    """One chart: a title and the columns it draws (``(key, label)``), in their colours' order."""

    title: str
    lines: tuple[tuple[str, str], ...]
    percent: bool = False  # values are fractions: label the axis 0-100 %
    shown_with: str | None = None  # shown only once this column exists (else: once any of its lines does)


@dataclass(frozen=True)
class GroupSpec:
    """A titled grid of charts; ``prefix`` adds a chart per column whose key starts with it (and
    whose rest ``keep`` takes, when given)."""

    name: str
    panels: tuple[PanelSpec, ...] = ()
    prefix: str | None = None
    keep: Callable[[str], bool] | None = None

    def resolve(self, keys: Sequence[str]) -> list[PanelSpec]:
        panels = list(self.panels)
        if self.prefix is not None:
            charted = {key for panel in panels for key, _ in panel.lines}
            n = len(self.prefix)
            panels += [PanelSpec(k[n:] or k, ((k, k[n:] or k),)) for k in keys
                       if k.startswith(self.prefix) and k not in charted and (self.keep is None or self.keep(k[n:]))]
        return panels


def single(key: str, title: str, percent: bool = False) -> PanelSpec:
    return PanelSpec(title, ((key, title),), percent)


STEP_GROUPS: tuple[GroupSpec, ...] = (
    GroupSpec("rewards", (
        single("reward", "reward (total)"),
        single("reward_std", "reward std (in group)"),
        single("frac_reward_zero_std", "groups with equal rewards", percent=True),
        single("advantage_std", "advantage std"),
    ), prefix="rewards/"),
    GroupSpec("reward metrics", prefix="extra_metrics/", keep=m.logged_by_rewards),  # what reward functions log_metric
    GroupSpec("policy", (
        single("loss", "loss"),
        single("kl", "KL"),
        single("entropy", "entropy"),
        single("perplexity", "perplexity"),
        single("token_accuracy", "token accuracy (top-1)", percent=True),
        PanelSpec("clip ratio", (("clip_ratio/region", "region"), ("clip_ratio/low", "low"),
                                 ("clip_ratio/high", "high")), percent=True),
    )),
    GroupSpec("completions", (
        PanelSpec("completion length", (("completion_mean_length", "mean"), ("completion_min_length", "min"),
                                        ("completion_max_length", "max"))),
        single("completion_clipped_ratio", "clipped (hit max length)", percent=True),
    ), prefix="extra_metrics/completions/"),  # TRL's terminated lengths
    # [curriculum] (docs/curriculum.md): the pool's states (the stacked strip above draws their shares)
    # and the equal-reward groups against what uniform sampling would expect at the pool's pass rates
    GroupSpec("curriculum", (
        PanelSpec("equal-reward groups vs uniform", (("frac_reward_zero_std", "this run"),
                                                     ("extra_metrics/curriculum/uniform_flat_share", "uniform (expected)")),
                  percent=True, shown_with="extra_metrics/curriculum/uniform_flat_share"),
        PanelSpec("prompts by state", tuple((f"extra_metrics/curriculum/{k}", k.replace("_", " "))
                                            for k in ("too_hard", "learning", "solved", "unseen"))),
        single("extra_metrics/curriculum/revisits", "revisits per step"),
        single("extra_metrics/curriculum/level", "level"),
    )),
    # [async] (docs/async.md): how old the trained completions were, what the correction did, and
    # who waited (the timeline strip above draws the busy shares step by step)
    GroupSpec("asynchronous", (
        PanelSpec("staleness (steps behind)", (("extra_metrics/async/staleness_max", "max"),
                                               ("extra_metrics/async/staleness_mean", "mean"))),
        single("extra_metrics/async/is_clipped", "IS clipped or masked", percent=True),
        PanelSpec("importance ratio", (("extra_metrics/sampling/importance_sampling_ratio/mean", "mean"),
                                       ("extra_metrics/sampling/importance_sampling_ratio/min", "min"),
                                       ("extra_metrics/sampling/importance_sampling_ratio/max", "max"))),
        single("extra_metrics/async/queue_depth", "queue (steps ready)"),
        PanelSpec("busy share", (("extra_metrics/async/generator_busy", "generator"),
                                 ("extra_metrics/async/learner_busy", "learner")), percent=True),
        single("extra_metrics/async/wait_ms", "learner waiting (ms)"),
    )),
    # the worker's own extra figures, under TRL's names (protocol/messages.py, LOSS_METRICS)
    GroupSpec("more step metrics", prefix="extra_metrics/",
              keep=lambda key: not m.logged_by_rewards(key) and not key.startswith(("completions/", "curriculum/", "async/"))
              and not key.startswith("sampling/importance_sampling_ratio/")),
    GroupSpec("optimizer", (
        single("grad_norm", "grad norm"),
        single("learning_rate", "learning rate"),
    )),
    GroupSpec("system", (
        PanelSpec("tokens/s", (("training_tokens_per_s", "train"), ("generation_tokens_per_s", "gen"))),
        PanelSpec("ms per step", (("step_ms", "total"), ("generation_ms", "gen"), ("scoring_ms", "score"),
                                  ("training_ms", "train"))),
        PanelSpec("memory MB", (("peak_memory_mb", "peak"), ("active_memory_mb", "active"))),
    )),
    GroupSpec("ranks", (  # several ranks only: a one-rank run has none of these columns
        single("slowest_rank", "slowest rank"),
        single("all_reduce_bytes", "bytes all-reduced per step"),
    ), prefix="ranks/"),
)


def dict_group(name: str, series: Mapping[str, object] | Sequence[str] = ()) -> GroupSpec:
    """A group with one chart per key of its book (e.g. eval metrics fed into their own ``SeriesBook``):
    the keys of ``series`` first, in that order, then any other key as it appears."""
    return GroupSpec(name, tuple(single(key, key) for key in series), prefix="")


SHORT_KEYS = {"learning_rate": "lr", "temperature": "temp", "max_completion_length": "len", "max_steps": "steps",
              "repetition_penalty": "rep", "scale_rewards": "scale", "dynamic_sampling": "dyn", "save_every": "save",
              "silent_patience": "silent", "epsilon_high": "eps_hi", "epsilon": "eps"}


def short_key(key: str) -> str:
    """A chart's label for a changed key: ``lr``, ``temp``, ``beta``, ``w0`` (``rewards[0].weight``)."""
    last = key.rsplit(".", 1)[-1]
    if last == "weight" and "[" in key:
        return "w" + key.split("[", 1)[1].split("]", 1)[0]
    return SHORT_KEYS.get(last, last)
