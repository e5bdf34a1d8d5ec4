"""The multi-turn demo (docs/environments.md, "Multi-turn text episodes"): guess the sum, with
"higher" / "lower" replies.

Each episode is a held-out-style prompt of the quickstart's data ("What is 23+45?"). The model
answers; the environment replies "higher" or "lower" when the answer is wrong, and the model answers
again, up to ``MAX_TURNS`` answers. ``get_reward`` pays a win, more for a win in fewer turns; the
weight-0 rewards ``won`` and ``turns`` only measure (the eval line's columns: held-out wins and
mean answers per episode). The start model is the quickstart's warm model (examples/models/tiny-arith,
right about a third of the time at once), so GRPO has a signal from step 1.

    grpo-tui worker examples/guess_sum.toml --plain      # or: grpo-tui run examples/guess_sum.toml
    python examples/guess_sum.py report examples/runs/guess_sum   # held-out wins and mean turns, before -> after
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MAX_TURNS = 3
_NUMBER = re.compile(r"-?\d+")


class GuessSum:
    """One episode: the row's sum is the secret; each wrong answer gets "higher" or "lower"."""

    def reset(self, **row):
        self.secret, self.turns, self.won = int(row["answer"]), 0, False
        return None  # the prompt as it is: "What is a+b?"

    def respond(self, message):
        self.turns += 1
        numbers = _NUMBER.findall(message)
        guess = int(numbers[-1]) if numbers else None
        if guess == self.secret:
            self.won = True
            return None  # won: the episode is over
        if self.turns >= MAX_TURNS:
            return None
        return "higher" if guess is None or guess < self.secret else "lower"

    def get_reward(self):
        """1 for a win at the first answer, less for each answer more; 0 for none."""
        return (1.0 - (self.turns - 1) / MAX_TURNS) if self.won else 0.0


def won(completions, environments, **kwargs):
    """Measured, not paid (weight 0): 1.0 for an episode won."""
    return [float(env.won) for env in environments]


def turns(completions, environments, **kwargs):
    """Measured, not paid (weight 0): the answers the episode took."""
    return [float(env.turns) for env in environments]


def report(run_dir: Path) -> str:
    """The first and last evaluation of a run (its run.jsonl): held-out wins and mean turns."""
    from grpo_tui.protocol import messages as m
    from grpo_tui.protocol.codec import decode_event

    evals = [e for line in (run_dir / "run.jsonl").read_bytes().splitlines()
             if isinstance(e := decode_event(line), m.Eval)]
    if len(evals) < 2:
        raise SystemExit(f"{run_dir} has {len(evals)} evaluation(s); a before and an after need [eval] at start and end")
    first, last = evals[0], evals[-1]

    def figures(e: m.Eval) -> str:
        return f"wins {e.rewards['won']:.0%}, mean turns {e.rewards['turns']:.2f} ({e.num_prompts} held-out sums)"

    return f"before (step {first.step}): {figures(first)}\nafter (step {last.step}): {figures(last)}"


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "report":
        raise SystemExit("usage: python examples/guess_sum.py report RUN_DIR")
    print(report(Path(sys.argv[2])))
