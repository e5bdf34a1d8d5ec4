"""The multi-turn demo (examples/guess_sum.py, examples/guess_sum.toml): the environment's replies,
and the demo running as shipped through the real worker, cut to tiny steps (that it runs and reports
a before and an after, not that it learns: the README's figures are measured on a quiet machine)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _demo():
    spec = importlib.util.spec_from_file_location("guess_sum", EXAMPLES / "guess_sum.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_wrong_answer_gets_higher_or_lower_and_a_win_ends_the_episode():
    demo = _demo()
    env = demo.GuessSum()
    assert env.reset(prompt="What is 23+45?", answer="68") is None
    assert env.respond("<answer>50</answer>") == "higher" and env.respond("<answer>70</answer>") == "lower"
    assert env.respond("<answer>68</answer>") is None and env.won and env.turns == 3
    assert env.get_reward() == 1.0 - 2 / 3  # a win, two answers late
    env.reset(answer="68")
    assert env.respond("no number") == "higher" and env.respond("1") == "higher" and env.respond("2") is None
    assert not env.won and env.get_reward() == 0.0  # three answers, none right: over


def test_the_demo_runs_as_shipped_and_reports_before_and_after(tmp_path):
    out = tmp_path / "guess"
    sets = [f"checkpoint.output_dir='{out}'", "training.max_steps=2", "training.batch_size=2", "grpo.group_size=2",
            "eval.every=0", "eval.limit=4"]
    args = [sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(EXAMPLES / "guess_sum.toml"), "--plain"]
    for item in sets:
        args += ["--set", item]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    said = subprocess.run([sys.executable, str(EXAMPLES / "guess_sum.py"), "report", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert said.returncode == 0, said.stderr
    before, after = said.stdout.splitlines()
    assert before.startswith("before (step 0): wins ") and "mean turns" in before and "(4 held-out sums)" in before
    assert after.startswith("after (step 2): wins ")
