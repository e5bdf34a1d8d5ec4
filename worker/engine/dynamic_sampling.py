"""DAPO's dynamic sampling (``grpo.dynamic_sampling``): a group whose completions all score the same
has zero advantage and teaches nothing, so it is dropped and more prompts are rolled out, round
after round, until the step has ``batch_size`` informative groups or ``max_sampling_rounds`` ran out
(docs/config.md, "[grpo]").

A round is the step's usual rollout and scoring on ``batch_size`` prompts, gathered over the ranks,
so every rank sees every round whole and decides the same. Round 0 has the step's own prompts;
round r > 0 draws ``batch_size`` others from the dataset with a generator seeded by (seed, step, r),
and its rows' sampling keys continue the step's prompt positions (r·batch_size + i): the rounds, like
the step, are pure functions of the step, so a resumed run and any rank count sample the same.
With ``[curriculum]`` the extra rounds draw the curriculum's learning and unseen prompts instead.

The trained batch keeps the step's shape (``batch_size`` groups, the usual micro-batches): the
first ``batch_size`` informative groups in rollout order; when the rounds ran out before that, the
free slots hold dropped groups with their loss mask zeroed (``padding``), so the step trains on
the informative groups it has.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from grpo_tui.protocol.config import Config
from grpo_tui.worker.engine.prompts.curriculum import Curriculum
from grpo_tui.worker.engine.prompts import data
from grpo_tui.worker.engine.learning.grpo import zero_spread
from grpo_tui.worker.engine.scoring.reward_call import StepLog
from grpo_tui.worker.engine.policy.rollout import Completion


@dataclass
class Round:
    """One rollout-and-score of ``batch_size`` prompts, every rank's completions in global order
    (``prompt_index`` is the prompt's position in this round)."""

    examples: list[data.Example]
    completions: list[Completion]
    totals: list[float | None]
    per_fn: dict[str, list[float | None]]
    logged: StepLog
    generation_s: float = 0.0
    scoring_s: float = 0.0


@dataclass
class Selection:
    """The step's rounds, laid end to end (``prompt_index`` = round · batch_size + position), and
    which groups train. ``slots[k]`` is the group in trained slot k; ``padding`` holds the slots
    whose group is a dropped one standing in (its loss mask zeroed)."""

    examples: list[data.Example]
    completions: list[Completion]
    totals: list[float | None]
    per_fn: dict[str, list[float | None]]
    logged: StepLog
    slots: list[int]
    padding: set[int] = field(default_factory=set)
    rounds: int = 1
    informative: int = 0
    generation_s: float = 0.0  # the rounds' rollouts
    scoring_s: float = 0.0  # the rounds' scoring

    @property
    def dropped(self) -> set[int]:
        """Groups not trained on: every group outside the slots, and those standing in as padding."""
        trained = {g for k, g in enumerate(self.slots) if k not in self.padding}
        return set(range(len(self.examples))) - trained

    def trained(self, group_size: int) -> tuple[list[data.Example], list[Completion], list[float | None], list[bool]]:
        """The trained batch: examples by slot, completions with ``prompt_index`` = slot, their
        totals, and whether each completion is padding."""
        examples = [self.examples[g] for g in self.slots]
        completions, totals, padding = [], [], []
        for k, g in enumerate(self.slots):
            for i in range(g * group_size, (g + 1) * group_size):
                completions.append(dataclasses.replace(self.completions[i], prompt_index=k))
                totals.append(self.totals[i])
                padding.append(k in self.padding)
        return examples, completions, totals, padding

    def trained_scores(self, group_size: int) -> dict[str, list[float | None]]:
        """Each reward function's scores of the trained batch, in ``trained``'s order (``per_fn``
        holds every generated completion's, the dropped groups' too)."""
        rows = [i for g in self.slots for i in range(g * group_size, (g + 1) * group_size)]
        return {label: [scores[i] for i in rows] for label, scores in self.per_fn.items()}


def informative_groups(totals: list[float | None], group_size: int) -> list[bool]:
    """Per group: its scored rewards are not all equal (an unscored completion, ``None``, is left
    out, as in the advantages: a group with fewer than two scores teaches nothing)."""
    values = np.array([np.nan if t is None else t for t in totals], dtype=np.float64).reshape(-1, group_size)
    return [not flat for flat in zero_spread(values)[:, 0]]


def extra_prompts(step: int, round_: int, dataset_size: int, batch_size: int, seed: int, used: set[int]) -> list[int]:
    """Dataset indices of round ``round_`` (≥ 1): ``batch_size`` prompts not yet used this step when
    the dataset has that many, drawn without replacement by a generator of (seed, step, round)."""
    order = np.random.default_rng([seed, step, round_]).permutation(dataset_size)
    fresh = [int(i) for i in order if int(i) not in used]
    picks = fresh[:batch_size]
    if len(picks) < batch_size:  # a dataset smaller than the rounds need: repeat prompts
        picks += [int(order[i % dataset_size]) for i in range(batch_size - len(picks))]
    return picks


def count_informative(rounds: list[Round], group_size: int) -> int:
    return sum(sum(informative_groups(r.totals, group_size)) for r in rounds)


def next_round(step: int, rounds: list[Round], used: set[int], dataset_size: int, config: Config,
               curriculum: Curriculum | None = None) -> list[int] | None:
    """The dataset indices of the step's next round, or None: without ``grpo.dynamic_sampling``,
    or once the rounds so far hold ``batch_size`` informative groups or ``max_sampling_rounds`` ran.
    ``used``: the step's prompts so far (this round's are added). With a ``curriculum``, the round's
    prompts are its learning and unseen ones (``Curriculum.extra``)."""
    g, t = config.grpo, config.training
    if not g.dynamic_sampling or count_informative(rounds, g.group_size) >= t.batch_size or len(rounds) >= g.max_sampling_rounds:
        return None
    if curriculum is not None:
        more = curriculum.extra(step, len(rounds), used, config.curriculum)
    else:
        more = extra_prompts(step, len(rounds), dataset_size, t.batch_size, config.data.seed, used)
    used.update(more)
    return more


def select(rounds: list[Round], group_size: int, batch_size: int, dynamic: bool) -> Selection:
    """The rounds end to end and the trained slots (every group, in order, when not ``dynamic``)."""
    examples, completions, totals = [], [], []
    labels = list(rounds[0].per_fn)
    per_fn: dict[str, list[float | None]] = {label: [] for label in labels}
    for r, round_ in enumerate(rounds):
        offset = r * batch_size
        examples += round_.examples
        completions += [dataclasses.replace(c, prompt_index=c.prompt_index + offset) for c in round_.completions]
        totals += round_.totals
        for label in labels:
            per_fn[label] += round_.per_fn[label]
    logged = _merge_logs([r.logged for r in rounds], len(completions))
    generation_s, scoring_s = sum(r.generation_s for r in rounds), sum(r.scoring_s for r in rounds)
    if not dynamic:
        return Selection(examples, completions, totals, per_fn, logged, slots=list(range(len(examples))),
                         generation_s=generation_s, scoring_s=scoring_s)
    useful = informative_groups(totals, group_size)
    good = [g for g, ok in enumerate(useful) if ok]
    slots = good[:batch_size]
    stand_ins = [g for g, ok in enumerate(useful) if not ok][: batch_size - len(slots)]
    padding = set(range(len(slots), len(slots) + len(stand_ins)))
    return Selection(examples, completions, totals, per_fn, logged, slots=slots + stand_ins, padding=padding,
                     rounds=len(rounds), informative=len(good), generation_s=generation_s, scoring_s=scoring_s)


def _merge_logs(logs: list[StepLog], n: int) -> StepLog:
    """One StepLog over the rounds' completions end to end (log_metric values pooled)."""
    if len(logs) == 1:
        return logs[0]
    merged = StepLog(n, logs[0].warn)
    for name in dict.fromkeys(k for log in logs for k in log.metrics):
        merged.metrics[name] = [v for log in logs for v in log.metrics.get(name, [])]
    for name in dict.fromkeys(k for log in logs for k in log.extras):
        merged.extras[name] = [v for log in logs for v in log.extras.get(name, [None] * log.n)]
    return merged


def metrics(selection: Selection, group_size: int) -> dict[str, float]:
    """The step's ``sampling/*`` metrics (``extra_metrics``)."""
    return {
        "sampling/rounds": float(selection.rounds),
        "sampling/dropped_groups": float(len(selection.dropped)),
        "sampling/generated_completions": float(len(selection.completions)),
    }


def shortfall(selection: Selection, batch_size: int) -> str | None:
    """What the step says when the rounds ran out before ``batch_size`` informative groups."""
    if selection.informative >= batch_size:
        return None
    return (f"dynamic sampling found {selection.informative} of {batch_size} informative groups in "
            f"{selection.rounds} rounds (max_sampling_rounds); training on those {selection.informative}, "
            f"the other {batch_size - selection.informative} slots masked out")
