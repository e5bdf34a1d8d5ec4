"""Hostile model output is shown inert everywhere a user can see it, asserted on the rendered screen.

A scripted worker streams samples, logs and stderr full of terminal escapes (CSI, OSC 0 title,
OSC 52 clipboard), BEL, backspaces, ``\\r`` and Rich markup; the worker's own ``Store`` writes the
same text to a store. The dashboard (Samples, sample detail, group view, Logs, Database tab) and
``grpo-tui browse`` must show the markup literally, apply none of it, and let no control
character reach the terminal: checked on the composited screen strips and the SVG screenshot.
"""

from __future__ import annotations

import sys
from pathlib import Path

from textual.app import App
from textual.widgets import DataTable

from grpo_tui.protocol.messages import Step
from grpo_tui.tui.app import GrpoApp
from grpo_tui.tui.browse import BrowseApp
from grpo_tui.tui.screens.group_view import GroupScreen
from grpo_tui.tui.screens.sample_detail import SampleDetailScreen
from grpo_tui.tui.widgets.database_generation_detail import DatabaseGenerationDetail
from grpo_tui.tui.widgets.database_view import DatabaseView
from grpo_tui.worker.trainer_contract import Generation, StepOutput
from grpo_tui.worker.store import Store
from tests.helpers.pilot import settle
from tests.faults.hostile import FORBIDDEN, HOSTILE, LITERALS, MARKUP, samples
from tests.tui.conftest import make_config, wait_until

GARBAGE_WORKER = Path(__file__).with_name("garbage_worker.py")
SIZE = (220, 60)


async def write_store(db: Path) -> None:
    """The hostile samples, written the way the worker writes a step."""
    store = await Store.open(db)
    run = await store.create_run(HOSTILE, HOSTILE, "/h", {"name": HOSTILE}, 1)
    generations = [
        Generation(
            prompt_index=s.group, group_index=s.index % 2, prompt=s.prompt, completion=s.completion,
            raw_completion=s.completion, thinking=s.thinking, reward=s.reward, reward_details=s.reward_details,
            advantage=s.advantage, num_tokens=s.num_tokens, finish_reason=s.finish_reason, tool_calls=s.tool_calls,
        )  # fmt: skip
        for s in samples()
    ]
    await store.write_step(run, StepOutput(metrics=Step(step=1, epoch=0, loss=0.1, reward=0.5), generations=generations))
    store.queue_log(1, "warning", HOSTILE)
    await store.finish_run(run, "completed")
    await store.close()


def screen_text(app: App) -> str:
    """What the terminal would show now, and check no segment carries a link or a control char."""
    strips = app.screen._compositor.render_strips()
    linked = [seg.text for strip in strips for seg in strip if seg.style is not None and seg.style.link]
    assert linked == [], f"markup became a link: {linked}"
    text = "\n".join(strip.text for strip in strips)
    assert not [c for c in FORBIDDEN if c in text], "a control character reached the screen"
    svg = app.export_screenshot()
    assert "\x1b" not in svg and "\x07" not in svg and "\x08" not in svg
    return text


def assert_shown_inert(app: App, *literals: str, at_least: int = 1) -> str:
    text = screen_text(app)
    for literal in literals:
        assert text.count(literal) >= at_least, f"{literal!r} not shown literally {at_least}x:\n{text}"
    return text


async def test_the_dashboard_shows_hostile_text_inert_everywhere(tmp_path):
    db = tmp_path / "outputs.db"
    await write_store(db)
    config = make_config(tmp_path)
    argv = [sys.executable, str(GARBAGE_WORKER), "hostile", str(db)]
    app = GrpoApp(str(tmp_path / "config.toml"), config, worker_argv=argv, stop_timeout_s=5.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: len(app.state.samples) == 4, timeout=30)
        table = app.query_one("#samples-table", DataTable)
        await wait_until(pilot, lambda: table.row_count == 4, timeout=30)  # redrawn at most once a second
        assert_shown_inert(app, "[bold]B[/bold] [link=https://x]L[/link]", at_least=4)  # Samples: 4 rows

        await pilot.press("enter")
        assert isinstance(app.screen, SampleDetailScreen)
        # prompt, thinking, completion, tool-call name / arguments / error: all literal
        assert_shown_inert(app, *LITERALS, at_least=4)
        await pilot.press("g")
        assert isinstance(app.screen, GroupScreen)
        assert_shown_inert(app, "[bold]B[/bold]", at_least=2)  # both completions of the group
        await pilot.press("escape")
        await pilot.press("escape")

        await pilot.press("2")
        await pilot.pause(0.3)
        logs = assert_shown_inert(app, "[link=https://x]L[/link]")
        for source in ("log [bold]B", "stderr [bold]B", "error [bold]B"):
            assert source in logs.replace("\n", "")

        await pilot.press("4")
        view = app.query_one(DatabaseView)
        await settle(pilot)
        view.action_all_generations()
        await settle(pilot)
        assert view.level == "generations"
        assert_shown_inert(app, "[bold]B[/bold]", at_least=4)
        app.query_one("#db-gens").focus()
        await pilot.press("enter")
        await settle(pilot)
        assert app.query_one(DatabaseGenerationDetail).detail is not None
        assert_shown_inert(app, *LITERALS, at_least=2)


async def test_browse_shows_hostile_text_inert(tmp_path):
    db = tmp_path / "outputs.db"
    await write_store(db)
    app = BrowseApp(str(db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert_shown_inert(app, MARKUP[:14])  # the run's name in the runs list
        await pilot.press("enter")
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        assert app.query_one(DatabaseView).level == "generations"
        assert_shown_inert(app, "[bold]B[/bold]", at_least=4)
        await pilot.press("enter")
        await settle(pilot)
        assert_shown_inert(app, *LITERALS, at_least=2)
        await pilot.press("g")  # the group of the selected generation
        await settle(pilot)
        assert_shown_inert(app, "[bold]B[/bold]", at_least=2)
