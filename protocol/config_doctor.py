"""``[doctor]``: the run doctor's marks (docs/doctor.md): when a run is said to go wrong, and how badly."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from grpo_tui.protocol.config_base import Section, invalid

Marks = list[float]  # the info, warning and critical marks of one finding, ascending


def _marks(*values: float) -> Any:
    return msgspec.field(default_factory=lambda: list(values))

FINDINGS = ("no_signal", "truncation", "pass_rate", "entropy_collapse", "kl", "clipping", "length_hacking",
            "repetition", "reward_dominance", "reward_up_eval_down", "flat_reward", "grad_spike", "slowdown", "converged",
            "probe", "off_policy")


class DoctorConfig(Section):
    """The doctor watches every run (``enabled``); each finding's marks are [info, warning, critical]."""

    enabled: bool = True
    window: int = 10  # steps a finding looks back over
    stop_on: Literal["off", "warning", "critical"] = "off"  # end the run on a finding this severe
    silence: list[str] = []  # findings not to raise in this run
    probe: bool = False  # before step 1 of a fresh run: `check --probe`'s measurement, said as the finding "probe"
    probe_prompts: int = 16  # the prompts it samples (× group_size)
    no_signal: Marks = _marks(0.30, 0.50, 0.75)  # share of groups whose rewards all match
    truncation: Marks = _marks(0.05, 0.15, 0.40)  # share of completions cut at max_completion_length
    pass_rate: Marks = _marks(0.50, 0.75, 0.90)  # share of prompts whose group passes 0 % or 100 % (accuracy reward)
    entropy_collapse: Marks = _marks(0.50, 0.30, 0.10)  # token entropy as a fraction of its start, falling (descending)
    kl: Marks = _marks(0.10, 0.50, 1.00)  # mean KL to the reference (with beta > 0)
    clipping: Marks = _marks(0.10, 0.20, 0.40)  # share of tokens whose ratio was clipped
    length_hacking: Marks = _marks(0.50, 1.00, 2.00)  # growth of the mean length since the start, with reward tracking it
    repetition: Marks = _marks(0.10, 0.25, 0.50)  # share of completions with a 4-gram repeated 3 times or more
    reward_dominance: Marks = _marks(0.80, 0.90, 0.97)  # share of the total reward's spread from one function
    reward_up_eval_down: Marks = _marks(0.05, 0.10, 0.20)  # eval accuracy lost from its best while the reward rises
    flat_reward: Marks = _marks(20.0, 40.0, 80.0)  # steps without the reward moving
    grad_spike: Marks = _marks(5.0, 10.0, 50.0)  # a step's grad norm over the run's median
    slowdown: Marks = _marks(1.4, 2.0, 3.0)  # the window's median step time over the run's
    off_policy: Marks = _marks(0.10, 0.25, 0.50)  # [async]: share of loss tokens the importance-sampling correction clipped or masked

    def __post_init__(self) -> None:
        if self.window < 2:
            raise invalid("window", self.window, "must be at least 2 steps")
        if self.probe_prompts < 1:
            raise invalid("probe_prompts", self.probe_prompts, "must be at least 1")
        for name in self.silence:
            if name not in FINDINGS:
                raise invalid("silence", name, f"is not a finding ({', '.join(FINDINGS)})")
        for name in FINDINGS:
            marks = getattr(self, name, None)
            if not isinstance(marks, list):  # converged has no marks; probe is the switch
                continue
            descending = name == "entropy_collapse"
            ordered = marks == sorted(marks, reverse=descending)
            if len(marks) != 3 or not ordered or any(v < 0 for v in marks):
                how = "descending" if descending else "ascending"
                raise invalid(name, marks, f"must be three {how} numbers >= 0: the info, warning and critical marks")
