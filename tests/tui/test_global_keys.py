"""Every global key from every tab and from every focusable widget of that tab, against the real
app (the fake worker behind it): what the user sees after the key."""

from __future__ import annotations

import pytest
from textual.widgets import Input, TabbedContent

from grpo_tui.tui.views import VIEWS

from .conftest import wait_until

SIZE = (200, 50)


def focusables(app) -> list:  # type: ignore[no-untyped-def]
    """The focusable widgets inside the active tab."""
    tabs = app.query_one(TabbedContent)
    pane = tabs.get_pane(tabs.active)
    return [w for w in pane.query("*") if w.focusable and w.display]


@pytest.mark.parametrize("start", VIEWS)
async def test_number_keys_switch_tabs_from_every_widget_of_every_tab(make_app, start):
    app = make_app("--steps", "4", "--hold")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.step == 4)
        tabs = app.query_one(TabbedContent)
        await pilot.press(str(VIEWS.index(start) + 1))
        await pilot.pause(0.2)
        for widget in focusables(app)[:6]:
            for target, view in enumerate(VIEWS, 1):
                await pilot.press(str(VIEWS.index(start) + 1))
                await pilot.pause(0.05)
                if widget.focusable and widget.display:
                    widget.focus()
                    await pilot.pause(0.05)
                if start == "charts":
                    await pilot.press("down")  # an arrow inside the charts first (the reported trap)
                typed = isinstance(app.focused, Input)
                before = app.focused.value if typed else ""
                await pilot.press(str(target))
                await pilot.pause(0.1)
                if typed:  # a search box takes the digit as text, as any text box does
                    assert tabs.active == start and app.focused.value == before + str(target)
                    app.focused.value = ""
                    continue
                assert tabs.active == view, (start, widget, target)
                assert app.screen.maximized is None
