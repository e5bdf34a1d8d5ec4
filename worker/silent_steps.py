"""No silent training: a step whose rewards are all None, or all the same across the whole batch,
has no learning signal (every advantage is 0). The first such step warns (the Logs tab; the
dashboard's banner reads the same step), and ``training.silent_patience`` of them in a row stop the
run with a sentence saying which silence it is: a solved task (done, exit 0, the model saved as
``final/``), a task too hard for the model (exit 5, ``Exit.UNREWARDED``), or a reward that says
nothing (a fixable mistake, exit 2: a function scoring None or one value whatever the completion, a
column it reads missing); the last two after a checkpoint that ``resume = "latest"`` picks.
"""

from __future__ import annotations

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.outcome import Exit
from grpo_tui.worker.context import RunContext


def silence(metrics: m.Step) -> str | None:
    """Why ``metrics``' step has no learning signal, or None when it has one."""
    rewards = metrics.completion_rewards
    if not rewards:
        return None
    present = [r for r in rewards if r is not None]
    if not present:
        return f"every reward of its {len(rewards)} completions is None (no reward function scored them)"
    if len(present) == len(rewards) and len(rewards) > 1 and max(present) - min(present) <= 1e-12:
        return f"all {len(rewards)} completions got the same reward, {present[0]:g}"
    return None


class SilentSteps:
    """Counts the silent steps in a row; stops the run at ``training.silent_patience``, saying which
    kind of silence it was (``exit_code``): solved (every completion at the run's best reward, which
    is above what it scored before or at least the weights' sum, each function's usual 1: done, 0),
    too hard (every completion at the run's lowest reward, at most 0: ``Exit.UNREWARDED``), or a
    reward that scores nothing or the same middling value whatever the completion (a mistake, 2)."""

    def __init__(self, run: RunContext) -> None:
        self.run = run
        self.streak = 0
        self.warned = False
        self.stopped_because: str | None = None
        self.exit_code: int = Exit.MISTAKE
        self.solved = False  # the run stops as done: its task is solved
        self.best: float | None = None  # the highest and lowest reward of any completion since the start
        self.worst: float | None = None

    def _seen(self, metrics: m.Step) -> None:
        present = [r for r in metrics.completion_rewards or [] if r is not None]
        if present:
            self.best = max([*present, *([self.best] if self.best is not None else [])])
            self.worst = min([*present, *([self.worst] if self.worst is not None else [])])

    def after_step(self, metrics: m.Step) -> bool:
        """Count ``metrics``' step; True when the run must stop here."""
        self._seen(metrics)
        why = silence(metrics)
        if why is None:
            self.streak = 0
            return False
        self.streak += 1
        patience = self.run.config.training.silent_patience
        if not self.warned:
            self.warned = True
            stop = f"; {patience} such steps in a row stop the run" if patience else ""
            self.run.log("warning", f"step {metrics.step} trains on nothing: {why}, so every advantage is 0{stop}")
        if not patience or self.streak < patience:
            return False
        self.stopped_because = self._sentence(metrics, why)
        if self.solved:
            self.run.log("info", self.stopped_because)
        else:
            kind = "reward" if self.exit_code == Exit.MISTAKE else None
            if self.run.store is not None:  # the store's log has it; the screen has the error once
                self.run.store.queue_log(metrics.step, "error", self.stopped_because)
            self.run.emit(m.Error(message=self.stopped_because, fatal=True, exit_code=self.exit_code, kind=kind,
                                  log_path=str(self.run.emitter.jsonl_path)))
        self.run.control.stop("silent")
        return True

    def _sentence(self, metrics: m.Step, why: str) -> str:
        """Which silence this was (sets ``exit_code`` and ``solved``), as one sentence."""
        rewards = metrics.completion_rewards or []
        value = rewards[0] if rewards and all(r is not None and r == rewards[0] for r in rewards) else None
        ceiling = sum(r.weight for r in self.run.config.rewards if r.weight > 0)
        if value is not None and self.best is not None and self.worst is not None:
            if value >= self.best and (value > self.worst or value >= ceiling > 0):
                self.solved, self.exit_code = True, Exit.DONE
                return (f"training stopped early, solved: every completion of the last {self.streak} steps got the "
                        f"reward {value:g}, the best of the run (step {metrics.step}), so nothing is left to learn from "
                        "these prompts; the model is saved as final/ (set training.silent_patience = 0 to train on anyway)")
            if value <= min(self.worst, 0.0):
                self.exit_code = Exit.UNREWARDED
                return (f"training stopped: no completion earned a reward in {self.streak} steps in a row (every one "
                        f"scored {value:g}, the lowest of the run; step {metrics.step}), so nothing trains; the task is "
                        "too hard for the model as it is: start from easier prompts, a larger model, a reward with "
                        "partial credit or a longer generation.max_completion_length, or set "
                        "training.silent_patience = 0 to train on anyway")
        self.exit_code = Exit.MISTAKE
        return (f"training stopped: {self.streak} steps in a row had no learning signal (step {metrics.step}: {why}); "
                "check the reward functions and the data columns they read (the Logs tab has their warnings), "
                "or set training.silent_patience = 0 to train on anyway")
