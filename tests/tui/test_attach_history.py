"""``attach`` folds a long history fast (the steps that would leave the charts are only counted) and
ends with the same state as a dashboard that watched the whole run."""

from __future__ import annotations

from pathlib import Path

from grpo_tui.protocol import codec
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.layout import RUN_LOG_FILE
from grpo_tui.tui.app import GrpoApp
from grpo_tui.tui.series import HISTORY_LIMIT
from grpo_tui.tui.state import RunState

from tests.helpers.worker_harness import tiny_model

from .conftest import FROZEN, make_config, wait_until

__all__ = ["tiny_model"]

STEPS = HISTORY_LIMIT + 700


def events(folder: Path) -> list[m.Event]:
    out: list[m.Event] = [
        m.Hello(protocol_version=m.PROTOCOL_VERSION, worker_version="t", pid=1),
        m.Init(model="tiny", model_path="tiny", config=make_config(folder).to_dict(), total_steps=STEPS,
               steps_per_epoch=STEPS, output_dir=str(folder)),
    ]
    for step in range(1, STEPS + 1):
        out.append(m.Status(phase="generating"))
        out.append(m.Step(step=step, epoch=0, loss=1 / step, reward=step / STEPS, num_tokens=step % 7,
                          generation_ms=10.0 + step % 3, training_ms=5.0, completion_rewards=[0.0, step / STEPS]))
        if step % 1000 == 0:
            out.append(m.Sample(step=step, index=0, group=0, prompt="p", completion=f"c{step}", reward=0.5))
            out.append(m.Paused(step=step) if step == 5000 else m.Log(level="info", message=f"at {step}"))
    return out


async def test_a_long_history_folds_to_the_state_of_a_dashboard_that_watched(tmp_path):
    history = events(tmp_path)
    (tmp_path / RUN_LOG_FILE).write_bytes(b"".join(codec.encode(e) for e in history))
    watched = RunState(clock=lambda: FROZEN)
    for event in history:
        watched.apply(event)
    app = GrpoApp(str(tmp_path / "config.toml"), make_config(tmp_path), run_dir=str(tmp_path), launch=False,
                  clock=lambda: FROZEN)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: app.state.step == STEPS)
        s = app.state
        assert app.run_link.read_only
        assert (s.step, s.total_tokens, s.step_in_epoch, s.epoch) == (
            watched.step, watched.total_tokens, watched.step_in_epoch, watched.epoch)
        assert list(s.history_steps) == list(watched.history_steps) == list(range(701, STEPS + 1))
        assert s.series("reward") == watched.series("reward")
        assert s.book.keys() == watched.book.keys() and all(s.book.column(k) == watched.book.column(k) for k in s.book.keys())
        assert list(s.step_ms) == list(watched.step_ms) and s.last_step == watched.last_step
        assert [x.completion for x in s.samples] == ["c5000"]  # the newest samples


async def test_attaching_to_a_finished_run_that_max_steps_cut_inside_its_epoch_shows_it_whole(tmp_path, tiny_model):
    """4 batches an epoch, max_steps = 3: the epoch bar is full on attach, as the live dashboard showed it."""
    import subprocess
    import sys

    from textual.widgets import ProgressBar, Static

    from grpo_tui.protocol.config import load_config
    from tests.helpers.worker_harness import write_config

    config = write_config(tmp_path, tiny_model, training={"max_steps": 3}, checkpoint={"save_every": 0})
    done = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(config), "--plain"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    app = GrpoApp(str(config), load_config(config), run_dir=str(tmp_path / "out"), launch=False, clock=lambda: FROZEN)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: app.state.status == "done")
        await pilot.pause()
        assert app.query_one("#epoch-bar", ProgressBar).percentage == 1.0
        assert str(app.query_one("#epoch-note", Static).render()) == "batch 3/3"
        assert app.query_one("#step-bar", ProgressBar).percentage == 1.0
