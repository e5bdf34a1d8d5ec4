"""The closed sets the dashboard is built on agree with the code that implements them: tabs,
sample display modes, formatters."""

from __future__ import annotations

import random
import typing

import pytest

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import DisplayConfig
from grpo_tui.tui import format as fmt
from grpo_tui.tui.app import GrpoApp
from grpo_tui.tui.keys import DASHBOARD_KEYS, PALETTE, RUN_KEYS, TAB_FOCUS
from grpo_tui.tui.screens.dashboard import DashboardScreen
from grpo_tui.tui.views import DISPLAY_MODES, VIEW_TITLES, VIEWS
from grpo_tui.worker.command_state import CommandState, choose_samples
from grpo_tui.worker.trainer_contract import Generation


def test_every_view_has_a_tab_a_title_and_a_key():
    assert tuple(GrpoApp.tab_widgets()) == VIEWS
    assert set(VIEW_TITLES) == set(VIEWS) and set(TAB_FOCUS) <= set(VIEWS)
    keys = {b.action: b.key for b in DASHBOARD_KEYS if b.action.startswith("show_tab")}
    assert keys == {f"show_tab('{v}')": str(i + 1) for i, v in enumerate(VIEWS)}
    assert all(hasattr(GrpoApp, f"action_{action}") or hasattr(DashboardScreen, f"action_{action}")
               for action, _, _ in PALETTE)


def test_every_key_has_an_action_where_it_is_bound():
    """The run's keys on the app (so they work over every screen), the dashboard's on its screen;
    the dashboard's screen offers the run's keys too, as the app's."""
    assert all(hasattr(GrpoApp, f"action_{b.action}") for b in RUN_KEYS)
    for key in DASHBOARD_KEYS:
        name = key.action.removeprefix("app.").split("(")[0]
        assert hasattr(GrpoApp if key.action.startswith("app.") else DashboardScreen, f"action_{name}"), key


def test_sample_display_modes_have_one_source():
    assert DISPLAY_MODES == typing.get_args(m.SampleDisplay)
    assert typing.get_type_hints(DisplayConfig)["sample_display"] == m.SampleDisplay
    assert DisplayConfig().sample_display in DISPLAY_MODES


def _gen(i: int, reward: float) -> Generation:
    return Generation(
        prompt_index=0, group_index=i, prompt="p", completion="c", raw_completion="c", thinking=None,
        reward=reward, reward_details={}, advantage=0.0, num_tokens=1, finish_reason="stop",
    )  # fmt: skip


@pytest.mark.parametrize("mode", DISPLAY_MODES)
def test_every_display_mode_is_handled_by_the_worker(mode):
    control = CommandState()
    control.handle(m.SetSampleDisplay(mode=mode))
    assert control.display == mode
    gens = [_gen(i, float(i)) for i in range(4)]
    chosen = choose_samples(gens, mode, random.Random(0))
    expected = {"all": 4, "best_worst": 2, "random": 2}[mode]
    assert len(chosen) == expected


def test_one_missing_glyph():
    missing = [fmt.number(None), fmt.number(float("nan")), fmt.whole(None), fmt.megabytes(None),
               fmt.signed(None), fmt.signed(float("inf")), fmt.clock(None), fmt.duration(None), fmt.duration(-1.0)]
    assert set(missing) == {fmt.MISSING}


def test_a_tile_number_never_loses_digits_that_change_its_value():
    from grpo_tui.tui.format import fit_number

    assert fit_number(-4.02e-08, 9) == "-4.02e-08"
    assert fit_number(-4.02e-08, 8) == "-4.0e-8"  # was cut to "-4.02e-0", which reads as -4.02
    assert fit_number(-4.02e-08, 5) == "-4e-8" and fit_number(-4.02e-08, 4) == "…"
    assert fit_number(1234567.0, 6) == "1.2e6"
