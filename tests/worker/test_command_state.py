"""The command state machine and sample selection, without a process."""

from __future__ import annotations

import random

from grpo_tui.protocol import messages as m
from grpo_tui.worker.command_state import CommandState, choose_samples
from tests.helpers.records import generation


def kinds(events):
    return [type(e).__name__ for e in events]


def test_pause_during_a_step_is_acknowledged_then_taken_at_the_boundary():
    c = CommandState(step=4, stepping=True)
    events = c.handle(m.Pause())
    assert kinds(events) == ["Log"] and "after step 5 finishes" in events[0].message
    assert not c.paused and c.take_pause() and c.paused
    assert kinds(c.handle(m.Pause())) == ["Error"]
    resumed = c.handle(m.Resume())
    assert resumed == [m.Resumed(step=4)] and not c.paused


def test_resume_before_the_pause_took_effect_cancels_it():
    c = CommandState(stepping=True)
    c.handle(m.Pause())
    assert kinds(c.handle(m.Resume())) == ["Log", "Resumed"]
    assert not c.take_pause()


def test_commands_that_make_no_sense_now_are_refused_without_changing_state():
    c = CommandState()
    error = c.handle(m.Resume())[0]
    assert isinstance(error, m.Error) and not error.fatal and error.message == "cannot resume: the run is not paused"
    c.handle(m.SaveCheckpoint())
    assert c.handle(m.SaveCheckpoint())[0].message == "cannot save checkpoint: a checkpoint is already requested"
    c.handle(m.Stop())
    assert c.stop_reason == "stop"
    assert kinds(c.handle(m.Pause())) == kinds(c.handle(m.Stop())) == ["Error"]
    assert kinds(c.handle(m.SetSampleDisplay(mode="all"))) == ["SampleDisplayChanged", "Log"] and c.display == "all"


def test_stop_while_paused_unpauses_and_the_first_reason_wins():
    c = CommandState(paused=True)
    c.handle(m.Stop())
    c.stop("eof")
    assert (c.paused, c.stop_reason) == (False, "stop")


def test_sample_selection():
    gens = [generation(0, 0, 0.2), generation(0, 1, None), generation(1, 0, 0.9), generation(1, 1, 0.2)]
    rng = random.Random(0)
    assert choose_samples(gens, "all", rng) == gens
    best, worst = choose_samples(gens, "best_worst", rng)
    assert best.reward == 0.9 and worst.reward is None  # unscored ranks lowest
    picked = choose_samples(gens, "random", random.Random(1))
    assert len(picked) == 2 and picked == choose_samples(gens, "random", random.Random(1))
    assert choose_samples(gens[:1], "best_worst", rng) == gens[:1]
