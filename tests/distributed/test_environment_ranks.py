"""An ``[environment]`` run on two local ranks equals it on one (docs/environments.md): every rank
resets every row's episodes alike (seeded per seed, step and row), runs its own rollouts' tools and
replies, and scores its own episodes before the gather."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.environments import write_game_run
from tests.helpers.worker_harness import query


def _run(config: Path, *args: str) -> None:
    out = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(config), "--plain", *args],
                         capture_output=True, text=True, timeout=600, cwd=config.parent)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]


@pytest.mark.slow
def test_two_ranks_with_an_environment_equal_one_rank(tmp_path):
    _run(write_game_run(tmp_path / "one", 3, gradient_accumulation_steps=2))
    _run(write_game_run(tmp_path / "two", 3, gradient_accumulation_steps=2), "--ranks", "2")
    sql = "SELECT step, prompt_index, group_index, prompt, completion, reward, reward_details, turns FROM generations " \
          "ORDER BY step, prompt_index, group_index"
    one, two = (query(tmp_path / f / "out" / "outputs.db", sql) for f in ("one", "two"))
    assert len(one) == 3 * 2 * 2 and one == two
    losses = [query(tmp_path / f / "out" / "outputs.db", "SELECT step, loss FROM steps ORDER BY step") for f in ("one", "two")]
    assert [s for s, _ in losses[0]] == [s for s, _ in losses[1]]
    assert all(abs(a - b) < 1e-5 for (_, a), (_, b) in zip(*losses))
