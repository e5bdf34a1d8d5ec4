"""What reward functions log reaches the dashboard: log_metric step means under the stats, and
log_extra notes (e.g. json_schema's validation errors) with the sample, shown as inert text."""

from __future__ import annotations

from textual.app import App, ComposeResult

from grpo_tui.protocol import messages as m
from grpo_tui.tui.sample_text import summary
from grpo_tui.tui.series import STEP_GROUPS, flatten_step
from grpo_tui.tui.state import RunState
from grpo_tui.tui.widgets.stats_panel import StatsPanel


class _Host(App[None]):
    def compose(self) -> ComposeResult:
        yield StatsPanel()


WORKERS_OWN = {"rewards/accuracy/std": 0.5, "completions/mean_terminated_length": 7.0, "clip_ratio/low_min": 0.0,
               "policy_loss": 0.1, "tools/call_frequency": 1.0, "sampling/rounds": 2.0, "judge/seconds": 0.3}


async def test_logged_metrics_show_under_the_stats_and_the_workers_own_figures_do_not():
    state = RunState(clock=lambda: 0.0)
    state.last_step = m.Step(step=3, epoch=0, extra_metrics={"mean_ids": 6.5, "accuracy_easy": 0.25, **WORKERS_OWN})
    async with _Host().run_test() as pilot:
        panel = pilot.app.query_one(StatsPanel)
        panel.show(state)
        await pilot.pause()
        assert "reward metrics accuracy_easy 0.25 · mean_ids 6.5" in panel.plain()
        assert not any(key in panel.plain() for key in WORKERS_OWN)  # the Charts tab has them


def test_the_charts_tab_keeps_the_workers_own_figures_apart_from_the_rewards_log_metric():
    row = flatten_step(m.Step(step=3, epoch=0, extra_metrics={"mean_ids": 6.5, **WORKERS_OWN}))
    groups = {group.name: [key for panel in group.resolve(list(row)) for key, _ in panel.lines] for group in STEP_GROUPS}
    assert [k for k in groups["reward metrics"] if k.startswith("extra_metrics/")] == ["extra_metrics/mean_ids"]
    assert "extra_metrics/completions/mean_terminated_length" in groups["completions"]
    assert set(groups["more step metrics"]) == {f"extra_metrics/{k}" for k in WORKERS_OWN if not k.startswith("completions/")}


def test_a_samples_reward_notes_show_literally():
    sample = m.Sample(step=1, index=0, group=0, prompt="p", completion="c", reward=0.5,
                      reward_details={"json_schema": 0.5},
                      reward_notes={"json_schema": "$.a: '[bold]x[/bold]' is not of type 'integer'"})
    text = summary(sample).plain
    assert "json_schema: $.a: '[bold]x[/bold]' is not of type 'integer'" in text
