"""The run doctor (docs/doctor.md): findings about a run that is going wrong, from its steps and
generations, with the numbers and the store's evidence behind each, and the live change that treats
it where one fits.

The same rules run in the worker after every step (``worker/doctor_watch.py``, whether or not a
dashboard watches) and offline over a store (``grpo-tui doctor RUN_DIR``, ``tui/doctor_report.py``):
both hand ``Doctor.feed`` one ``StepFacts`` per step. Pure Python, no MLX and no numpy: a rule
reads the last ``window`` steps and a few running figures of the whole run, so the memory a run's
doctor holds does not grow with its length.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import deque
from dataclasses import dataclass, field
from statistics import median
from typing import Any, Callable, Iterable

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import Config
from grpo_tui.protocol.config_doctor import DoctorConfig

SEVERITIES: tuple[m.Severity, ...] = ("info", "warning", "critical")
CORRECT = 1.0 - 1e-9  # an accuracy score at least this counts as a pass (worker/evaluation.py's mark)
EVIDENCE_LIMIT = 24  # generations named per finding
TIMES_KEPT = 2000  # recent step times behind the run's median
TEXTS_PER_STEP = 64  # completions read per step for repetition
BUSY_LOAD = 1.0  # a rise of the machine's load average this large is other work, not the run's (slowdown)
# Findings that say no more than info until the window is full: a run that learns from scratch has
# many all-0 groups in its first steps (the init tools template's seed 1: 50 % at step 5, 46 % at 6).
EARLY_INFO = ("no_signal", "pass_rate")


@dataclass
class GenFacts:
    """One generation, as the rules read it."""

    prompt_index: int
    group_index: int
    reward: float | None
    num_tokens: int
    finish_reason: str
    text: str = ""
    scores: dict[str, float | None] = field(default_factory=dict)  # each reward function's
    repeats: bool = False  # its text loops (set once, when the doctor takes its step)


@dataclass
class StepFacts:
    """One step: its metrics and its generations (in the store's order)."""

    step: int
    metrics: m.Step
    generations: list[GenFacts]
    # the evaluations since the previous step: (the step each measured, 0 before training; its accuracy)
    evals: list[tuple[int, float]] = field(default_factory=list)
    load: float | None = None  # the machine's 1-minute load average after the step (None: not measured)

    _groups: list[list[GenFacts]] | None = None
    _flat: list[list[GenFacts]] | None = None
    _cut: int | None = None
    _rates: dict[str, list[float]] = field(default_factory=dict)
    _sums: dict[str, tuple[float, float, int]] | None = None
    repeating: int = 0  # of the first TEXTS_PER_STEP generations with text, those that loop
    texts: int = 0

    def groups(self) -> list[list[GenFacts]]:
        """The generations by prompt (computed once: every rule of every window reads them)."""
        if self._groups is None:
            by: dict[int, list[GenFacts]] = {}
            for g in self.generations:
                by.setdefault(g.prompt_index, []).append(g)
            self._groups = [by[k] for k in sorted(by)]
        return self._groups

    def flat_groups(self) -> list[list[GenFacts]]:
        """The groups whose rewards all match (computed once: a step is in many windows)."""
        if self._flat is None:
            self._flat = [grp for grp in self.groups() if _flat(grp)]
        return self._flat

    def cut(self) -> int:
        """How many generations ended at the length limit (computed once)."""
        if self._cut is None:
            self._cut = sum(g.finish_reason == "length" for g in self.generations)
        return self._cut

    def pass_rates(self, label: str) -> list[float]:
        """Each judged group's share of ``label`` scores that count as correct (computed once)."""
        if label not in self._rates:
            rates = []
            for grp in self.groups():
                # unscored (None, or NaN as TRL reads None) is not judged: neither right nor wrong
                judged = [v for g in grp if (v := g.scores.get(label)) is not None and math.isfinite(v)]
                if judged:
                    rates.append(sum(v >= CORRECT for v in judged) / len(judged))
            self._rates[label] = rates
        return self._rates[label]

    def score_sums(self, weights: dict[str, float]) -> dict[str, tuple[float, float, int]]:
        """Per reward function: Σ, Σ² and count of its weighted scores this step (computed once)."""
        if self._sums is None:
            self._sums = {}
            for label, w in weights.items():
                values = [w * (g.scores.get(label) or 0.0) for g in self.generations]
                self._sums[label] = (sum(values), sum(v * v for v in values), len(values))
        return self._sums


def _grade(value: float, marks: list[float], descending: bool = False) -> m.Severity | None:
    """The highest severity whose mark ``value`` reaches (descending marks: falls to)."""
    found: m.Severity | None = None
    for severity, mark in zip(SEVERITIES, marks):
        if (value <= mark) if descending else (value >= mark):
            found = severity
    return found


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _flat(group: list[GenFacts]) -> bool:
    values = [0.0 if g.reward is None or not math.isfinite(g.reward) else g.reward for g in group]
    return len(values) > 1 and max(values) - min(values) <= 1e-9


def _spearman(xs: list[float], ys: list[float]) -> float:
    if len(xs) < 3:
        return 0.0

    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=v.__getitem__)
        out = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    sy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (sx * sy) if sx and sy else 0.0


_WORDS = re.compile(r"\w+|[^\w\s]")


def repeats(text: str, n: int = 4, times: int = 3) -> bool:
    """Whether some ``n``-gram of ``text``'s words (or single characters, for text without spaces)
    occurs ``times`` times or more: degenerate repetition."""
    tokens = _WORDS.findall(text) if " " in text.strip() else list(text)
    counts: dict[tuple[str, ...], int] = {}
    for i in range(len(tokens) - n + 1):
        gram = tuple(tokens[i : i + n])
        counts[gram] = counts.get(gram, 0) + 1
        if counts[gram] >= times:
            return True
    return False


class Recent:
    """The last ``limit`` values and their median, kept sorted as they come (a rule reads the median
    at every step: sorting 2,000 values each time was most of ``grpo-tui doctor``'s replay)."""

    def __init__(self, limit: int = TIMES_KEPT) -> None:
        self.values: deque[float] = deque()
        self.ordered: list[float] = []
        self.limit = limit

    def append(self, value: float) -> None:
        if len(self.values) == self.limit:
            del self.ordered[bisect.bisect_left(self.ordered, self.values.popleft())]
        self.values.append(value)
        bisect.insort(self.ordered, value)

    def __len__(self) -> int:
        return len(self.values)

    def median(self) -> float:
        n = len(self.ordered)
        return self.ordered[n // 2] if n % 2 else (self.ordered[n // 2 - 1] + self.ordered[n // 2]) / 2


@dataclass
class RunFigures:
    """What the rules need of the whole run, kept small."""

    first: list[StepFacts] = field(default_factory=list)  # the first window's steps
    times: Recent = field(default_factory=Recent)
    grad_norms: Recent = field(default_factory=Recent)
    evals: list[tuple[int, float]] = field(default_factory=list)
    best_reward: float | None = None  # the highest and lowest reward of any completion so far
    worst_reward: float | None = None
    max_possible: float | None = None  # the sum of the positive weights (each function's usual 1)


Rule = Callable[[list[StepFacts], RunFigures, DoctorConfig, Config], "Verdict | None"]


@dataclass
class Verdict:
    severity: m.Severity
    message: str
    numbers: dict[str, float]
    evidence: m.Evidence
    suggestion: str | None = None


def _steps_of(window: list[StepFacts]) -> m.Evidence:
    """Evidence that is the window's steps (a finding of the step metrics, not of some generations)."""
    return m.Evidence(steps=[s.step for s in window])


def _evidence(window: list[StepFacts], keep: Callable[[GenFacts], bool], finish: str | None = None) -> m.Evidence:
    gens = [(s.step, g.prompt_index, g.group_index) for s in window for g in s.generations if keep(g)]
    return m.Evidence(steps=sorted({s for s, _, _ in gens}) or [s.step for s in window],
                      generations=gens[-EVIDENCE_LIMIT:], finish_reason=finish)


def no_signal(window: list[StepFacts], run: RunFigures, d: DoctorConfig, config: Config) -> Verdict | None:
    count = sum(len(s.groups()) for s in window)
    if not count:
        return None
    flat = [(s, grp) for s in window for grp in s.flat_groups()]
    share = len(flat) / count
    severity = _grade(share, d.no_signal)
    if severity is None:
        return None
    unscored = sum(all(g.reward is None or not math.isfinite(g.reward) for g in grp) for _, grp in flat) / len(flat)
    values = [r for _, grp in flat if (r := grp[0].reward) is not None and math.isfinite(r)]
    zero = sum(v <= 0 for v in values) / len(flat)
    top = run.best_reward if run.best_reward is not None else max(values, default=0.0)
    at_max = sum(v >= top > 0 for v in values) / len(flat)
    # the curriculum skips such prompts before generating them; dynamic sampling drops their groups after
    skip = "grpo.dynamic_sampling=true" if config.curriculum.on else "curriculum.strategy=pass_rate"
    if unscored >= 0.5:  # every reward None or NaN: nothing says the prompts are too hard
        why, fix = (f"{_pct(unscored)} of them are unscored (every reward None or NaN: a reward that does not apply to "
                    "these prompts, or one that fails on them)"), None
    elif zero >= 0.5:
        why, fix = (f"{_pct(zero)} of them score 0: too hard for the model (harder prompts than it can solve, or a "
                    "reward without partial credit)"), skip
    elif at_max >= 0.5:
        why, fix = (f"{_pct(at_max)} of them are at the run's best reward: solved or too easy"), skip
    else:
        why, fix = "their rewards match inside each group (a reward that barely varies?)", "generation.temperature=1.2"
    message = (f"{_pct(share)} of the last {len(window)} steps' groups have no learning signal (every completion of "
               f"the group got the same reward, so every advantage is 0); {why}; a pass-rate curriculum "
               "(curriculum.strategy) skips such prompts before generating them, dynamic sampling drops their groups "
               "after, a larger grpo.group_size or a higher temperature spreads them")
    gens = [(s.step, g.prompt_index, g.group_index) for s, grp in flat for g in grp]
    evidence = m.Evidence(steps=sorted({s.step for s, _ in flat}), generations=gens[-EVIDENCE_LIMIT:])
    # dynamic sampling cannot be turned on beside a reused generation (protocol/config.py)
    taken = config.grpo.dynamic_sampling or config.training.steps_per_generation > 1
    suggestion = None if fix is None or fix == "grpo.dynamic_sampling=true" and taken else fix
    return Verdict(severity, message, {"flat_share": share, "all_zero": zero, "all_max": at_max, "unscored": unscored},
                   evidence, suggestion)


def truncation(window: list[StepFacts], run: RunFigures, d: DoctorConfig, config: Config) -> Verdict | None:
    total = sum(len(s.generations) for s in window)
    if not total:
        return None
    share = sum(s.cut() for s in window) / total
    severity = _grade(share, d.truncation)
    if severity is None:
        return None
    gens = [g for s in window for g in s.generations]
    limit = config.generation.max_completion_length
    finished = sorted(g.num_tokens for g in gens if g.finish_reason != "length")
    p95 = finished[int(0.95 * (len(finished) - 1))] if finished else 0
    wanted = max(2 * limit, int(math.ceil(1.25 * p95 / 16.0)) * 16)
    message = (f"{_pct(share)} of the last {len(window)} steps' completions are cut at max_completion_length = {limit} "
               f"(finish reason 'length'); a cut completion rarely earns its reward: set "
               f"generation.max_completion_length to at least {wanted}, or grpo.mask_truncated_completions = true "
               "to leave them out of the loss")
    return Verdict(severity, message, {"truncated_share": share, "finished_p95_tokens": float(p95), "limit": float(limit)},
                   _evidence(window, lambda g: g.finish_reason == "length", "length"),
                   f"generation.max_completion_length={wanted}")


def pass_rate(window: list[StepFacts], run: RunFigures, d: DoctorConfig, config: Config) -> Verdict | None:
    label = config.accuracy_label
    if label is None:
        return None
    rates = [r for s in window for r in s.pass_rates(label)]
    if not rates:
        return None
    none, all_ = sum(r == 0 for r in rates) / len(rates), sum(r == 1 for r in rates) / len(rates)
    severity = _grade(none + all_, d.pass_rate)
    if severity is None:
        return None
    side = "too hard (no completion right)" if none >= all_ else "too easy (every completion right)"
    message = (f"{_pct(none + all_)} of the prompts of the last {len(window)} steps are at a 0 % or 100 % pass rate "
               f"({_pct(none)} at 0 %, {_pct(all_)} at 100 %): most are {side}, and such groups teach nothing; "
               "choose prompts nearer the model's level")
    return Verdict(severity, message, {"pass_0": none, "pass_100": all_}, _steps_of(window))


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None and math.isfinite(v)]
    return sum(present) / len(present) if present else None


def entropy_collapse(window: list[StepFacts], run: RunFigures, d: DoctorConfig, config: Config) -> Verdict | None:
    start = _mean(s.metrics.entropy for s in run.first)
    now = _mean(s.metrics.entropy for s in window)
    if start is None or now is None or start <= 0 or window[0].step <= run.first[-1].step:
        return None
    fraction = now / start
    severity = _grade(fraction, d.entropy_collapse, descending=True)
    rewards = [s.metrics.reward for s in window if s.metrics.reward is not None]
    rising = len(rewards) > 2 and rewards[-1] - rewards[0] > 0.05 * max(abs(rewards[0]), 1e-6)
    if severity is None or rising:
        return None
    message = (f"token entropy fell to {_pct(fraction)} of its start ({start:.3g} -> {now:.3g}) while the reward "
               "stays flat: the policy is collapsing onto a few answers and stops exploring; a higher "
               "generation.temperature or a smaller learning rate slows it")
    return Verdict(severity, message, {"entropy_start": start, "entropy_now": now, "fraction": fraction},
                   _steps_of(window), "generation.temperature=1.2")


def kl(window: list[StepFacts], run: RunFigures, d: DoctorConfig, config: Config) -> Verdict | None:
    values = [s.metrics.kl for s in window if s.metrics.kl is not None]
    if not values or config.grpo.beta <= 0:
        return None
    now = values[-1]
    severity = _grade(now, d.kl)
    if severity is None:
        return None
    lr = config.training.learning_rate
    message = (f"KL to the reference is {now:.3g} at step {window[-1].step} (the window's mean {sum(values) / len(values):.3g}): "
               f"the policy is moving far from the reference; a lower training.learning_rate or a higher grpo.beta holds it")
    return Verdict(severity, message, {"kl": now}, _steps_of(window),
                   f"training.learning_rate={lr / 2:g}")


def clipping(window: list[StepFacts], run: RunFigures, d: DoctorConfig, config: Config) -> Verdict | None:
    value = _mean(s.metrics.clip_ratio.region for s in window)
    if value is None:
        return None
    severity = _grade(value, d.clipping)
    if severity is None:
        return None
    lr = config.training.learning_rate
    fewer = "grpo.num_iterations" + (" or training.steps_per_generation" if config.training.steps_per_generation > 1 else "")
    message = (f"{_pct(value)} of tokens had their ratio clipped over the last {len(window)} steps: the updates are "
               f"too large for the trust region; a lower training.learning_rate (or fewer {fewer}) fits them")
    return Verdict(severity, message, {"clip_ratio": value}, _steps_of(window),
                   f"training.learning_rate={lr / 2:g}")


def off_policy(window: list[StepFacts], run: RunFigures, d: DoctorConfig, config: Config) -> Verdict | None:
    """[async] (docs/async.md): the correction clips or masks a large share of the loss's tokens, so
    the generator's completions are too far from what the learner would sample now."""
    value = _mean(s.metrics.extra_metrics.get("async/is_clipped") for s in window)
    if value is None:
        return None
    severity = _grade(value, d.off_policy)
    if severity is None:
        return None
    k = config.async_.max_staleness
    stale = _mean(s.metrics.extra_metrics.get("async/staleness_mean") for s in window)
    message = (f"the off-policy correction clipped or masked {_pct(value)} of the loss's tokens over the last "
               f"{len(window)} steps (completions {stale or 0:.1f} steps old on average): the run is too far off-policy "
               f"for what it learns from; a lower async.max_staleness keeps the generator closer")
    fix = f"async.max_staleness={k - 1}" if k > 1 else f"training.learning_rate={config.training.learning_rate / 2:g}"
    return Verdict(severity, message, {"is_clipped": value, "staleness": stale or 0.0}, _steps_of(window), fix)


def length_hacking(window: list[StepFacts], run: RunFigures, d: DoctorConfig, config: Config) -> Verdict | None:
    start = _mean(s.metrics.completion_mean_length for s in run.first)
    now = _mean(s.metrics.completion_mean_length for s in window)
    if start is None or now is None or start <= 0 or window[0].step <= run.first[-1].step:
        return None
    growth = now / start - 1
    severity = _grade(growth, d.length_hacking)
    if severity is None:  # the rank correlation only when the lengths grew
        return None
    gens = [g for s in window for g in s.generations if g.reward is not None]
    rho = _spearman([float(g.num_tokens) for g in gens], [float(g.reward or 0.0) for g in gens])
    if rho < 0.6:
        return None
    message = (f"completions grew {_pct(growth)} longer since the start ({start:.0f} -> {now:.0f} tokens) and the reward "
               f"follows their length (rank correlation {rho:.2f}): the model may be paid for length, not for being "
               "right; check the rewards (a length penalty, or soft_overlong)")
    longest = sorted(gens, key=lambda g: -g.num_tokens)[: EVIDENCE_LIMIT]
    keep = {id(g) for g in longest}
    return Verdict(severity, message, {"growth": growth, "rank_correlation": rho}, _evidence(window, lambda g: id(g) in keep))


def repetition(window: list[StepFacts], run: RunFigures, d: DoctorConfig, config: Config) -> Verdict | None:
    texts = sum(s.texts for s in window)
    if not texts:
        return None
    share = sum(s.repeating for s in window) / texts
    severity = _grade(share, d.repetition)
    if severity is None:
        return None
    message = (f"{_pct(share)} of the last {len(window)} steps' completions repeat themselves (a 4-gram three times or "
               "more): degenerate loops; generation.repetition_stop_ngram / repetition_stop_count end them early, a "
               "repetition penalty or a lower learning rate prevents them")
    return Verdict(severity, message, {"repeating_share": share}, _evidence(window, lambda g: g.repeats))


def reward_dominance(window: list[StepFacts], run: RunFigures, d: DoctorConfig, config: Config) -> Verdict | None:
    """An auxiliary reward (not the correctness one) that carries the total's spread, or format
    rewards saturated while correctness stays at 0. Without an ``accuracy`` reward the doctor cannot
    tell the task's reward from the others, and says nothing."""
    weights = {r.label: r.weight for r in config.rewards}
    task = config.accuracy_label
    if len(weights) < 2 or task is None:
        return None
    sums = {label: [0.0, 0.0, 0] for label in weights}  # the window's Σx, Σx², n of each weighted score
    for s in window:
        for label, (total, squares, n) in s.score_sums(weights).items():
            acc = sums[label]
            acc[0], acc[1], acc[2] = acc[0] + total, acc[1] + squares, acc[2] + n
    means = {label: (acc[0] / acc[2] / (weights[label] or 1.0)) if acc[2] else None for label, acc in sums.items()}
    others = [label for label in weights if label != task and means[label] is not None]
    if means[task] == 0 and others and all((means[o] or 0.0) >= 0.95 for o in others):
        message = (f"the format rewards ({', '.join(others)}) are saturated while {task!r} stays at 0 over the last "
                   f"{len(window)} steps: the model learned the format, not the task")
        return Verdict("warning", message, {task: 0.0, **{o: means[o] or 0.0 for o in others}},
                       _steps_of(window))
    spread = {label: max(0.0, acc[1] / acc[2] - (acc[0] / acc[2]) ** 2) if acc[2] else 0.0 for label, acc in sums.items()}
    total = sum(spread.values())
    label, part = max(spread.items(), key=lambda kv: kv[1])
    if total <= 1e-12 or label == task:
        return None
    share = part / total
    severity = _grade(share, d.reward_dominance)
    if severity is None:
        return None
    message = (f"the reward {label!r} carries {_pct(share)} of the total reward's spread over the last {len(window)} "
               f"steps, more than the task's {task!r}: the advantages follow it; lower its weight (rewards[N].weight)")
    return Verdict(severity, message, {"share": share}, _steps_of(window))


def reward_up_eval_down(window: list[StepFacts], run: RunFigures, d: DoctorConfig, config: Config) -> Verdict | None:
    if len(run.evals) < 3:
        return None
    best_step, best = max(run.evals, key=lambda e: e[1])
    step, now = run.evals[-1]
    start = _mean(s.metrics.reward for s in run.first)
    latest = _mean(s.metrics.reward for s in window)
    if step <= best_step or start is None or latest is None or latest <= start:
        return None
    severity = _grade(best - now, d.reward_up_eval_down)
    if severity is None:
        return None
    message = (f"the training reward rose ({start:.3g} -> {latest:.3g}) while eval accuracy fell from {best:.3g} "
               f"(step {best_step}) to {now:.3g} (step {step}): the model is learning the reward, not the task "
               f"(reward hacking); the checkpoint nearest step {best_step} is the better model")
    top = max((g.reward for s in window for g in s.generations if g.reward is not None), default=None)
    paid = _evidence(window, lambda g: top is not None and g.reward is not None and g.reward >= top - 1e-9)
    # the evaluations' steps (the store's evals), and the completions the reward pays most now
    return Verdict(severity, message, {"eval_best": best, "eval_now": now},
                   m.Evidence(steps=[best_step, step], generations=paid.generations))


def grad_spike(window: list[StepFacts], run: RunFigures, d: DoctorConfig, config: Config) -> Verdict | None:
    now = window[-1].metrics.grad_norm
    if now is None or len(run.grad_norms) < 2 * d.window:
        return None
    typical = run.grad_norms.median()
    if typical <= 0:
        return None
    ratio = now / typical
    severity = _grade(ratio, d.grad_spike)
    if severity is None:
        return None
    message = (f"the gradient norm at step {window[-1].step} is {ratio:.1f}× the run's median ({now:.3g} against "
               f"{typical:.3g}): an unstable update; training.max_grad_norm clips it")
    return Verdict(severity, message, {"grad_norm": now, "median": typical}, m.Evidence(steps=[window[-1].step]))


def slowdown(window: list[StepFacts], run: RunFigures, d: DoctorConfig, config: Config) -> Verdict | None:
    """Seconds per token of the window against the run's median. Above info only with the memory to
    show for it (peak memory up a fifth since the start): a slower step alone may be a busy machine;
    nothing at all when the machine's load rose by a core's worth since the start (other work took the
    time, not the run)."""
    per_token = [_per_token(s.metrics) for s in window]
    if len(run.times) < 3 * d.window or any(t is None for t in per_token):
        return None
    typical = run.times.median()
    recent = median(t for t in per_token if t is not None)
    ratio = recent / typical if typical > 0 else 0.0
    severity = _grade(ratio, d.slowdown)
    if severity is None:
        return None
    start, now = _mean(s.metrics.peak_memory_mb for s in run.first), _mean(s.metrics.peak_memory_mb for s in window)
    pressure = start is not None and now is not None and now >= 1.2 * start
    if not pressure:
        if _busier(run.first, window):
            return None
        severity = "info"
    why = (f"peak memory grew from {start:.0f} to {now:.0f} MB: memory pressure; training.memory_limit_gb picks the "
           "memory switches" if pressure else "peak memory did not grow: other work on the machine, or a slower phase")
    message = f"steps take {ratio:.1f}× the run's median time per token; {why}"
    return Verdict(severity, message, {"ratio": ratio}, _steps_of(window))


def _busier(first: list[StepFacts], window: list[StepFacts]) -> bool:
    """The machine's load during ``window`` at least a core's worth above the run's first steps'."""
    before, now = ([s.load for s in steps if s.load is not None] for steps in (first, window))
    return bool(before and now) and median(now) >= median(before) + BUSY_LOAD


def _per_token(step: m.Step) -> float | None:
    seconds = _seconds(step)
    return None if seconds is None or step.num_tokens <= 0 else seconds / step.num_tokens


def _seconds(step: m.Step) -> float | None:
    parts = [step.generation_ms, step.scoring_ms, step.training_ms]
    return None if all(p is None for p in parts) else sum(p or 0.0 for p in parts) / 1000


RULES: dict[str, Rule] = {
    "no_signal": no_signal, "truncation": truncation, "pass_rate": pass_rate, "entropy_collapse": entropy_collapse,
    "kl": kl, "clipping": clipping, "length_hacking": length_hacking, "repetition": repetition,
    "reward_dominance": reward_dominance, "reward_up_eval_down": reward_up_eval_down, "grad_spike": grad_spike,
    "slowdown": slowdown, "off_policy": off_policy,
}


class Doctor:
    """Feed it each step; it says which findings began, changed severity or cleared."""

    def __init__(self, config: Config) -> None:
        self.config, self.marks = config, config.doctor
        self.window: deque[StepFacts] = deque(maxlen=self.marks.window)
        self.run = RunFigures(max_possible=sum(r.weight for r in config.rewards if r.weight > 0))
        self.current: dict[str, m.Finding] = {}
        self._flat_since: tuple[int, float] | None = None  # (step, reward) since which the reward has not moved
        self._absent: dict[str, int] = {}  # steps in a row a current finding did not hold

    def feed(self, facts: StepFacts) -> list[m.Finding]:
        self._take(facts)
        if len(self.window) < max(2, self.marks.window // 2):
            return []
        window = list(self.window)  # one copy for every rule
        verdicts = {name: rule(window, self.run, self.marks, self.config) for name, rule in RULES.items()}
        verdicts["flat_reward"] = self._flat_reward(facts)
        verdicts["converged"] = self._converged()
        if len(window) < self.marks.window:  # a run's first steps: flat groups at 0 are how one that learns starts
            for name in EARLY_INFO:
                if (verdict := verdicts[name]) is not None:
                    verdict.severity = "info"
        if verdicts["converged"] is not None:  # a solved run's flat groups are its success, not a fault
            for name in ("no_signal", "pass_rate", "flat_reward"):
                verdicts[name] = None
                self._absent[name] = self.marks.window  # cleared now, not after the usual wait
        changes = []
        for name, verdict in verdicts.items():
            if name in self.marks.silence:
                continue
            change = self._update(name, verdict, facts.step)
            if change is not None:
                changes.append(change)
        return changes

    def _take(self, facts: StepFacts) -> None:
        with_text = [g for g in facts.generations if g.text][:TEXTS_PER_STEP]
        for g in with_text:  # read once per step, not once per window that holds it
            g.repeats = repeats(g.text)
        facts.texts, facts.repeating = len(with_text), sum(g.repeats for g in with_text)
        self.window.append(facts)
        if len(self.run.first) < self.marks.window:
            self.run.first.append(facts)
        if (seconds := _per_token(facts.metrics)) is not None:
            self.run.times.append(seconds)
        if facts.metrics.grad_norm is not None and math.isfinite(facts.metrics.grad_norm):
            self.run.grad_norms.append(facts.metrics.grad_norm)
        self.run.evals.extend(facts.evals)
        rewards = [g.reward for g in facts.generations if g.reward is not None]
        if rewards:
            self.run.best_reward = max([*rewards, *([self.run.best_reward] if self.run.best_reward is not None else [])])
            self.run.worst_reward = min([*rewards, *([self.run.worst_reward] if self.run.worst_reward is not None else [])])

    def _flat_reward(self, facts: StepFacts) -> Verdict | None:
        reward = facts.metrics.reward
        if reward is None:
            return None
        if self._flat_since is None or abs(reward - self._flat_since[1]) > 0.02 * max(abs(self._flat_since[1]), 0.05):
            self._flat_since = (facts.step, reward)
            return None
        since, value = self._flat_since
        steps = float(facts.step - since)
        severity = _grade(steps, self.marks.flat_reward)
        if severity is None or self._at_best(value):
            return None
        message = (f"the reward has stayed at {value:.3g} for {steps:.0f} steps (since step {since}): the run is not "
                   "learning; see the findings above for why, or try a higher training.learning_rate")
        return Verdict(severity, message, {"steps": steps, "reward": value}, m.Evidence(steps=[since, facts.step]))

    def _at_best(self, value: float) -> bool:
        top = self.run.max_possible or 0.0
        return top > 0 and value >= top - 1e-6

    def _converged(self) -> Verdict | None:
        """Every group of the window flat at the run's best reward, which the run rose to (or the
        weights' sum): solved, as ``worker/silent_steps.py`` calls a silent stop solved."""
        window, best, worst_seen = list(self.window), self.run.best_reward, self.run.worst_reward
        groups = [grp for s in window for grp in s.groups()]
        ceiling = self.run.max_possible or 0.0
        if not groups or best is None or worst_seen is None or not (best > worst_seen or best >= ceiling > 0):
            return None
        if not all(_flat(grp) and (grp[0].reward or 0.0) >= best - 1e-9 for grp in groups):
            return None
        message = (f"converged: every completion of the last {len(window)} steps earned the run's best reward "
                   f"({best:g}); nothing is left to learn from these prompts (harder data, or stop here)")
        return Verdict("info", message, {"reward": best}, _steps_of(window))

    def _update(self, name: str, verdict: Verdict | None, step: int) -> m.Finding | None:
        old = self.current.get(name)
        if verdict is None:
            if old is None:
                return None
            self._absent[name] = self._absent.get(name, 0) + 1
            if self._absent[name] < max(1, self.marks.window // 2):  # clears once it stays away: no flapping
                return None
            del self.current[name], self._absent[name]
            return m.Finding(name=name, severity=old.severity, step=step, since=old.since, cleared=True,
                             message=f"{name} no longer holds (since step {old.since})")
        self._absent.pop(name, None)
        if old is not None and old.severity == verdict.severity:
            old.step, old.numbers, old.evidence, old.message = step, verdict.numbers, verdict.evidence, verdict.message
            return None  # no news: the same finding at the same severity
        since = old.since if old is not None else step
        finding = m.Finding(name=name, severity=verdict.severity, step=step, since=since, message=verdict.message,
                            numbers={k: round(v, 6) for k, v in verdict.numbers.items()}, evidence=verdict.evidence,
                            suggestion=verdict.suggestion)
        self.current[name] = finding
        return finding

    def findings(self) -> list[m.Finding]:
        """What holds now, the most severe first."""
        return sorted(self.current.values(), key=lambda f: (-SEVERITIES.index(f.severity), f.name))


def worst(findings: Iterable[m.Finding]) -> m.Severity | None:
    levels = [SEVERITIES.index(f.severity) for f in findings if not f.cleared]
    return SEVERITIES[max(levels)] if levels else None


def probe_verdict(found: dict[str, Any], memory_limit_gb: float, machine_gb: float) -> str:
    """``check --probe``'s verdict on what ``worker/engine/probe.py`` measured: one sentence, the change to
    make first, or that the run looks trainable (then it starts with ``looks trainable``)."""
    limit = found["max_completion_length"]
    if found["truncated"] >= 0.5:
        wanted = max(2 * limit, int(math.ceil(1.25 * (found["finished_p95_tokens"] or limit) / 16.0)) * 16)
        return (f"{100 * found['truncated']:.0f} % of completions are cut at max_completion_length = {limit}: "
                f"set it to at least {wanted}")
    budget = memory_limit_gb or machine_gb
    if budget and found["peak_memory_gb"] > budget:
        return (f"a step takes {found['peak_memory_gb']:.1f} GB at its peak, more than the {budget:.1f} GB "
                "available: set training.memory_limit_gb so the memory switches are picked")
    if found["pass_0"] >= 0.9:
        return (f"{100 * found['pass_0']:.0f} % of the prompts never earn a reward in {found['group_size']} tries: "
                "too hard for the model as it is (easier prompts, partial credit, a larger model)")
    if found["pass_100"] >= 0.9:
        return f"{100 * found['pass_100']:.0f} % of the prompts always earn the full reward: too easy, nothing to learn"
    if found["flat_groups"] >= 0.75:
        return (f"{100 * found['flat_groups']:.0f} % of the groups score alike (no learning signal): a larger "
                "grpo.group_size, a higher temperature or grpo.dynamic_sampling = true")
    return (f"looks trainable: {100 * found['pass_between']:.0f} % of the prompts are in between (neither always "
            f"nor never rewarded), about {_duration(found['run_seconds'])} for {found['total_steps']} steps")


PROBE_NUMBERS = ("pass_0", "pass_between", "pass_100", "flat_groups", "truncated", "step_seconds", "run_seconds",
                 "peak_memory_gb")


def probe_finding(found: dict[str, Any], memory_limit_gb: float, machine_gb: float) -> m.Finding:
    """``[doctor] probe = true``: what the probe measured before step 1 as the finding ``probe``
    (info when the run looks trainable, else a warning with the verdict's change)."""
    sentence = probe_verdict(found, memory_limit_gb, machine_gb)
    limit, suggestion = found["max_completion_length"], None
    if found["truncated"] >= 0.5:
        wanted = max(2 * limit, int(math.ceil(1.25 * (found["finished_p95_tokens"] or limit) / 16.0)) * 16)
        suggestion = f"generation.max_completion_length={wanted}"
    message = (f"before step 1, {found['prompts']} prompts × {found['group_size']} completions: {_pct(found['pass_0'])} "
               f"of the prompts never rewarded, {_pct(found['pass_100'])} always, {_pct(found['truncated'])} of the "
               f"completions cut; verdict: {sentence}")
    numbers = {k: round(float(found[k]), 6) for k in PROBE_NUMBERS if found.get(k) is not None}
    return m.Finding(name="probe", severity="info" if sentence.startswith("looks trainable") else "warning", step=0,
                     since=0, message=message, numbers=numbers, suggestion=suggestion)


def _duration(seconds: float) -> str:
    minutes = seconds / 60
    return f"{seconds:.0f} s" if seconds < 120 else f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"
