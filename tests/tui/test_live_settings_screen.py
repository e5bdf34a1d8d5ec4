"""The ``t`` screen (tune) against the real worker (docs/steering.md): a change applies from the next step,
every viewer gets it, the Config tab lists it; a bad value says --set's sentence and changes nothing."""

from __future__ import annotations

import pytest
from textual.widgets import Input, Static

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import load_config
from grpo_tui.tui.app import GrpoApp
from grpo_tui.tui.screens.settings import SettingsScreen
from tests.helpers.pilot import screen_text, until
from tests.helpers.viewer import Viewer
from tests.helpers.worker_harness import tiny_model, write_config

__all__ = ["tiny_model"]

SIZE = (200, 50)


async def edit(app: GrpoApp, pilot, key: str, value: str) -> None:  # type: ignore[no-untyped-def]
    """t, the key's value replaced by ``value``, enter."""
    await pilot.press("t")
    await until(pilot, lambda: isinstance(app.screen, SettingsScreen), "the live settings")
    screen = app.screen
    assert isinstance(screen, SettingsScreen)
    row = [k for k, _, _ in screen.rows].index(key)
    box = screen.query_one(f"#setting-{row}", Input)
    box.focus()
    box.value = value
    await pilot.press("enter")
    await until(pilot, lambda: not isinstance(app.screen, SettingsScreen), "the screen closed")


@pytest.mark.slow
async def test_the_t_screen_changes_the_running_run_for_every_viewer(tmp_path, tiny_model):
    config_path = write_config(tmp_path, tiny_model, training={"max_steps": 100000, "num_epochs": 20000,
                                                               "silent_patience": 0}, checkpoint={"save_every": 0})
    app = GrpoApp(str(config_path), load_config(config_path), stop_timeout_s=60.0)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.state.step >= 1, "training", 120)
        other = Viewer(tmp_path / "out")  # a second viewer of the same run
        await pilot.press("p")
        await until(pilot, lambda: app.state.status == "paused", "paused", 60)
        n = app.state.step

        await edit(app, pilot, "training.learning_rate", "2e-3")
        await until(pilot, lambda: len(app.state.changes) == 1, "the change", 30)
        change = app.state.changes[0]
        assert (change.key, change.old, change.new, change.step, change.source) == (
            "training.learning_rate", 0.01, 0.002, n + 1, "dashboard")
        assert f"training.learning_rate = 0.002 from step {n + 1} (dashboard)" in [x.message for x in app._notifications]
        seen = other.wait_for(m.SettingChanged)
        assert (seen.key, seen.step) == ("training.learning_rate", n + 1)

        await edit(app, pilot, "grpo.beta", "-1")  # a bad value: --set's sentence, nothing changes
        await until(pilot, lambda: any("grpo.beta: -1.0 must be >= 0" in x.message for x in app._notifications),
                    "the refusal's sentence", 30)
        assert len(app.state.changes) == 1

        await pilot.press("3")  # the Config tab: the effective value and the change
        await until(pilot, lambda: "live changes" in screen_text(app), "the history of changes")
        text = screen_text(app)
        assert "from step" in text and "training.learning_rate  0.01 → 0.002  (dashboard)" in text
        shown = str(app.query_one("#config-text", Static).content)  # the resolved config: the effective one
        assert "learning_rate = 0.002" in shown and "learning_rate = 0.01" not in shown
        await pilot.press("r")
        await until(pilot, lambda: any(s == n + 1 for s in app.state.history_steps), "the next step", 60)
        assert app.state.last_step is not None and app.state.last_step.learning_rate == pytest.approx(0.002)
        other.close()
        app.exit()
