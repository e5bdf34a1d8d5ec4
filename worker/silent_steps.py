"""No silent training: a step whose rewards are all None, or all the same across the whole batch,
has no learning signal (every advantage is 0). The first such step warns (the Logs tab; the
dashboard's banner reads the same step), and ``training.silent_patience`` of them in a row stop the
run with a sentence saying why and exit status 2 (a fixable mistake: a reward function scoring
nothing, a column it reads missing, a task the model always or never solves), after a checkpoint
that ``resume = "latest"`` picks.
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
    """Counts the silent steps in a row; stops the run at ``training.silent_patience``."""

    def __init__(self, run: RunContext) -> None:
        self.run = run
        self.streak = 0
        self.warned = False
        self.stopped_because: str | None = None

    def after_step(self, metrics: m.Step) -> bool:
        """Count ``metrics``' step; True when the run must stop here."""
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
        self.stopped_because = (
            f"training stopped: {self.streak} steps in a row had no learning signal (step {metrics.step}: {why}); "
            "check the reward functions and the data columns they read (the Logs tab has their warnings), "
            "or set training.silent_patience = 0 to train on anyway"
        )
        self.run.log("error", self.stopped_because)
        self.run.emit(m.Error(message=self.stopped_because, fatal=True, exit_code=Exit.MISTAKE, kind="reward",
                              log_path=str(self.run.emitter.jsonl_path)))
        self.run.control.stop("silent")
        return True
