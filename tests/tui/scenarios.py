"""The dashboard's main states, each reached by driving the app against the fake worker.

Shared by the SVG snapshot tests and ``screenshots/make.py``, so the screenshots in the README
are exactly the states the tests pin.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from grpo_tui.tui.screens.crash import CrashScreen
from grpo_tui.tui.widgets.reward_chart import RewardChart
from grpo_tui.tui.widgets.samples_panel import SamplesPanel

from tests.helpers.run_folders import write_run

from .conftest import wait_until


@dataclass(frozen=True)
class Scenario:
    options: tuple[str, ...]
    prepare: Callable[..., Awaitable[None]]
    config: dict[str, object] = field(default_factory=dict)


RUN = ("--steps", "24", "--samples", "8", "--hold", "--completion-chars", "90")


async def running(pilot) -> None:  # type: ignore[no-untyped-def]
    app = pilot.app
    chart, samples = app.query_one(RewardChart), app.query_one(SamplesPanel)
    await wait_until(pilot, lambda: app.state.step == 24 and len(app.state.samples) == 8 and chart.up_to_date
                     and samples.up_to_date)


async def paused(pilot) -> None:  # type: ignore[no-untyped-def]
    await running(pilot)
    await pilot.press("p")
    await wait_until(pilot, lambda: pilot.app.state.status == "paused")


async def sample_detail(pilot) -> None:  # type: ignore[no-untyped-def]
    await running(pilot)
    pilot.app.query_one("#samples-table").focus()
    await pilot.press("down", "enter")
    await pilot.pause(0.2)


async def group_view(pilot) -> None:  # type: ignore[no-untyped-def]
    await running(pilot)
    await pilot.press("g")
    await pilot.pause(0.2)


async def help_screen(pilot) -> None:  # type: ignore[no-untyped-def]
    await running(pilot)
    await pilot.press("question_mark")
    await pilot.pause(0.2)


async def crash_countdown(pilot) -> None:  # type: ignore[no-untyped-def]
    chart, samples = pilot.app.query_one(RewardChart), pilot.app.query_one(SamplesPanel)
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, CrashScreen) and chart.up_to_date
                     and samples.up_to_date)


async def doctor(pilot) -> None:  # type: ignore[no-untyped-def]
    await running(pilot)
    await pilot.press("6")
    await wait_until(pilot, lambda: pilot.app.query_one("#doctor-panel").findings)
    await pilot.pause(0.2)


async def zero_std(pilot) -> None:  # type: ignore[no-untyped-def]
    await running(pilot)


async def curriculum(pilot) -> None:  # type: ignore[no-untyped-def]
    """The Charts tab of a run with a curriculum: its prompt pool's strip under the reward distribution."""
    from grpo_tui.tui.widgets.prompt_pool_strip import PromptPoolStrip

    await running(pilot)
    await pilot.press("5")
    strip = pilot.app.query_one(PromptPoolStrip)
    await wait_until(pilot, lambda: strip.display and strip._key == strip._cache_key() and not strip.stale)
    await pilot.pause(0.8)


async def asynchronous(pilot) -> None:  # type: ignore[no-untyped-def]
    """The Charts tab of an [async] run: who waited for whom, step by step (docs/async.md)."""
    from grpo_tui.tui.widgets.busy_timeline_strip import BusyTimelineStrip

    await running(pilot)
    await pilot.press("5")
    strip = pilot.app.query_one(BusyTimelineStrip)
    await wait_until(pilot, lambda: strip.display and strip._key == strip._cache_key() and not strip.stale)
    pilot.app.query_one("#charts-scroll").scroll_to_widget(pilot.app.query_one("#charts-title-busy-timeline"), animate=False, top=True)
    await pilot.pause(0.8)


async def compared(pilot) -> None:  # type: ignore[no-untyped-def]
    """Two other runs drawn over this one's chart (C, docs/steering.md): a longer one and a fork."""
    await running(pilot)
    app, here = pilot.app, Path(pilot.app.config.checkpoint.output_dir) / "compared"
    longer = write_run(here / "longer", "warmer", [0.15 + 0.5 * i / 32 + 0.05 * (i % 3) for i in range(32)], temperature=1.2)
    fork = write_run(here / "fork", "fork-12", [0.55 - 0.3 * i / 12 + 0.04 * (i % 2) for i in range(12)], first_step=1)
    app.dashboard.compare_with([longer, fork])
    chart = app.query_one(RewardChart)
    await wait_until(pilot, lambda: len(app.dashboard.compared.runs) == 2 and chart.up_to_date)
    app.clear_notifications()  # "comparing with …" lasts a few seconds: not part of the state pinned
    await pilot.pause(0.2)


SCENARIOS: dict[str, Scenario] = {
    "running": Scenario(RUN, running),
    "paused": Scenario(RUN, paused),
    "sample_detail": Scenario(RUN, sample_detail),
    "agent_sample_detail": Scenario(RUN + ("--agent",), sample_detail),  # the conversation turn by turn
    "group_view": Scenario(RUN, group_view),
    "help": Scenario(RUN, help_screen),
    "crash_countdown": Scenario(RUN + ("--crash-at", "14"), crash_countdown, {"delay": 30}),
    "zero_std": Scenario(RUN + ("--zero-std-from", "20"), zero_std),
    "eval_curve": Scenario(RUN + ("--eval-every", "6"), running, {"eval_every": 6}),
    "compared": Scenario(RUN, compared),
    "doctor": Scenario(RUN + ("--findings-at", "20"), doctor),  # the Doctor tab: findings, a chart
    "curriculum": Scenario(RUN + ("--curriculum",), curriculum),  # the Charts tab's prompt pool (docs/curriculum.md)
    "asynchronous": Scenario(RUN + ("--async-steps",), asynchronous),  # the Charts tab's timeline (docs/async.md)
}
