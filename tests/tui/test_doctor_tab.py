"""The Doctor tab (docs/doctor.md): the findings that hold, with their numbers and their signal's
chart; enter opens the Database tab on a finding's evidence; a applies its suggested change through
the live settings, recorded as the doctor's (the real worker: the run changes)."""

from __future__ import annotations

import pytest

from grpo_tui.protocol.config import load_config
from grpo_tui.tui.app import GrpoApp
from grpo_tui.tui.db.filters import GenFilter, evidence_filter, where
from grpo_tui.tui.widgets.database_view import DatabaseView
from grpo_tui.tui.widgets.doctor_panel import DoctorPanel
from tests.helpers.pilot import screen_text, until
from tests.helpers.worker_harness import query, reward_config, tiny_model, write_config
from tests.tui.db.make_store import RunSpec, build_store

__all__ = ["tiny_model"]

SIZE = (200, 50)
RUN = ("--steps", "24", "--samples", "8", "--hold", "--findings-at", "20")


def test_a_findings_evidence_is_its_generations_within_its_steps():
    f = evidence_filter(3, [18, 19, 20], [(20, 0, 2), (19, 1, 1)], "length")
    assert (f.run_id, f.step_min, f.step_max, f.finish_reason) == (3, 19, 20, None)  # the ids say it all
    sql, params = where(f)
    assert "IN (VALUES (?, ?, ?), (?, ?, ?))" in sql and params[-6:] == [20, 0, 2, 19, 1, 1]
    assert "the doctor's evidence (2 generations)" in f.describe()
    steps_only = evidence_filter(3, [5, 9, 7], [])  # a finding of the step metrics: every generation of its steps
    assert (steps_only.step_min, steps_only.step_max, steps_only.keys) == (5, 9, ())
    assert evidence_filter(3, [5], [], "length").finish_reason == "length"
    assert steps_only.cleared() == GenFilter(run_id=3)


async def test_the_doctor_tab_lists_findings_and_enter_opens_their_evidence(tmp_path, make_app):
    build_store(tmp_path / "outputs.db", [RunSpec("fake-run", steps=24, prompts=2, group=4)])
    app = make_app(*RUN)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app.state.findings) == 2, "the findings", 30)
        await pilot.press("6")
        panel = app.query_one(DoctorPanel)
        await until(pilot, lambda: [f.name for f in panel.findings] == ["truncation", "pass_rate"], "the rows")
        text = screen_text(app)
        assert "1 critical · 1 warning" in text and "truncated_share 0.62" in text
        assert "suggested change: generation.max_completion_length=48" in text
        assert "share of completions cut at the length limit" in text and "since" in text  # the signal's chart
        assert app.focused is app.query_one("#doctor-table")
        await pilot.press("enter")
        await until(pilot, lambda: app.query_one("#tabs").active == "database", "the Database tab")
        db = app.query_one(DatabaseView)
        await until(pilot, lambda: db.level == "generations" and db.filter.keys, "the evidence's generations", 15)
        assert db.filter.keys == ((20, 0, 2), (20, 1, 1)) and db.filter.run_id == 1
        await until(pilot, lambda: "the doctor's evidence (2 generations)" in screen_text(app), "the filter said")
        await until(pilot, lambda: db.generations.page is not None and len(db.generations.page.rows) == 2, "its rows")
        page = db.generations.page
        assert page is not None and {(r.step, r.prompt_index, r.group_index) for r in page.rows} == {(20, 0, 2), (20, 1, 1)}
        app.exit()


async def test_a_without_a_suggestion_says_so_and_sends_nothing(make_app):
    app = make_app(*RUN)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app.state.findings) == 2, "the findings", 30)
        await pilot.press("6")
        await pilot.press("down", "a")  # pass_rate suggests nothing
        await until(pilot, lambda: any("suggests no live change" in n.message for n in app._notifications), "the notice")
        assert not app.steering.asked
        app.exit()


async def test_the_probe_shows_on_the_doctor_tab_before_step_1(make_app):
    """[doctor] probe = true: the worker's probe finding (step 0) is on the Doctor tab and in the
    header's badge before any step; its numbers instead of a chart."""
    app = make_app("--steps", "0", "--hold", "--probe")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "probe" in app.state.findings, "the probe", 30)
        assert app.state.step == 0
        await pilot.press("6")
        await until(pilot, lambda: "verdict: 94 % of completions are cut" in screen_text(app), "its sentence")
        text = screen_text(app)
        assert "1 warning" in text and "suggested change: generation.max_completion_length=64" in text
        assert "the probe's numbers (before step 1): pass_0 0  truncated 0.94" in text
        app.exit()


async def test_once_the_run_trains_the_probe_is_said_as_before_step_1_not_as_a_problem(make_app):
    """The probe describes step 0: from step 1 the run's own findings speak for the run, so the Doctor
    tab no longer counts the probe's warning as holding; it stays, last and dim, "before step 1"."""
    app = make_app("--steps", "3", "--hold", "--probe")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.state.step == 3 and "probe" in app.state.findings, "three steps", 30)
        await pilot.press("6")
        await until(pilot, lambda: "probe (before 1)" in screen_text(app), "the probe's row, before step 1")
        text = screen_text(app)
        assert "✓ the run doctor sees nothing wrong" in text and "1 warning" not in text
        assert "before step 1 (the run's own findings now speak for it): " in text
        assert "suggested change: generation.max_completion_length=64" in text  # still a applies it
        app.exit()


@pytest.mark.slow
async def test_a_applies_the_suggested_change_and_the_run_changes(tmp_path, tiny_model):
    """The real worker, completions cut at 4 tokens: the doctor's truncation finding suggests a longer
    limit; a on it changes the running run from the next step, recorded with source "doctor"."""
    config_path = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"),
                               generation={"max_completion_length": 4},
                               training={"max_steps": 100000, "num_epochs": 20000, "silent_patience": 0},
                               checkpoint={"save_every": 0}, doctor={"window": 4})
    app = GrpoApp(str(config_path), load_config(config_path), stop_timeout_s=60.0)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "truncation" in app.state.findings, "the truncation finding", 180)
        await pilot.press("6")
        panel = app.query_one(DoctorPanel)
        await until(pilot, lambda: any(f.name == "truncation" for f in panel.findings), "its row")
        panel.query_one("#doctor-table").move_cursor(row=[f.name for f in panel.findings].index("truncation"))
        await pilot.press("a")
        await until(pilot, lambda: app.state.changes, "the change applied", 60)
        change = app.state.changes[-1]
        assert (change.key, change.old, change.new, change.source) == ("generation.max_completion_length", 4, 8, "doctor")
        assert f"generation.max_completion_length = 8 from step {change.step} (doctor)" in [n.message for n in app._notifications]
        await until(pilot, lambda: app.state.step >= change.step, "a step with the new limit", 60)
        db = tmp_path / "out" / "outputs.db"
        [(longest,)] = query(db, "SELECT max(num_tokens) FROM generations WHERE step >= ?", change.step)
        assert longest > 4  # completions may now run past the old limit
        app.exit()


def test_the_probe_counts_in_the_header_badge_until_step_1():
    from grpo_tui.protocol import messages as m
    from grpo_tui.tui.state import RunState
    from grpo_tui.tui.widgets.run_header import health_badge

    state = RunState(clock=lambda: 0.0)
    state.apply(m.Finding(name="probe", severity="warning", step=0, since=0, message="cut"))
    assert health_badge(state)[0] == "⚕ 1 warning"
    state.step = 1  # the run's own findings from here on; the probe stays on the Doctor tab
    assert health_badge(state)[0] == "✓ ok (doctor)"
