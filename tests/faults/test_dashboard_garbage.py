"""Protocol garbage to the dashboard: it stays up, says what happened, and leaves no process behind.

The dashboard (``GrpoApp`` under Pilot) is pointed at ``garbage_worker.py``, which sends every kind
of bad line a broken or foreign worker could produce. Assertions read what the user sees: the
rendered Logs tab, the header, notifications.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from textual.widgets import RichLog

from grpo_tui.tui.app import GrpoApp
from grpo_tui.tui.widgets.logs_panel import LogsPanel
from tests.faults.garbage_worker import GARBAGE
from tests.tui.conftest import make_config, process_gone, wait_until

GARBAGE_WORKER = Path(__file__).with_name("garbage_worker.py")
SIZE = (160, 48)


def make_app(tmp_path: Path, scenario: str, max_restarts: int = 0) -> GrpoApp:
    config = make_config(tmp_path, delay=0.2, max_restarts=max_restarts)
    argv = [sys.executable, str(GARBAGE_WORKER), scenario, str(tmp_path / "grandchild.pid")]
    return GrpoApp(str(tmp_path / "config.toml"), config, worker_argv=argv, stop_timeout_s=5.0)


def logs_on_screen(app: GrpoApp) -> str:
    """The Logs tab as rendered: the text of every line in the log view (wrapped rows re-joined)."""
    view = app.query_one("#logs-view", RichLog)
    return "".join(strip.text for strip in view.lines)


def grandchild(tmp_path: Path) -> int:
    return int((tmp_path / "grandchild.pid").read_text())


async def quit_app(app: GrpoApp, pilot) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("q")
    if app.is_running:
        await pilot.pause(0.2)
        await pilot.press("y")  # confirm, when it asks: stop the run (killed after stop_timeout_s if it ignores stop)
    await wait_until(pilot, lambda: not app.is_running, timeout=20)


async def test_every_kind_of_bad_line_is_logged_and_the_stream_goes_on(tmp_path):
    app = make_app(tmp_path, "garbage")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.step == len(GARBAGE) + 1, timeout=60)
        await pilot.press("2")  # the Logs tab
        await pilot.pause(0.3)
        entries = [e for e in app.query_one(LogsPanel).entries if e.message.startswith("bad frame")]
        screen = logs_on_screen(app)
        print(f"\n{len(GARBAGE)} bad lines of {len(set(k for k, _ in GARBAGE))} kinds + 8 odd-but-valid frames:")
        for kind in dict.fromkeys(k for k, _ in GARBAGE):
            print(f"  {kind}: {sum(k == kind for k, _ in GARBAGE)}")
        assert len(entries) == len(GARBAGE), [e.message[:80] for e in entries]
        assert screen.count("bad frame") == len(GARBAGE)
        assert "bad frame (malformed JSON): this is not json at all" in screen
        assert "explode" in screen and "three" in screen
        assert max(len(e.message) for e in entries) < 1000  # a 10 MiB line is shown truncated
        assert not any(c in screen for c in "\x00\x07\x08\x1b\r")  # binary and escapes shown inert
        assert "bad frame (malformed JSON): \ufffd\ufffd\ufffd\ufffd\ufffd" in screen
        assert "line over the 16 MiB line limit was dropped" in screen
        assert "garbage worker: all sent" in screen  # frames after the garbage still arrive
        assert app.state.status != "error" and app.is_running
        pid = app.run_link.connection.worker_pid if app.run_link.connection else None
        await quit_app(app, pilot)
    assert pid is not None and process_gone(pid) and process_gone(grandchild(tmp_path))


async def test_a_partial_line_at_eof_is_reported_and_the_exit_is_handled(tmp_path):
    app = make_app(tmp_path, "partial")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.status == "error", timeout=30)
        assert app.state.step == 1  # the good frames before it were applied
        await pilot.press("2")
        await pilot.pause(0.3)
        screen = logs_on_screen(app)
        assert 'bad frame (malformed JSON): {"type": "step", "step": 2, "epo' in screen
        assert "worker exited with code 1" in screen  # it ended without `complete`: a death, whatever its own code (0)
        await quit_app(app, pilot)
    assert process_gone(grandchild(tmp_path))


async def test_a_worker_that_exits_before_hello_is_a_clear_error(tmp_path):
    app = make_app(tmp_path, "no_hello")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.status == "error", timeout=30)
        assert "worker exited with code 3: garbage worker: giving up before hello" in app.state.error
        notes = [n.message for n in app._notifications]
        assert any("giving up before hello" in n for n in notes), notes
        await pilot.press("2")
        await pilot.pause(0.3)
        assert "giving up before hello" in logs_on_screen(app)
        await quit_app(app, pilot)
    assert not app.is_running
    assert process_gone(grandchild(tmp_path))  # what the dead worker started is gone too


async def test_a_first_frame_that_is_not_hello_is_refused(tmp_path):
    app = make_app(tmp_path, "not_hello")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.status == "error", timeout=30)
        assert "refused the worker: it speaks a Step frame" in app.state.error
        assert app.state.step == 0  # nothing from a refused worker is applied
        pid = app.run_link.connection.worker_pid if app.run_link.connection else None
        await quit_app(app, pilot)
    assert pid is not None and process_gone(pid) and process_gone(grandchild(tmp_path))


@pytest.fixture(autouse=True)
def _no_stray_grandchild(tmp_path):
    """Whatever a test asserts, kill the grandchild afterwards so a failure leaves nothing."""
    yield
    import os
    import signal

    pid_file = tmp_path / "grandchild.pid"
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except ProcessLookupError:
            pass
