"""The dashboard with the real worker: a run that trains on nothing shows why on screen, and the
sample display the user chose survives a crash restart."""

from __future__ import annotations

import os
import signal

import pytest

from grpo_tui.protocol.config import load_config
from grpo_tui.tui.app import GrpoApp
from grpo_tui.tui.screens.crash import MistakeScreen
from grpo_tui.tui.screens.dashboard import DashboardScreen
from tests.helpers.worker_harness import reward_config, tiny_model, write_config

from .conftest import wait_until

__all__ = ["tiny_model"]

NONE_PY = '''
def nothing(completions, **kwargs):
    return [None] * len(completions)
'''


@pytest.mark.slow
async def test_a_run_that_trains_on_nothing_says_so_on_screen_and_stops(tmp_path, tiny_model):
    (tmp_path / "quiet.py").write_text(NONE_PY)
    config_path = write_config(tmp_path, tiny_model, rewards=f'[[rewards]]\nfunction = "{tmp_path / "quiet.py"}:nothing"\n',
                               training={"max_steps": 0, "num_epochs": 50, "silent_patience": 3},
                               checkpoint={"save_every": 0})
    app = GrpoApp(str(config_path), load_config(config_path), stop_timeout_s=60.0)
    async with app.run_test(size=(160, 48)) as pilot:
        # a fixable mistake: the supervisor keeps the run for a retry, and the modal says why
        await wait_until(pilot, lambda: isinstance(app.screen, MistakeScreen), timeout=120)
        await pilot.pause(0.5)
        assert app.run_link.restarts == 0 and app.run_link.worker_code == 2 and app.state.step == 3  # never restarted
        assert "3 steps in a row had no learning signal" in app.state.error
        await pilot.press("escape")
        await pilot.pause(0.3)
        banner = app.query_one("#zero-std")
        assert banner.display and "every reward of this step is None" in str(banner.render())
        await pilot.press("q")


@pytest.mark.slow
async def test_the_sample_display_survives_a_crash_restart(tmp_path, tiny_model):
    config_path = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"),
                               training={"max_steps": 0, "num_epochs": 2000}, checkpoint={"save_every": 1},
                               display={"sample_display": "best_worst", "restart_delay_s": 0.2})
    app = GrpoApp(str(config_path), load_config(config_path), stop_timeout_s=60.0)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: app.state.step >= 2 and app.state.status == "running"
                         and isinstance(app.screen, DashboardScreen), timeout=120)
        await pilot.press("m")  # best_worst -> random
        await wait_until(pilot, lambda: app.display_mode == "random", timeout=10)
        await wait_until(pilot, lambda: any(s.display == "random" for s in app.state.samples), timeout=60)
        first = app.run_link.connection.worker_pid
        os.kill(first, signal.SIGKILL)  # a crash: the dashboard restarts it from the latest checkpoint
        await wait_until(pilot, lambda: app.run_link.restarts == 1 and app.run_link.connection.worker_pid != first and app.state.status == "running",
                         timeout=120)
        restarted_at = app.state.step
        await wait_until(pilot, lambda: app.state.step >= restarted_at + 2, timeout=120)
        late = [s for s in app.state.samples if s.step >= restarted_at + 2]
        assert late and {s.display for s in late} == {"random"}  # the worker was told again, and says so
        assert app.display_mode == "random"
        await pilot.press("q")
        await pilot.press("y")
