"""The dashboard driven by Pilot against the scripted fake worker: every key and every state."""

from __future__ import annotations

import time
from pathlib import Path

from textual.command import CommandPalette
from textual.widgets import DataTable, RichLog, Static

from grpo_tui.tui.app import GrpoApp
from grpo_tui.tui.views import VIEWS
from grpo_tui.tui.screens.confirm_quit import ConfirmQuitScreen
from grpo_tui.tui.screens.crash import CrashScreen, MistakeScreen
from tests.helpers.fake_worker import MISTAKE
from grpo_tui.tui.screens.group_view import GroupScreen
from grpo_tui.tui.screens.help import HelpScreen
from grpo_tui.tui.screens.sample_detail import SampleDetailScreen
from grpo_tui.tui.state import LogEntry
from grpo_tui.tui.widgets.logs_panel import LogsPanel
from grpo_tui.tui.widgets.reward_chart import RewardChart

from .conftest import process_gone, wait_until

SIZE = (160, 48)


def footer_keys(app) -> set[str]:  # type: ignore[no-untyped-def]
    return {k for k, b in app.screen.active_bindings.items() if b.binding.show}


def header(app) -> str:  # type: ignore[no-untyped-def]
    return str(app.query_one("#header", Static).render())


def log_text(app) -> str:  # type: ignore[no-untyped-def]
    return "\n".join(e.message for e in app.query_one(LogsPanel).entries)



def table_rows(app) -> int:
    """Rows the samples table shows (it is rebuilt at most once a second)."""
    return app.query_one("#samples-table", DataTable).row_count


async def test_live_view_follows_the_run(make_app):
    app = make_app("--steps", "6", "--samples", "8", "--hold")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.step == 6 and len(app.state.samples) == 8)
        assert "tiny-fake" in header(app) and "step 6/6" in header(app) and "▶ running" in header(app)
        assert "epoch 2/2" in header(app)  # the worker counts epochs from 0
        table = app.query_one("#samples-table", DataTable)
        await wait_until(pilot, lambda: table.row_count == 8)  # the table redraws at most once a second
        tile = app.query_one("#tile-reward")
        assert tile.border_title == "reward" and "0.5166" in str(tile.query_one(".tile-value", Static).render())
        assert list(app.state.history_steps) == [1, 2, 3, 4, 5, 6]
        assert "fake worker: starting" in log_text(app)  # stderr reaches the Logs tab
        assert not app.query_one("#zero-std").display


async def test_pause_and_resume_swap_in_the_footer(make_app):
    app = make_app("--steps", "3", "--hold")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.step == 3)
        assert "p" in footer_keys(app) and "r" not in footer_keys(app)
        await pilot.press("r")  # not allowed while running: nothing is sent
        await pilot.press("p")
        await wait_until(pilot, lambda: app.state.status == "paused")
        assert "⏸ paused" in header(app)
        assert "r" in footer_keys(app) and "p" not in footer_keys(app)
        await pilot.press("r")
        await wait_until(pilot, lambda: app.state.status == "running")
        assert "resume while not paused" not in log_text(app)


async def test_save_lists_the_checkpoint_from_its_safetensors_header(make_app):
    app = make_app("--steps", "3", "--hold")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.step == 3)
        await pilot.press("s")
        table = app.query_one("#checkpoints-table", DataTable)
        await wait_until(pilot, lambda: table.row_count == 1)
        row = [str(c) for c in table.get_row_at(0)]
        assert row[:2] == ["3", "manual"] and row[3] == "256" and row[4] == "F16"


async def test_m_cycles_the_sample_display_and_tells_the_worker(make_app):
    app = make_app("--steps", "3", "--hold")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.step == 3)
        await pilot.press("m")  # the worker answers with the mode it uses now; the dashboard shows that
        await wait_until(pilot, lambda: app.display_mode == "random")
        await wait_until(pilot, lambda: "sample display: random" in log_text(app))
        await pilot.press("m")
        await wait_until(pilot, lambda: app.display_mode == "all")
        await wait_until(pilot, lambda: "display all" in str(app.query_one("#samples-title", Static).render()))


async def test_number_keys_and_tab_switch_tabs(make_app):
    app = make_app("--steps", "2", "--hold")
    async with app.run_test(size=SIZE) as pilot:
        tabs = app.query_one("#tabs")
        for key, tab in (("2", "logs"), ("3", "config"), ("4", "database"), ("5", "charts"), ("1", "samples")):
            await pilot.press(key)
            assert tabs.active == tab
        await pilot.press("tab")
        assert tabs.active == "logs"
        await pilot.press("shift+tab", "shift+tab")  # round the end: the last tab
        assert tabs.active == VIEWS[-1]
        await pilot.press(*["shift+tab"] * (len(VIEWS) - 1 - VIEWS.index("database")))
        assert tabs.active == "database"
        await wait_until(pilot, lambda: app.state.database is not None)
        assert "outputs.db" in str(app.query_one("#db-crumbs", Static).render())


async def test_enter_opens_the_sample_and_g_its_group(make_app):
    app = make_app("--steps", "2", "--samples", "8", "--hold")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.step == 2 and len(app.state.samples) == 8)
        await wait_until(pilot, lambda: table_rows(app) == 8)  # the table redraws at most once a second
        app.query_one("#samples-table", DataTable).focus()
        await pilot.press("down", "enter")
        assert isinstance(app.screen, SampleDetailScreen)
        assert app.screen.sample.index == 1
        body = app.screen.query_one("#detail-tool-calls", Static).render()
        assert "calc" in str(body) and "ok" in str(body)
        assert "accuracy" in str(app.screen.query_one("#detail-summary", Static).render())
        await pilot.press("g")
        assert isinstance(app.screen, GroupScreen)
        assert len(app.screen.query(".group-column")) == 4  # group 0 of a G=4 run
        await pilot.press("escape", "escape")
        assert app.screen is app.screen_stack[0]
        await pilot.press("g")  # g from the table goes straight to the group
        assert isinstance(app.screen, GroupScreen)
        await pilot.press("p")  # the run's keys work over a pushed screen too; the tabs' keys are not offered there
        await wait_until(pilot, lambda: app.state.status == "paused")
        assert isinstance(app.screen, GroupScreen)
        assert "r" in footer_keys(app) and not {"z", "l", "p"} & footer_keys(app)


async def test_group_view_says_when_the_display_sent_part_of_a_group(make_app):
    app = make_app("--steps", "1", "--samples", "2", "--hold")  # 2 of a group of 4
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: len(app.state.samples) == 2 and table_rows(app) == 2)
        await pilot.press("g")
        assert isinstance(app.screen, GroupScreen)
        head = str(app.screen.query_one("#group-prompt", Static).render())
        assert "2 completions shown of 4" in head and "m → all" in head


async def test_help_opens_and_closes(make_app):
    app = make_app("--steps", "1", "--hold")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_chart_smoothing_keys(make_app):
    app = make_app("--steps", "1", "--hold")
    async with app.run_test(size=SIZE) as pilot:
        chart = app.query_one(RewardChart)
        before = chart.smoothing
        await pilot.press("right_square_bracket")
        assert chart.smoothing > before
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert chart.smoothing < before


async def test_log_level_filter(make_app):
    app = make_app("--steps", "4", "--hold")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.step == 4)
        assert "l" not in footer_keys(app)  # the level key shows on the Logs tab only
        await pilot.press("2")
        view = app.query_one("#logs-view", RichLog)
        assert "l" in footer_keys(app)
        before = len(view.lines)
        await pilot.press("l")  # info -> warning
        await pilot.pause(0.1)
        assert app.query_one(LogsPanel).min_level == "warning"
        assert len(view.lines) < before
        await pilot.press("l", "l")  # error -> debug: the debug lines show up
        await pilot.pause(0.1)
        assert len(view.lines) > before


async def test_bad_lines_are_logged_not_fatal(make_app):
    app = make_app("--steps", "2", "--hold", "--garbage")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.step == 2)
        assert "bad frame (malformed JSON): this is not a frame {" in log_text(app)


async def test_command_palette_offers_the_actions(make_app):
    app = make_app("--steps", "2", "--hold")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.step == 2)
        await pilot.press("ctrl+p")
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"Pause training")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.state.status == "paused")


async def test_zero_std_steps_are_called_out(make_app):
    app = make_app("--steps", "4", "--hold", "--zero-std-from", "3")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.step == 4)
        assert app.query_one("#zero-std").display
        assert "(no signal)" in str(app.query_one("#tile-loss .tile-value", Static).render())


async def test_quit_while_training_asks_stops_and_leaves_no_worker(make_app):
    app = make_app("--steps", "3", "--hold")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.step == 3)
        pid = app.run_link.connection.worker_pid
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmQuitScreen)
        await pilot.press("n")
        assert app.state.status == "running" and app.is_running
        await pilot.press("q", "y")
        await wait_until(pilot, lambda: not app.is_running, timeout=10)
    assert app.return_value == 0
    assert app.run_link.worker_code == 0
    assert process_gone(pid)
    assert any(c.kind == "final" for c in app.state.checkpoints)


async def test_quit_kills_a_worker_that_ignores_stop(make_app):
    app = make_app("--steps", "2", "--hold", "--ignore-stop", stop_timeout_s=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.step == 2)
        pid = app.run_link.connection.worker_pid
        await pilot.press("q", "y")
        await pilot.pause(0.1)
        assert "stopping" in header(app)
        await wait_until(pilot, lambda: not app.is_running, timeout=10)
    assert process_gone(pid)


async def test_done_run_quits_without_asking(make_app):
    app = make_app("--steps", "3")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.status == "done")
        assert "✓ done" in header(app)
        assert not {"p", "r", "s", "m"} & footer_keys(app)
        await pilot.press("q")
        await wait_until(pilot, lambda: not app.is_running, timeout=10)
    assert app.return_value == 0


async def test_other_protocol_version_is_refused(make_app):
    app = make_app("--protocol-version", "99")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.status == "error")
        assert "protocol version 99" in app.state.error and "version 1" in app.state.error
        await wait_until(pilot, lambda: not app.run_link.connection.running)
        assert not isinstance(app.screen, CrashScreen)  # a refusal is not a crash to restart


async def test_crash_counts_down_and_resumes_with_history(make_app):
    app = make_app("--steps", "8", "--hold", "--crash-at", "5", "--save-every", "2", delay=5.0, clock=time.monotonic)
    async with app.run_test(size=SIZE) as pilot:
        seen: list[tuple[str, str, str]] = []

        def crash_shown() -> bool:  # read at once: the 2 s countdown may end before the next look
            if isinstance(app.screen, CrashScreen) and not seen:
                text = str(app.screen.query_one("#crash-text", Static).render())
                if text:  # drawn
                    seen.append((app.state.status, app.state.error, text))
            return bool(seen)

        await wait_until(pilot, crash_shown)
        status, error, text = seen[0]
        assert status == "error" and "code 7" in error and "Traceback" in text
        await wait_until(pilot, lambda: app.state.step == 8)  # the countdown ran out, restarted, resumed
        assert app.run_link.restarts == 1 and app.state.status == "running"
        assert list(app.state.history_steps) == list(range(1, 9))  # 1-4 from resume_state, 5-8 live


async def test_a_crash_says_why_and_where_the_log_is(make_app):
    app = make_app("--steps", "6", "--hold", "--crash-at", "2", delay=30)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, CrashScreen))
        text = str(app.screen.query_one("#crash-text", Static).render())
        assert "The worker crashed (exited with code 7)." in text
        assert "fake worker: Traceback (most recent call last): boom" in text  # its last stderr line
        await pilot.press("escape")


async def test_a_mistake_shows_its_sentence_is_never_restarted_and_retries_on_enter(make_app):
    app = make_app("--steps", "6", "--hold", "--mistake-at", "2", delay=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, MistakeScreen))
        text = str(app.screen.query_one("#mistake-text", Static).render())
        assert MISTAKE in text and "Traceback" not in text
        await pilot.pause(0.5)  # a crash's countdown (0.1 s here) would have restarted it by now
        assert isinstance(app.screen, MistakeScreen) and app.run_link.restarts == 0 and app.run_link.worker_code == 2
        assert app.state.status == "error" and app.state.error == MISTAKE and "✗ error" in header(app)
        await pilot.press("enter")  # retry: the (fixed) worker starts again
        await wait_until(pilot, lambda: isinstance(app.screen, MistakeScreen))  # this fake makes it again
        assert app.run_link.restarts == 0
        await pilot.press("escape")
        await pilot.press("q")
        await wait_until(pilot, lambda: not app.is_running)
    assert app.return_value == 2


async def test_crash_restart_now_and_cancel(make_app):
    app = make_app("--steps", "6", "--hold", "--crash-at", "2", delay=30)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, CrashScreen))
        await pilot.press("escape")
        assert app.state.status == "error" and app.run_link.restarts == 0
    app = make_app("--steps", "6", "--hold", "--crash-at", "2", delay=30)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, CrashScreen))
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.state.step == 6)
        assert app.run_link.restarts == 1


async def test_gives_up_after_max_restarts(make_app):
    app = make_app("--steps", "6", "--crash-at", "2", max_restarts=0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.status == "error")
        assert "gave up" in app.state.error
        assert not isinstance(app.screen, CrashScreen)
        await pilot.press("q")
        await wait_until(pilot, lambda: not app.is_running)
    assert app.return_value == 1


async def test_worker_stderr_in_a_crash_message_is_inert(make_app):
    app = make_app("--steps", "6", "--crash-at", "2", "--hostile", max_restarts=0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.status == "error")
        assert "[/bold] [link=x]boom" in app.state.error
        [note] = list(app._notifications)  # the error toast: stderr text, never parsed as markup
        assert "[/bold] [link=x]boom" in note.message and "\x1b" not in note.message and not note.markup
        assert app.is_running


async def test_model_text_is_inert(make_app):
    app = make_app("--steps", "1", "--samples", "4", "--hold", "--hostile", "--completion-chars", "400")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: len(app.state.samples) == 4 and table_rows(app) == 4)
        await pilot.press("enter")
        shown = app.screen.query_one("#detail-completion", Static).render()
        plain = str(shown)
        assert "[bold red]not bold[/]" in plain and "[link=http://x]" in plain
        assert not any(ch in plain for ch in "\x1b\x07\x08\r")
        assert not any(span.style for span in getattr(shown, "spans", []))  # markup was not applied


async def test_leaving_the_app_leaves_the_run_going_and_d_detaches(make_app):
    """The run is its supervisor's: closing the dashboard (d, or any exit) never stops it."""
    app = make_app("--steps", "2", "--hold")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.step == 2)
        pid = app.run_link.connection.worker_pid
        await pilot.press("d")
        await wait_until(pilot, lambda: not app.is_running, timeout=10)
    assert app.run_link.detached and app.return_value == 0
    assert not process_gone(pid)  # training goes on
    again = GrpoApp(app.run_link.config_path, app.config, run_dir=app.run_link.run_dir, launch=False, clock=lambda: 1000.0)
    async with again.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: again.run_link.connection is not None and again.run_link.connection.worker_pid == pid)
        await pilot.press("q")
        assert isinstance(again.screen, ConfirmQuitScreen)
        await pilot.press("l")  # leave it running
        await wait_until(pilot, lambda: not again.is_running, timeout=10)
    assert not process_gone(pid)


async def test_the_worker_is_started_with_the_fast_blas_preloaded(make_app):
    """The dashboard hands the worker the BLAS preload itself (no re-exec needed in the worker)."""
    from grpo_tui.common.blas import find_blas, preloaded

    app = make_app("--steps", "1", "--hold")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.step == 1)
        lib = find_blas(app.config.runtime.blas)
        raw = Path(f"/proc/{app.run_link.connection.worker_pid}/environ").read_bytes()
        env = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
        if lib is not None:
            assert lib in preloaded(env)
        assert env.get("GRPO_TUI_BLAS_REEXEC") == "1"


async def test_a_periodic_checkpoint_waits_for_the_next_redraw_a_saved_one_is_drawn_at_once(make_app):
    """A key's answer (s: a manual checkpoint) is drawn at once; a periodic checkpoint answers no
    key, and drawing it at once cost every viewer a whole extra screen update each time."""
    from grpo_tui.protocol import messages as m
    from grpo_tui.tui.run_messages import WorkerEvent, WorkerFrames

    app = make_app("--steps", "2", delay=0.05)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: app.state.step == 2)
        # counted, not timed: the prompt flush fires PROMPT_S later, however loaded the machine
        prompt_flushes: list[None] = []
        flush = app._prompt_flush
        app._prompt_flush = lambda: (prompt_flushes.append(None), flush())[-1]  # type: ignore[method-assign]
        app.post_message(WorkerFrames([WorkerEvent(m.Checkpoint(path="x/checkpoint-2", step=2, kind="periodic"))]))
        await pilot.pause(0.3)
        assert prompt_flushes == []
        app.post_message(WorkerFrames([WorkerEvent(m.Checkpoint(path="x/checkpoint-2", step=2, kind="manual"))]))
        await wait_until(pilot, lambda: prompt_flushes != [])


async def test_j_k_and_G_move_through_the_tables_and_g_G_through_the_log(make_app):
    app = make_app("--steps", "12", "--samples", "8", "--hold")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.step == 12 and len(app.state.samples) == 8)
        await wait_until(pilot, lambda: table_rows(app) == 8)
        table = app.query_one("#samples-table", DataTable)
        table.focus()
        await pilot.press("j", "j")
        assert table.cursor_row == 2
        await pilot.press("k")
        assert table.cursor_row == 1
        await pilot.press("G")
        assert table.cursor_row == 7
        await pilot.press("2")  # the Logs tab: its text moves with j / k and g / G
        view = app.query_one("#logs-view", RichLog)
        view.focus()
        await pilot.pause(0.1)
        for i in range(80):  # more lines than the tab shows
            app.add_logs([LogEntry("info", f"line {i}", "dashboard")])
        await pilot.pause(0.2)
        assert view.max_scroll_y > 0
        view.scroll_end(animate=False)
        await pilot.press("g")
        await pilot.pause(0.1)
        assert view.scroll_y == 0
        await pilot.press("G")
        await pilot.pause(0.1)
        assert view.scroll_y == view.max_scroll_y
