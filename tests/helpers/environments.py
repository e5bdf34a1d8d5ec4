"""A small ``[environment]`` run for the tests that compare runs (resume, ranks): TRL-style, with a
self-sampled secret in ``reset``, a tool method, ``respond`` replies and ``get_reward``."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "examples" / "models" / "tiny-agent"

GAME = '''
import random


class Game:
    def reset(self, prompt, **row):
        self.secret, self.turns, self.won = random.randint(1, 9), 0, False
        return f" Guess my number (1-9); multiply helps. Hint: {random.randint(0, 99)}."

    def multiply(self, a: int, b: int) -> int:
        """Multiply two numbers.

        Args:
            a: the first.
            b: the second.
        """
        return a * b + self.secret

    def respond(self, message):
        self.turns += 1
        digits = [int(c) for c in message if c.isdigit()]
        if digits and digits[-1] == self.secret:
            self.won = True
            return None
        return None if self.turns >= 2 else ("higher" if not digits or digits[-1] < self.secret else "lower")

    def get_reward(self):
        return float(self.won) + 0.1 * self.turns
'''


def write_game_run(folder: Path, max_steps: int, **training: object) -> Path:
    """``folder/config.toml``: the game on the tiny agent model, 4 prompts, batch 2, group 2."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "game.py").write_text(GAME)
    (folder / "data.jsonl").write_text("".join(f'{{"prompt": "Round {i}."}}\n' for i in range(4)))
    extra = "".join(f"{k} = {v}\n" for k, v in training.items())
    (folder / "config.toml").write_text(f"""
[model]
path = "{AGENT}"
[data]
path = "data.jsonl"
[environment]
class = "game.py:Game"
[grpo]
group_size = 2
[generation]
max_completion_length = 64
[training]
batch_size = 2
learning_rate = 1e-3
max_steps = {max_steps}
num_epochs = 10
silent_patience = 0
{extra}
[checkpoint]
output_dir = "out"
save_every = 0
""")
    return folder / "config.toml"
