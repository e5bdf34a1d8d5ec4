"""What reward functions log reaches the dashboard: log_metric step means under the stats, and
log_extra notes (e.g. json_schema's validation errors) with the sample, shown as inert text."""

from __future__ import annotations

from textual.app import App, ComposeResult

from grpo_tui.protocol import messages as m
from grpo_tui.tui.sample_text import summary
from grpo_tui.tui.state import RunState
from grpo_tui.tui.widgets.stats_panel import StatsPanel


class _Host(App[None]):
    def compose(self) -> ComposeResult:
        yield StatsPanel()


async def test_logged_metrics_show_under_the_stats():
    state = RunState(clock=lambda: 0.0)
    state.last_step = m.Step(step=3, epoch=0, extra_metrics={"mean_ids": 6.5, "accuracy_easy": 0.25})
    async with _Host().run_test() as pilot:
        panel = pilot.app.query_one(StatsPanel)
        panel.show(state)
        await pilot.pause()
        assert "reward metrics accuracy_easy 0.25 · mean_ids 6.5" in panel.plain()


def test_a_samples_reward_notes_show_literally():
    sample = m.Sample(step=1, index=0, group=0, prompt="p", completion="c", reward=0.5,
                      reward_details={"json_schema": 0.5},
                      reward_notes={"json_schema": "$.a: '[bold]x[/bold]' is not of type 'integer'"})
    text = summary(sample).plain
    assert "json_schema: $.a: '[bold]x[/bold]' is not of type 'integer'" in text
