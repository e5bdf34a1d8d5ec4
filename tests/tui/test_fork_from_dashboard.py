"""``f`` on a checkpoint of the Config tab (docs/steering.md, "Fork a run"), through the real worker:
the dashboard asks for the changes, makes the fork, starts it in the background from the step after
the checkpoint, and draws it over this run's charts from its branch point."""

from __future__ import annotations

import json

import pytest
from textual.widgets import DataTable, Input

from grpo_tui.protocol import control as c
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import load_config
from grpo_tui.tui.app import GrpoApp
from grpo_tui.tui.cli import attach_target
from grpo_tui.tui.launcher import end_started
from grpo_tui.tui.screens.fork_dialog import ForkScreen
from grpo_tui.tui.widgets.config_panel import ConfigPanel
from tests.helpers.worker_harness import WorkerProcess, reward_config, tiny_model, write_config

from .conftest import wait_until

__all__ = ["tiny_model"]

pytestmark = pytest.mark.slow


async def test_f_on_a_checkpoint_forks_the_run_with_the_changes_and_compares_it(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"),
                          training={"max_steps": 4, "silent_patience": 0}, checkpoint={"save_every": 2, "keep_last": 0})
    parent = WorkerProcess(config)
    parent.wait_for(m.Complete)
    assert parent.finish() == 0
    out, child = tmp_path / "out", tmp_path / "out-fork-2"
    target = attach_target(str(out))
    assert not isinstance(target, str), target
    app = GrpoApp(str(target[0] / "config.toml"), target[1], run_dir=str(target[0]), launch=False)
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.press("3")  # the Config tab: its checkpoints table has the focus
            panel = app.query_one(ConfigPanel)
            await wait_until(pilot, lambda: any(i.step == 2 for i in panel.checkpoints))
            row = next(n for n, i in enumerate(panel.checkpoints) if i.step == 2)
            app.query_one("#checkpoints-table", DataTable).move_cursor(row=row)
            await pilot.press("f")
            await wait_until(pilot, lambda: isinstance(app.screen, ForkScreen))
            assert app.screen.query_one("#fork-folder", Input).value == str(child)
            app.screen.query_one("#fork-sets", Input).value = "generation.temperature=0.5"
            await pilot.press("enter")
            compared = app.dashboard.compared
            await wait_until(pilot, lambda: [r.folder for r in compared.runs] == [child], timeout=60)
            await wait_until(pilot, lambda: compared.runs[0].last_step == 4, timeout=120)
            assert list(compared.runs[0].book.steps) == [3, 4]  # drawn from its branch point
        assert c.read_record(child) is not None  # started as grpo-tui fork --detach starts one: a supervisor
    finally:
        end_started()
    assert load_config(child / "config.toml").generation.temperature == 0.5
    steps = [f["step"] for f in map(json.loads, (child / "run.jsonl").read_text().splitlines()) if f["type"] == "step"]
    assert steps[:2] == [3, 4]
