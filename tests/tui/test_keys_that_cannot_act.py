"""A key that cannot act says why instead of doing nothing: the run's keys on a finished run, enter in
the compare picker with nothing ticked; the group view offers ``m`` only while ``m`` can work; the
picker's ticked and unticked boxes differ without colour."""

from __future__ import annotations

from grpo_tui.tui.screens.compare_picker import ComparePickerScreen
from grpo_tui.tui.screens.group_view import GroupScreen
from tests.helpers.pilot import screen_text
from tests.helpers.run_folders import write_run

from .conftest import build_app, wait_until
from .scenarios import RUN, running


def notes(app) -> list[str]:  # type: ignore[no-untyped-def]
    return [n.message for n in app._notifications]


async def test_m_and_t_on_a_finished_run_say_the_run_is_over(tmp_path):
    app = build_app(tmp_path, "--steps", "3", "--samples", "2", "--group-size", "4")
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: app.state.status == "done" and app.state.samples)
        for key, what in (("m", "m (the sample display)"), ("t", "t (the live settings)")):
            app.clear_notifications()
            await pilot.press(key)
            await wait_until(pilot, lambda: notes(app))
            assert notes(app) == [f"this run is over: {what} needs a running run"]
            assert app.screen is app.dashboard  # nothing opened
        app.query_one("#samples-table").focus()
        await pilot.press("g")
        await wait_until(pilot, lambda: isinstance(app.screen, GroupScreen))
        shown = screen_text(app)
        assert "of 4 (the sample display sent a subset)" in shown and "m → all" not in shown


async def test_the_compare_picker_says_nothing_is_ticked_and_shows_ticks_without_colour(tmp_path):
    write_run(tmp_path / "alpha", "alpha", [0.1, 0.2])
    write_run(tmp_path / "beta", "beta", [0.3, 0.4])
    app = build_app(tmp_path / "this", *RUN)
    async with app.run_test(size=(160, 48)) as pilot:
        await running(pilot)
        await pilot.press("C")
        await wait_until(pilot, lambda: isinstance(app.screen, ComparePickerScreen))
        app.clear_notifications()
        await pilot.press("enter")
        await wait_until(pilot, lambda: notes(app))
        assert isinstance(app.screen, ComparePickerScreen)  # still open: enter had nothing to apply
        assert notes(app) == ["nothing ticked: space ticks a run, then enter (esc closes)"]
        await pilot.press("space")
        await pilot.pause(0.2)
        rows = {name: line for line in screen_text(app).splitlines() for name in ("alpha", "beta") if name in line}
        assert "▐X▌" in rows["alpha"] and "▐ ▌" in rows["beta"]


async def test_the_palettes_screenshot_is_saved_in_the_run_folder_and_says_where(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # a home without ~/Downloads
    monkeypatch.setenv("XDG_DOWNLOAD_DIR", str(tmp_path / "home" / "Downloads"))
    app = build_app(tmp_path / "run", *RUN)
    (tmp_path / "run").mkdir()
    async with app.run_test(size=(120, 40)) as pilot:
        await running(pilot)
        app.clear_notifications()
        app.deliver_screenshot()  # what the palette's Screenshot calls
        await wait_until(pilot, lambda: list((tmp_path / "run").glob("*.svg")) and notes(app))
        [shot] = (tmp_path / "run").glob("*.svg")
        assert any(str(shot) in note for note in notes(app)), notes(app)
        assert "<svg" in shot.read_text()
