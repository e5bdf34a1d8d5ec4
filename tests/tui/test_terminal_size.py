"""Below the smallest size the layout fits, the dashboard says so instead of cutting its header and
chart away; the notice goes when the terminal grows, and the run's keys work over it."""

from __future__ import annotations

from grpo_tui.tui.screens.too_small import TooSmallScreen
from tests.helpers.pilot import screen_text

from .conftest import wait_until
from .scenarios import RUN


async def test_a_terminal_too_small_says_its_size_and_what_the_dashboard_needs(make_app):
    app = make_app(*RUN)
    async with app.run_test(size=(60, 16)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, TooSmallScreen))
        assert "The terminal is 60×16: the dashboard needs 80×24." in screen_text(app)
        await pilot.resize_terminal(50, 12)
        await wait_until(pilot, lambda: "The terminal is 50×12" in screen_text(app))
        await wait_until(pilot, lambda: app.state.step >= 1)
        await pilot.press("p")  # the run's keys work over the notice
        await wait_until(pilot, lambda: app.state.status == "paused")
        await pilot.resize_terminal(120, 40)
        await wait_until(pilot, lambda: not isinstance(app.screen, TooSmallScreen))
        assert app.screen is app.dashboard
        await pilot.resize_terminal(79, 40)  # and back
        await wait_until(pilot, lambda: isinstance(app.screen, TooSmallScreen))
