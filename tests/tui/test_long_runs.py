"""Runs outlive the dashboard: detach, attach, several viewers, a stuck viewer, ls (the real worker)."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import stat
import subprocess
from pathlib import Path

import pytest
from textual.widgets import Static

from grpo_tui.protocol import control as c
from grpo_tui.tui.app import GrpoApp
from grpo_tui.tui.cli import attach_target, build_parser
from grpo_tui.tui.priority import DASHBOARD_NICE
from grpo_tui.tui.screens.confirm_quit import ConfirmQuitScreen
from tests.helpers.printed import Terminal
from tests.helpers.runs import CLI, record_step, start_detached, thread_nices, wait_for
from tests.helpers.worker_harness import query, tiny_model, write_config

from .conftest import wait_until

__all__ = ["tiny_model"]  # the fixture, imported for pytest

SIZE = (160, 48)


def attach_app(command: str) -> GrpoApp:
    """The dashboard that the printed ``grpo-tui attach DIR`` command opens (parsed as the shell would)."""
    argv = shlex.split(command)
    assert argv[:2] == ["grpo-tui", "attach"]
    args = build_parser().parse_args(argv[1:])
    target = attach_target(args.run_dir)
    assert not isinstance(target, str), target
    folder, config = target
    return GrpoApp(str(folder / "config.toml"), config, run_dir=str(folder), launch=False)


def stored_steps(out: Path) -> list[int]:
    return [s for (s,) in query(out / "outputs.db", "SELECT step FROM steps ORDER BY step")]


@pytest.mark.slow
async def test_detach_after_steps_then_attach_shows_every_step(tmp_path, tiny_model):
    out, attach = start_detached(tmp_path, tiny_model)
    # only the user can enter the folder, read the run or steer it
    assert stat.S_IMODE(os.stat(out / c.CONTROL_DIR).st_mode) == 0o700
    sock = os.stat(c.socket_path(out))
    assert stat.S_ISSOCK(sock.st_mode) and stat.S_IMODE(sock.st_mode) == 0o600

    first = attach_app(attach)
    async with first.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: first.state.step >= 3, timeout=120)
        await pilot.press("d")
        await wait_until(pilot, lambda: not first.is_running, timeout=10)
    detached_at = first.state.step
    assert first.run_link.detached
    wait_for(lambda: record_step(out) >= detached_at + 3)  # training goes on with no viewer

    later = attach_app(attach)
    async with later.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: later.state.step >= detached_at + 4, timeout=120)
        shown = list(later.state.history_steps)
        assert shown == list(range(1, shown[-1] + 1))  # every step, before and after the detach
        assert later.state.samples and later.state.total_steps == 400 and later.state.status == "running"
        assert set(range(1, detached_at + 1)) <= set(stored_steps(out))
        await pilot.press("q")
        assert isinstance(later.screen, ConfirmQuitScreen)
        await pilot.press("y")  # stop the run
        await wait_until(pilot, lambda: not later.is_running, timeout=120)
    record = c.read_record(out)
    assert record is not None and record.status == "stopped" and record.exit_code == 4  # stopped by the user
    wait_for(lambda: not c.pid_alive(record.pid), timeout=15)  # the supervisor ends with its run
    assert not c.socket_path(out).exists()
    assert stored_steps(out) == list(range(1, record.step + 1))

    ls = subprocess.run([*CLI, "ls", str(tmp_path)], capture_output=True, text=True, timeout=30)
    [row] = ls.stdout.splitlines()[1:]
    assert row.split()[:3] == ["stopped", f"{record.step}/400", "-"] and row.endswith("out")

    finished = attach_app(attach)  # a finished run opens read-only, with its charts
    async with finished.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: finished.state.step == record.step, timeout=30)
        assert finished.run_link.read_only and list(finished.state.history_steps) == list(range(1, record.step + 1))
        assert "p" not in {k for k, b in finished.screen.active_bindings.items() if b.binding.show}


@pytest.mark.slow
async def test_kill_9_of_one_viewer_leaves_training_and_the_other_viewer_going(tmp_path, tiny_model):
    out, attach = start_detached(tmp_path, tiny_model)
    terminal = Terminal(f"exec grpo-tui attach {shlex.quote(str(out))}", tmp_path)  # the pid is the viewer's
    wait_for(lambda: (r := c.read_record(out)) is not None and r.viewers == 1, timeout=60)
    app = attach_app(attach)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.step >= 2, timeout=120)
        wait_for(lambda: (r := c.read_record(out)) is not None and r.viewers == 2, timeout=30)
        # the viewer yields the CPU to training; the run keeps the priority it was started with
        record, ours = c.read_record(out), os.getpriority(os.PRIO_PROCESS, 0)
        assert record is not None and thread_nices(terminal.proc.pid) == {max(ours, DASHBOARD_NICE)}
        assert thread_nices(record.pid) == thread_nices(record.worker_pid) == {ours}
        os.kill(terminal.proc.pid, signal.SIGKILL)
        terminal.proc.wait(10)
        killed_at = app.state.step
        await wait_until(pilot, lambda: app.state.step >= killed_at + 3, timeout=120)  # this viewer goes on
        assert c.read_record(out).viewers == 1  # type: ignore[union-attr]
        assert record_step(out) >= killed_at + 2  # and so does training
        await pilot.press("p")  # and it still steers the run
        await wait_until(pilot, lambda: app.state.status == "paused", timeout=60)
    assert "grpo-tui" in terminal.text()  # the terminal viewer had drawn the dashboard


@pytest.mark.slow
def test_sighup_to_the_dashboard_never_stops_the_run(tmp_path, tiny_model):
    """An SSH session that drops hangs up the dashboard's terminal: the dashboard goes, the run stays."""
    config = write_config(tmp_path, tiny_model, training={"max_steps": 400, "num_epochs": 200, "silent_patience": 0},
                          checkpoint={"save_every": 0})
    out = (tmp_path / "out").resolve()
    terminal = Terminal(f"grpo-tui run {shlex.quote(str(config))}", tmp_path)
    wait_for(lambda: record_step(out) >= 2)
    record = c.read_record(out)
    assert record is not None
    # the dashboard yields the CPU to training once it has started the run; the run keeps its priority
    dashboard = terminal.proc.pid  # bash runs a lone command in its own process
    assert b"run" in Path(f"/proc/{dashboard}/cmdline").read_bytes().split(b"\0")
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    wait_for(lambda: thread_nices(dashboard) == {max(ours, DASHBOARD_NICE)})
    assert thread_nices(record.pid) == thread_nices(record.worker_pid) == {ours}
    from grpo_tui.tui.launcher import adopt

    adopt(record.pid)
    os.killpg(terminal.proc.pid, signal.SIGHUP)  # the terminal's session leader and its group hang up
    os.close(terminal.master)
    terminal.proc.wait(20)
    at = record_step(out)
    wait_for(lambda: record_step(out) >= at + 3)
    assert c.is_live(c.read_record(out))


def samples_title(app: GrpoApp) -> str:
    return str(app.query_one("#samples-title", Static).render())


@pytest.mark.slow
async def test_two_viewers_share_the_run_s_pause_and_sample_display(tmp_path, tiny_model):
    """Both viewers show the run's state, not their own: a pause in one is a pause in both, and the
    sample display is the worker's. The run was started with --set (random; the file says
    best_worst): attach reads the run's config with its overrides, a viewer that connects never
    changes the mode, and m in one viewer changes it for both."""
    out, attach = start_detached(tmp_path, tiny_model, args=("--set", "display.sample_display=random"))
    record = c.read_record(out)
    assert record is not None and record.overrides == ["display.sample_display=random"]
    one, two = attach_app(attach), attach_app(attach)
    assert one.config.display.sample_display == "random"  # the run's config, overrides included
    async with one.run_test(size=SIZE) as pilot_one, two.run_test(size=SIZE) as pilot_two:
        await wait_until(pilot_one, lambda: one.state.step >= 1 and two.state.step >= 1, timeout=120)
        connected_at = max(one.state.step, two.state.step)
        both = (one, two)
        await wait_until(pilot_two, lambda: all(a.state.step >= connected_at + 1 for a in both), timeout=120)
        for app in both:  # the worker still chooses at random: no viewer told it otherwise
            assert app.display_mode == "random" and {s.display for s in app.state.samples} == {"random"}
        await pilot_one.press("m")  # random -> all, for the whole run
        await wait_until(pilot_two, lambda: all(a.display_mode == "all" for a in both), timeout=60)
        await wait_until(pilot_two, lambda: all("display all" in samples_title(a) for a in both), timeout=30)
        await wait_until(pilot_one, lambda: all({s.display for s in a.state.samples} == {"all"} for a in both),
                         timeout=60)

        await pilot_one.press("p")
        await wait_until(pilot_two, lambda: two.state.status == "paused" and one.state.status == "paused", timeout=60)
        await pilot_two.press("r")
        await wait_until(pilot_one, lambda: one.state.status == "running" and two.state.status == "running", timeout=60)

    done = subprocess.run([*CLI, "attach", str(out), "--set", "display.sample_display=all"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "attach takes no --set" in done.stderr and "Traceback" not in done.stderr


def step_seconds(out: Path, steps: range) -> float:
    rows = query(
        out / "outputs.db",
        f"SELECT avg(generation_ms + training_ms) FROM steps WHERE step BETWEEN {steps.start} AND {steps.stop - 1}",
    )
    return float(rows[0][0]) / 1000


@pytest.mark.slow
def test_a_stuck_viewer_is_cut_off_and_training_does_not_slow(tmp_path, tiny_model):
    out, _ = start_detached(tmp_path, tiny_model, env={"GRPO_TUI_VIEWER_QUEUE_KB": "16"})
    wait_for(lambda: record_step(out) >= 6)
    before = record_step(out)
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.connect(str(c.socket_path(out)))  # and never reads
    wait_for(lambda: (r := c.read_record(out)) is not None and r.viewers == 1, timeout=30)
    wait_for(lambda: (r := c.read_record(out)) is not None and r.viewers == 0, timeout=240)  # cut off
    cut_at = record_step(out)
    wait_for(lambda: record_step(out) >= cut_at + 4)
    after = record_step(out)
    stuck.close()
    calm = step_seconds(out, range(2, before + 1))
    stuck_time = step_seconds(out, range(before + 1, after + 1))
    # the same work per step: a reader that never reads costs training nothing measurable
    assert stuck_time < calm * 1.25 + 0.05, (calm, stuck_time)
