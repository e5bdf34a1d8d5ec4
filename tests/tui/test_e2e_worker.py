"""The dashboard with the real worker on a tiny model: start, pause, save, resume, quit."""

from __future__ import annotations

import pytest

from grpo_tui.protocol.config import load_config
from grpo_tui.tui.app import GrpoApp
from grpo_tui.tui.screens.confirm_quit import ConfirmQuitScreen
from tests.helpers.worker_harness import query, tiny_model, write_config

from .conftest import process_gone, wait_until

__all__ = ["tiny_model"]  # the fixture, imported for pytest


@pytest.mark.slow
async def test_real_worker_pause_save_resume_quit(tmp_path, tiny_model):
    # silent_patience 0: the tiny random model's groups often tie, and this run must not stop itself
    config_path = write_config(tmp_path, tiny_model, training={"max_steps": 5000, "num_epochs": 2000, "silent_patience": 0},
                               checkpoint={"save_every": 0})
    app = GrpoApp(str(config_path), load_config(config_path), stop_timeout_s=60.0)
    async with app.run_test(size=(160, 48)) as pilot:
        # a step's samples follow its step frame: a flush may fold the one before the others arrive
        await wait_until(pilot, lambda: app.state.step >= 1 and bool(app.state.samples), timeout=120)
        pid = app.run_link.connection.worker_pid
        assert app.state.model and app.state.total_steps == 5000 and app.state.samples
        await pilot.press("p")
        await wait_until(pilot, lambda: app.state.status == "paused", timeout=60)
        paused_at = app.state.step
        await pilot.press("s")
        await wait_until(pilot, lambda: any(c.kind == "manual" for c in app.state.checkpoints), timeout=60)
        assert app.state.step == paused_at  # saving does not train
        await pilot.press("r")
        await wait_until(pilot, lambda: app.state.step > paused_at, timeout=60)
        assert app.state.status == "running"
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmQuitScreen)
        await pilot.press("y")
        await wait_until(pilot, lambda: not app.is_running, timeout=90)
    assert app.return_value == 4  # stopped by the user, like the worker (protocol/outcome.py)
    assert app.run_link.worker_code == 4
    assert process_gone(pid)
    assert any(c.kind == "final" for c in app.state.checkpoints)
    assert app.state.complete is not None and app.state.complete.status == "stopped"


@pytest.mark.slow
async def test_real_worker_eval_curves_greedy_and_sampled_and_tile(tmp_path, tiny_model):
    rewards = '[[rewards]]\nname = "accuracy"\n'
    evals = {"every": 2, "limit": 2, "also_sampled": True, "num_samples": 2}
    config_path = write_config(tmp_path, tiny_model, rewards=rewards, eval=evals)
    app = GrpoApp(str(config_path), load_config(config_path), stop_timeout_s=60.0)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: app.state.complete is not None, timeout=120)
        await pilot.pause(0.2)
        # eval.also_sampled: each evaluation is a greedy pass, then a sampled one (2 per prompt)
        assert [(e.step, e.greedy, e.num_samples) for e in app.state.evals] == [
            (0, True, 1), (0, False, 2), (2, True, 1), (2, False, 2), (4, True, 1), (4, False, 2)]
        greedy, sampled = app.state.eval_curves()
        assert greedy.label == "eval greedy accuracy" and sampled.label == "eval sampled accuracy"
        assert greedy.steps == sampled.steps == [0, 2, 4] and None not in [*greedy.values, *sampled.values]
        assert app.state.eval_curves()[0] == greedy
        tile = app.query_one("#tile-eval")
        assert tile.border_title == "eval" and "@4" in str(tile.query_one(".tile-value").render())
        chart = app.query_one("#chart")
        assert chart._evals == [greedy, sampled]  # what the chart draws next
        assert "eval greedy accuracy" in str(chart.border_title) and "eval sampled accuracy" in str(chart.border_title)
        await pilot.press("q")
    stored = query(tmp_path / "out" / "outputs.db", "SELECT step, greedy, num_samples FROM evals ORDER BY step, greedy DESC")
    assert stored == [(0, 1, 1), (0, 0, 2), (2, 1, 1), (2, 0, 2), (4, 1, 1), (4, 0, 2)]


@pytest.mark.slow
async def test_a_nan_stop_is_not_restarted_and_says_what_to_do(tmp_path, tiny_model, monkeypatch):
    from grpo_tui.tui.screens.crash import CrashScreen
    from tests.helpers.worker_harness import FAULTY_TRAINER, reward_config

    from tests.helpers.trainer_env import fake_trainer_env

    for name, value in fake_trainer_env(FAULTY_TRAINER).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("FAKE_SKIP_STEPS", "3,4")
    config_path = write_config(
        tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"), training={"nan_patience": 2, "max_steps": 6},
    )  # fmt: skip
    app = GrpoApp(str(config_path), load_config(config_path), stop_timeout_s=60.0)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: app.state.complete is not None and not app.run_link.connection.running, timeout=120)
        await pilot.pause(1.0)  # a crash restart would count down now
        assert not isinstance(app.screen, CrashScreen) and app.run_link.restarts == 0
        assert app.state.status == "error"
        assert "learning_rate" in app.state.error and str(tmp_path / "out" / "last-good-2") in app.state.error
        await pilot.press("q")


@pytest.mark.slow
async def test_p_says_pausing_at_once_and_paused_when_the_step_ends(tmp_path, tiny_model, monkeypatch):
    from tests.helpers.worker_harness import reward_config

    monkeypatch.setenv("SLOW_REWARD_S", "2.0")  # every step scores for 2 s: p lands inside a step
    config_path = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "slow"),
                               training={"max_steps": 50, "silent_patience": 0}, checkpoint={"save_every": 0})
    app = GrpoApp(str(config_path), load_config(config_path), stop_timeout_s=60.0)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: app.state.step >= 1, timeout=120)
        header = app.query_one("#header")
        await pilot.press("p")
        await pilot.pause(0.1)
        assert app.state.status == "running" and "pausing after this step…" in str(header.render())
        await wait_until(pilot, lambda: app.state.status == "paused", timeout=60)
        await pilot.pause(0.1)
        assert "pausing" not in str(header.render()) and "paused" in str(header.render())
        await pilot.press("q", "y")
        await wait_until(pilot, lambda: not app.is_running, timeout=90)


@pytest.mark.slow
async def test_a_stopped_worker_is_said_to_be_silent_with_its_process_state(tmp_path, tiny_model):
    import os
    import signal

    config_path = write_config(tmp_path, tiny_model, training={"max_steps": 5000, "num_epochs": 2000, "silent_patience": 0},
                               checkpoint={"save_every": 0})
    app = GrpoApp(str(config_path), load_config(config_path), stop_timeout_s=60.0, stall_after_s=2.0)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: app.state.step >= 2, timeout=120)
        pid = app.run_link.connection.worker_pid
        header = app.query_one("#header")
        os.kill(pid, signal.SIGSTOP)  # as `kill -STOP`: no frame comes, the header keeps "running"
        try:
            await wait_until(pilot, lambda: app.state.silent is not None, timeout=30)
            await pilot.pause(1.2)
            shown = str(header.render())
            assert "no word from the worker for" in shown and "its process is stopped" in shown
        finally:
            os.kill(pid, signal.SIGCONT)
        await wait_until(pilot, lambda: app.state.silent is None, timeout=60)  # its next frame ends the notice
        await pilot.pause(1.2)
        assert "no word" not in str(header.render())
        await pilot.press("q", "y")
        await wait_until(pilot, lambda: not app.is_running, timeout=90)


@pytest.mark.slow
async def test_stop_and_stay_keeps_the_dashboard_on_the_finished_run(tmp_path, tiny_model):
    config_path = write_config(tmp_path, tiny_model, training={"max_steps": 5000, "num_epochs": 2000, "silent_patience": 0},
                               checkpoint={"save_every": 0})
    app = GrpoApp(str(config_path), load_config(config_path), stop_timeout_s=60.0)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: app.state.step >= 1, timeout=120)
        pid = app.run_link.connection.worker_pid
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmQuitScreen)
        await pilot.press("k")  # stop the run, keep the dashboard
        await wait_until(pilot, lambda: app.state.complete is not None and process_gone(pid), timeout=90)
        await pilot.pause(0.5)
        assert app.is_running and app.state.status == "done" and app.state.complete.status == "stopped"
        assert any(c.kind == "final" for c in app.state.checkpoints)
        for tab in "12345":  # every tab still opens on the finished run
            await pilot.press(tab)
            await pilot.pause(0.2)
        assert app.check_action("pause", ()) is not True  # nothing left to steer
        await pilot.press("q")  # now it closes at once
        await wait_until(pilot, lambda: not app.is_running, timeout=30)
    assert app.return_value == 4
