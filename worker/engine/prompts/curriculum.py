"""The pass-rate curriculum (``[curriculum]``, docs/curriculum.md): which prompts a step draws, chosen
before they are generated, from what earlier visits of each prompt scored. Pure (numpy only): the
trainer asks ``batch`` for a step's rows, hands each scored round to ``observe`` and ends the step
with ``commit``.

A group whose completions all score the same has zero advantage. A prompt's pass rate (the share of
its completions that pass, a decayed average over its visits) says how likely that is on its next
visit: near 0 (too hard) or 1 (solved) its group is almost surely flat. So a step draws from the
prompts still being learned (pass rate inside ``[min_pass_rate, max_pass_rate]``) and the unseen
ones, least recently drawn first; each of its slots goes instead to a set-aside prompt (too hard or
solved) with ``revisit_probability``, so a solved prompt that is forgotten comes back and a
hopeless one is tried again as the model grows.

Deterministic: a step's draw is a function of the state after the step before and of (seed, step);
the state is kept in every checkpoint (``to_bytes``) and restored exactly on a resume, and every
rank observes the same gathered scores, so every rank draws the same batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from grpo_tui.protocol.config_curriculum import CurriculumConfig
from grpo_tui.protocol.outcome import Mistake
from grpo_tui.worker.engine.prompts import data
from grpo_tui.worker.trainer_contract import PromptVisit

if TYPE_CHECKING:
    from grpo_tui.protocol.config import Config
    from grpo_tui.worker.engine.prompts.data import Example

UNSEEN, TOO_HARD, LEARNING, SOLVED = "unseen", "too_hard", "learning", "solved"
STATES = (UNSEEN, TOO_HARD, LEARNING, SOLVED)
_TAG = 0xC0C0  # keeps the curriculum's generator apart from the other (seed, step) streams
_EPS = 1e-9


class _Saved(msgspec.Struct):
    pass_rate: list[float | None]
    visits: list[int]
    last_step: list[int]
    last_pick: list[int]
    best: float | None
    level: int
    picks: dict[int, list[int]]
    revisits: dict[int, int] = {}
    first_step: int = 1


@dataclass
class Curriculum:
    """Every prompt's pass rate, visits and last step; the steps drawn so far in the current epoch
    (``picks``, what a checkpoint's ``epoch_indices_done`` reads back) and the later ones already
    drawn (a reused generation draws its block's steps at once)."""

    size: int
    seed: int
    batch_size: int
    steps_per_epoch: int
    group_size: int
    levels: np.ndarray | None = None  # each row's difficulty level (strategy = "levels")
    shuffle: bool = True  # data.shuffle: the order of the steps before ``first_step``
    first_step: int = 0  # the first step it drew (0: none yet); a live change may turn it on mid-run
    pass_rate: np.ndarray = field(init=False)
    visits: np.ndarray = field(init=False)
    last_step: np.ndarray = field(init=False)  # the step of its last visit (0: never)
    last_pick: np.ndarray = field(init=False)  # the step that last drew it (the draw's order)
    best: float | None = None  # the highest reward seen (a pass without pass_threshold)
    level: int = 0
    picks: dict[int, list[int]] = field(default_factory=dict)
    revisits: dict[int, int] = field(default_factory=dict)  # per drawn step: slots given to set-aside prompts
    pending: dict[int, list[tuple[int, list[int], list[float | None]]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.pass_rate = np.full(self.size, np.nan)
        self.visits = np.zeros(self.size, dtype=np.int64)
        self.last_step = np.zeros(self.size, dtype=np.int64)
        self.last_pick = np.zeros(self.size, dtype=np.int64)
        if self.levels is not None:
            self.level = int(self.levels.min())

    # ------------------------------------------------------------ states

    def states(self, config: CurriculumConfig) -> np.ndarray:
        """Each row's state under ``config``'s band (a live change of the band moves prompts at once)."""
        out = np.full(self.size, UNSEEN, dtype=object)
        seen = ~np.isnan(self.pass_rate)
        rate = np.where(seen, self.pass_rate, 0.5)
        out[seen & (rate < config.min_pass_rate - _EPS)] = TOO_HARD
        out[seen & (rate > config.max_pass_rate + _EPS)] = SOLVED
        out[seen & (rate >= config.min_pass_rate - _EPS) & (rate <= config.max_pass_rate + _EPS)] = LEARNING
        return out

    def in_pool(self) -> np.ndarray:
        """The rows a step may draw: every row, or (``levels``) those at the current level or below."""
        if self.levels is None:
            return np.ones(self.size, dtype=bool)
        return self.levels <= self.level

    # ------------------------------------------------------------ drawing

    def batch(self, step: int, config: CurriculumConfig) -> tuple[int, int, list[int]]:
        """(epoch, step_in_epoch, rows) of ``step``, as ``data.batch_indices`` answers: an epoch is
        ``steps_per_epoch`` steps. Drawn once (the steps before it that were not drawn yet first) and
        remembered: asking again gives the same rows."""
        epoch, in_epoch = divmod(step - 1, self.steps_per_epoch)
        self.first_step = self.first_step or step
        if step < self.first_step:  # drawn before the curriculum was turned on (a live change): the data order
            return data.batch_indices(step, self.size, self.batch_size, shuffle=self.shuffle, seed=self.seed)
        if step not in self.picks:
            later = [s for s in self.picks if s > step]
            if later:
                raise ValueError(f"curriculum: step {step} asked after step {max(later)} was drawn")
            first = max(self.picks, default=step - 1) + 1
            for s in range(min(first, step), step + 1):
                self.picks[s] = self._draw(s, config)
        return epoch, in_epoch + 1, list(self.picks[step])

    def _draw(self, step: int, config: CurriculumConfig) -> list[int]:
        rng = np.random.default_rng([self.seed, step, _TAG])
        tie = rng.permutation(self.size)
        states, pool = self.states(config), self.in_pool()
        eligible = np.flatnonzero(pool & ((states == UNSEEN) | (states == LEARNING)))
        aside = np.flatnonzero(pool & ((states == TOO_HARD) | (states == SOLVED)))
        slots = min(self.batch_size, int(pool.sum()))
        wanted = int(rng.binomial(slots, config.revisit_probability)) if aside.size else 0

        def oldest(rows: np.ndarray, n: int) -> list[int]:
            return [int(r) for r in rows[np.lexsort((tie[rows], self.last_pick[rows]))][:n]]

        revisit = oldest(aside, wanted)
        fresh = oldest(eligible, slots - len(revisit))
        if len(fresh) < slots - len(revisit):  # fewer learning prompts than slots: set-aside ones fill them
            revisit = oldest(aside, slots - len(fresh))
        picks = fresh + revisit
        order = rng.permutation(len(picks))
        picks = [picks[i] for i in order]
        while len(picks) < self.batch_size:  # a pool smaller than a batch: its prompts again
            picks.append(picks[len(picks) % max(slots, 1)])
        self.last_pick[picks] = step
        self.revisits[step] = len(revisit)
        return picks

    def extra(self, step: int, round_: int, used: set[int], config: CurriculumConfig) -> list[int]:
        """Dynamic sampling's round ``round_`` (>= 1) of ``step``: ``batch_size`` prompts not used this
        step, learning and unseen ones least recently drawn first (set-aside ones only when those run
        out; no revisits: the round is there to find groups that teach)."""
        rng = np.random.default_rng([self.seed, step, round_, _TAG])
        tie = rng.permutation(self.size)
        states, pool = self.states(config), self.in_pool()
        free = pool & ~np.isin(np.arange(self.size), list(used))
        eligible = np.flatnonzero(free & ((states == UNSEEN) | (states == LEARNING)))
        aside = np.flatnonzero(free & ((states == TOO_HARD) | (states == SOLVED)))
        order = [*eligible[np.lexsort((tie[eligible], self.last_pick[eligible]))],
                 *aside[np.lexsort((tie[aside], self.last_pick[aside]))]]
        picks = [int(r) for r in order[: self.batch_size]]
        while len(picks) < self.batch_size:  # a pool smaller than the rounds need: prompts again
            picks.append(int(tie[len(picks) % self.size]))
        self.last_pick[picks] = step
        return picks

    # ------------------------------------------------------------ scores

    def observe(self, step: int, round_: int, rows: list[int], totals: list[float | None]) -> None:
        """A scored round of ``step``: ``rows[i]``'s group is ``totals[i·G:(i+1)·G]`` (every rank's,
        gathered). Applied by ``commit`` (a reused generation scores its later steps early)."""
        if len(totals) != len(rows) * self.group_size:
            return  # a rollout function that returned another shape: nothing to learn from
        self.pending.setdefault(step, []).append((round_, list(rows), list(totals)))

    def commit(self, step: int, config: CurriculumConfig) -> tuple[list[PromptVisit], dict[str, float]]:
        """Apply ``step``'s observed rounds: the visits the store records and the step's
        ``curriculum/*`` metrics (the pool's states after it; the draw's revisits; the share of
        flat groups uniform sampling would expect at these pass rates)."""
        G, out = self.group_size, []
        for round_, rows, totals in self.pending.pop(step, []):
            scored = [t for t in totals if t is not None]
            if not scored:
                continue
            self.best = max(scored) if self.best is None else max(self.best, *scored)
            threshold = config.pass_threshold if config.pass_threshold is not None else self.best
            for i, row in enumerate(rows):
                group = [t for t in totals[i * G : (i + 1) * G] if t is not None]
                if not group:
                    continue
                passed = sum(t >= threshold - _EPS for t in group) / len(group)
                old = self.pass_rate[row]
                self.pass_rate[row] = passed if np.isnan(old) else config.decay * old + (1 - config.decay) * passed
                self.visits[row] += 1
                self.last_step[row] = step
                out.append(PromptVisit(step, round_ * self.batch_size + i, row, passed, float(self.pass_rate[row]),
                                 "", int(self.visits[row])))
        states = self.states(config)
        for visit in out:
            visit.state = str(states[visit.prompt_row])
        raised = self._raise_level(config, states)
        if raised:
            states = self.states(config)
        epoch = (step - 1) // self.steps_per_epoch
        for s in [s for s in self.picks if (s - 1) // self.steps_per_epoch < epoch]:  # an earlier epoch's draws
            del self.picks[s]
            self.revisits.pop(s, None)
        return out, self.metrics(step, config, states)

    def _raise_level(self, config: CurriculumConfig, states: np.ndarray) -> bool:
        """``levels``: the level rises once at least half of its prompts were seen and the share of
        those solved reaches ``raise_level_at``."""
        if self.levels is None or config.strategy != "levels" or self.level >= int(self.levels.max()):
            return False
        here = self.levels == self.level
        seen = here & (states != UNSEEN)
        if 2 * seen.sum() < here.sum() or (states[seen] == SOLVED).mean() < config.raise_level_at:
            return False
        self.level = int(self.levels[self.levels > self.level].min())
        return True

    def metrics(self, step: int, config: CurriculumConfig, states: np.ndarray) -> dict[str, float]:
        pool = self.in_pool()
        out = {f"curriculum/{name}": float(np.sum(pool & (states == name))) for name in STATES}
        out["curriculum/revisits"] = float(self.revisits.get(step, 0))
        seen = pool & ~np.isnan(self.pass_rate)
        if seen.any():
            p = self.pass_rate[seen]
            out["curriculum/uniform_flat_share"] = float(np.mean(p**self.group_size + (1 - p) ** self.group_size))
        if self.levels is not None:
            out["curriculum/level"] = float(self.level)
        return out

    # ------------------------------------------------------------ checkpoints

    def to_bytes(self) -> bytes:
        """The state a resume needs to draw what the uninterrupted run draws (pending rounds are
        not kept: a resume generates its step afresh)."""
        return msgspec.json.encode(_Saved(
            pass_rate=[None if np.isnan(v) else float(v) for v in self.pass_rate], visits=self.visits.tolist(),
            last_step=self.last_step.tolist(), last_pick=self.last_pick.tolist(), best=self.best, level=self.level,
            picks=self.picks, revisits=self.revisits, first_step=self.first_step))

    def load(self, path: Path) -> str | None:
        """A checkpoint's state (``path``: its ``curriculum.json``); what to say when it cannot be
        used (none saved, another dataset size): the curriculum starts afresh then."""
        try:
            self.restore(path.read_bytes())
        except FileNotFoundError:
            return f"{path.parent.name} has no curriculum state ({path.name}): every prompt starts unseen"
        except (ValueError, msgspec.DecodeError) as exc:
            return f"{path}: {exc}; every prompt starts unseen"
        return None

    def restore(self, raw: bytes) -> None:
        saved = msgspec.json.decode(raw, type=_Saved)
        if len(saved.visits) != self.size:
            raise ValueError(f"the checkpoint's curriculum has {len(saved.visits)} prompts, the data {self.size}")
        self.pass_rate = np.array([np.nan if v is None else v for v in saved.pass_rate], dtype=np.float64)
        self.visits = np.array(saved.visits, dtype=np.int64)
        self.last_step = np.array(saved.last_step, dtype=np.int64)
        self.last_pick = np.array(saved.last_pick, dtype=np.int64)
        self.best, self.level = saved.best, saved.level
        self.picks = {int(k): list(v) for k, v in saved.picks.items()}
        self.revisits = {int(k): v for k, v in saved.revisits.items()}
        self.first_step = saved.first_step
        self.pending = {}


def for_run(config: Config, dataset: list[Example], steps_per_epoch: int) -> Curriculum | None:
    """The run's curriculum (None when ``[curriculum]`` is off); numbers each example's ``row``."""
    c = config.curriculum
    if not c.on:
        return None
    for i, example in enumerate(dataset):
        example.row = i
    levels = levels_of([e.columns for e in dataset])
    if c.strategy == "levels" and levels is None:
        raise Mistake("config", "curriculum.strategy = \"levels\" needs each row's difficulty: a reasoning-gym source "
                                "([data] reasoning_gym, built at curriculum.levels levels) or a numeric \"level\" column "
                                "in every row; or use strategy = \"pass_rate\"")
    return Curriculum(size=len(dataset), seed=config.data.seed, batch_size=config.training.batch_size,
                      steps_per_epoch=steps_per_epoch, group_size=config.grpo.group_size,
                      levels=levels if c.strategy == "levels" else None, shuffle=config.data.shuffle)


def switched(current: Curriculum | None, config: Config, dataset: list[Example], steps_per_epoch: int) -> Curriculum | None:
    """A live change of ``curriculum.strategy``: off drops the curriculum; turned on, it starts with
    every prompt unseen from the next step; between ``pass_rate`` and ``levels`` it keeps what it
    learned (``levels`` restricts the pool to the current level and below)."""
    if current is None or not config.curriculum.on:
        return for_run(config, dataset, steps_per_epoch)
    levels = levels_of([e.columns for e in dataset])
    current.levels = levels if config.curriculum.strategy == "levels" else None
    if current.levels is not None:
        current.level = int(current.levels.min())
    return current


def problem(config: Config, dataset: list[Example], key: str, value: Any) -> str | None:
    """Why a live ``curriculum.strategy`` cannot be ``value`` (None: it can)."""
    if key == "curriculum.strategy" and value == "levels" and levels_of([e.columns for e in dataset]) is None:
        return ("\"levels\" needs each row's difficulty (a numeric \"level\" column, or a reasoning-gym source built "
                "with strategy = \"levels\" from the start); \"pass_rate\" works on any data")
    return None


def levels_of(columns: list[dict[str, Any]]) -> np.ndarray | None:
    """Each row's ``level`` column as numbers, or None when the data has none."""
    values = [c.get("level") for c in columns]
    if any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in values):
        return None
    return np.array(values, dtype=np.int64)
