"""The run doctor's rules (common/doctor.py) on steps made to show each finding, and on steps that
must not raise one: the marks, the severities, the evidence and the suggested live change."""

from __future__ import annotations

import random

import pytest

from grpo_tui.common.doctor import Doctor, GenFacts, StepFacts, repeats
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import parse_config

BASE = """
[model]
path = "m"
[data]
path = "d.jsonl"
[[rewards]]
name = "accuracy"
[[rewards]]
name = "xml_format"
weight = 0.2
[generation]
max_completion_length = 32
"""


def config(extra: str = ""):
    return parse_config(BASE + extra, check_paths=False)


def step(n: int, rewards: list[list[float]], *, tokens=lambda p, g: 10, finish=lambda p, g: "stop", text=lambda p, g: "ok",
         scores=None, **metrics) -> StepFacts:
    gens = [GenFacts(p, g, r, tokens(p, g), finish(p, g), text(p, g),
                     scores(p, g, r) if scores else {"accuracy": float(r >= 1), "xml_format": 1.0})
            for p, group in enumerate(rewards) for g, r in enumerate(group)]
    flat = [r for group in rewards for r in group]
    fields = {"reward": sum(flat) / len(flat), "generation_ms": 100.0, "training_ms": 100.0, "num_tokens": 100, **metrics}
    return StepFacts(n, m.Step(step=n, epoch=0, **fields), gens)


def varied(n: int, **kw) -> StepFacts:
    rng = random.Random(n)
    return step(n, [[rng.choice([0.0, 1.0, 0.5]) for _ in range(4)] for _ in range(4)], **kw)


def feed(doctor: Doctor, steps) -> list[m.Finding]:
    out = []
    for s in steps:
        out += doctor.feed(s)
    return out


def names(findings, severity=None) -> set[str]:
    return {f.name for f in findings if not f.cleared and (severity is None or f.severity == severity)}


def test_a_healthy_run_raises_nothing_above_info():
    doctor = Doctor(config())
    said = feed(doctor, [varied(n, entropy=1.0, grad_norm=1.0) for n in range(1, 61)])
    assert not names(said, "warning") and not names(said, "critical"), [f.message for f in said]


@pytest.mark.parametrize(("value", "kind"), [(0.0, "score 0: too hard"), (1.0, "best reward: solved or too easy")])
def test_flat_groups_are_no_signal_and_say_which_side(value, kind):
    doctor = Doctor(config())
    said = feed(doctor, [varied(1), *[step(n, [[value] * 4] * 4) for n in range(2, 12)]])
    [finding] = [f for f in said if f.name == "no_signal" and f.severity == "critical" and not f.cleared]
    # the curriculum first (it skips such prompts before generating them), then dynamic sampling
    assert kind in finding.message and finding.suggestion == "curriculum.strategy=pass_rate"
    with_curriculum = feed(Doctor(config('[curriculum]\nstrategy = "pass_rate"\n')),
                           [varied(1), *[step(n, [[value] * 4] * 4) for n in range(2, 12)]])
    assert [f.suggestion for f in with_curriculum if f.name == "no_signal" and f.severity == "critical"][0] == "grpo.dynamic_sampling=true"
    assert finding.evidence.generations and all(s >= 2 for s, _, _ in finding.evidence.generations)
    if value == 1.0:  # solved: said so, and its flat groups are no fault
        assert names(doctor.findings()) == {"converged"}


def test_a_run_that_reuses_generations_is_not_told_to_turn_dynamic_sampling_on():
    # the two cannot go together (protocol/config.py): the live change the suggestion makes would be refused
    doctor = Doctor(config("[training]\nsteps_per_generation = 2\n"))
    said = feed(doctor, [varied(1), *[step(n, [[0.0] * 4] * 4) for n in range(2, 12)]])
    [finding] = [f for f in said if f.name == "no_signal" and f.severity == "critical" and not f.cleared]
    assert finding.suggestion == "curriculum.strategy=pass_rate" and "dynamic sampling drops their groups" in finding.message
    both = feed(Doctor(config('[training]\nsteps_per_generation = 2\n[curriculum]\nstrategy = "pass_rate"\n')),
                [varied(1), *[step(n, [[0.0] * 4] * 4) for n in range(2, 12)]])
    assert [f.suggestion for f in both if f.name == "no_signal" and f.severity == "critical"][0] is None


def test_flat_groups_in_the_first_half_window_are_info_and_grow_once_the_window_is_full():
    """A run that learns from scratch starts with many all-0 groups: not a warning before a window of steps."""
    doctor = Doctor(config())
    said = feed(doctor, [step(n, [[0.0] * 4] * 2 + [[0.0, 1.0, 0.0, 0.5]] * 2) for n in range(1, 10)])  # 50 % flat
    assert [(f.name, f.severity, f.since) for f in said if f.name == "no_signal"] == [("no_signal", "info", 5)]
    said = feed(doctor, [step(10, [[0.0] * 4] * 2 + [[0.0, 1.0, 0.0, 0.5]] * 2)])
    assert [(f.severity, f.since) for f in said if f.name == "no_signal"] == [("warning", 5)]


def test_truncation_names_the_cut_completions_and_a_length_that_holds_them():
    doctor = Doctor(config())
    cut = lambda p, g: "length" if g < 2 else "stop"  # half the completions cut
    said = feed(doctor, [varied(n, finish=cut, tokens=lambda p, g: 30 if g >= 2 else 32) for n in range(1, 11)])
    [finding] = [f for f in said if f.name == "truncation"][-1:]
    assert finding.severity == "critical" and finding.numbers["truncated_share"] == 0.5
    assert finding.suggestion == "generation.max_completion_length=64"
    assert finding.evidence.finish_reason == "length" and all(g < 2 for _, _, g in finding.evidence.generations)


def test_entropy_falling_while_the_reward_is_flat_is_a_collapse():
    doctor = Doctor(config())
    steps = [step(n, [[0.0, 1.0, 0.0, 1.0]] * 4, entropy=2.0 if n <= 10 else 0.1) for n in range(1, 25)]
    assert "entropy_collapse" in names(feed(doctor, steps), "critical")


def test_kl_clipping_and_a_gradient_spike():
    doctor = Doctor(config("[grpo]\nbeta = 0.04\n"))
    steps = [varied(n, kl=0.01, grad_norm=1.0, clip_ratio=m.ClipRatio(region=0.01)) for n in range(1, 25)]
    steps += [varied(25, kl=2.0, grad_norm=80.0, clip_ratio=m.ClipRatio(region=0.9))] * 3
    said = feed(doctor, steps)
    assert {"kl", "grad_spike"} <= names(said, "critical")
    assert "clipping" in names(said)
    assert next(f for f in said if f.name == "kl").suggestion.startswith("training.learning_rate=")


def test_length_that_pays_is_length_hacking():
    doctor = Doctor(config())
    def grow(n):
        length = 10 if n <= 10 else 40
        return step(n, [[0.25 * g for g in range(4)]] * 4, tokens=lambda p, g: length + 5 * g, completion_mean_length=length + 7.5)
    assert "length_hacking" in names(feed(doctor, [grow(n) for n in range(1, 22)]))


def test_repeating_text_is_repetition():
    assert repeats("the cat the cat the cat the cat") and not repeats("a plain sentence with no loops in it")
    doctor = Doctor(config())
    loop = lambda p, g: "so so so so so so so so so so" if g < 2 else "fine"
    assert "repetition" in names(feed(doctor, [varied(n, text=loop) for n in range(1, 11)]), "critical")


def test_format_saturated_while_accuracy_stays_at_zero():
    doctor = Doctor(config())
    zero = lambda p, g, r: {"accuracy": 0.0, "xml_format": 1.0}
    said = feed(doctor, [step(n, [[0.2, 0.2, 0.2, 0.2]] * 4, scores=zero) for n in range(1, 11)])
    assert "reward_dominance" in names(said, "warning")


def test_reward_up_while_eval_accuracy_falls():
    doctor = Doctor(config())
    steps = []
    for n in range(1, 41):
        facts = step(n, [[0.0, 1.0, 0.5, min(1.0, n / 20)]] * 4)
        facts.evals = [(n, a)] if (a := {10: 0.6, 20: 0.7, 30: 0.5, 40: 0.4}.get(n)) is not None else []
        steps.append(facts)
    assert "reward_up_eval_down" in names(feed(doctor, steps), "critical")


def test_a_finding_clears_only_once_it_stays_away_and_silence_hides_it():
    doctor = Doctor(config())
    cut = [varied(n, finish=lambda p, g: "length") for n in range(1, 11)]
    fine = [varied(n) for n in range(11, 31)]
    said = feed(doctor, cut + fine)
    cleared = [f for f in said if f.name == "truncation" and f.cleared]
    assert len(cleared) == 1 and cleared[0].step >= 15  # not at the first step without cut completions
    quiet = Doctor(config('[doctor]\nsilence = ["truncation"]\n'))
    assert "truncation" not in names(feed(quiet, cut))


def test_marks_that_cannot_mean_anything_name_the_key():
    from grpo_tui.protocol.config import ConfigError

    with pytest.raises(ConfigError, match="doctor.truncation.*three ascending numbers"):
        config("[doctor]\ntruncation = [0.5, 0.1, 0.2]\n")
    with pytest.raises(ConfigError, match="doctor.silence.*'speed' is not a finding"):
        config('[doctor]\nsilence = ["speed"]\n')


def test_the_running_median_is_the_median_of_the_last_values_kept():
    import random
    import statistics

    from grpo_tui.common.doctor import Recent

    rng, recent, kept = random.Random(0), Recent(limit=50), []
    for _ in range(400):
        value = rng.choice([rng.random(), 0.5, 1.0])  # ties too
        recent.append(value)
        kept = (kept + [value])[-50:]
        assert len(recent) == len(kept) and recent.median() == statistics.median(kept)


def slowing(load_then: float, load_now: float, memory_now: float = 100.0) -> list[StepFacts]:
    """40 steps, the last 10 twice as slow per token; the load and peak memory of the first and last steps."""
    out = []
    for n in range(1, 41):
        late = n > 30
        s = varied(n, generation_ms=200.0 if late else 100.0, training_ms=200.0 if late else 100.0,
                   peak_memory_mb=memory_now if late else 100.0)
        s.load = load_now if late else load_then
        out.append(s)
    return out


def test_a_slowdown_while_the_machine_got_busier_is_not_the_runs():
    quiet = feed(Doctor(config()), slowing(1.0, 1.2))
    assert "slowdown" in names(quiet, "info")  # the machine's load did not move: said, as info
    busy = feed(Doctor(config()), slowing(1.0, 3.5))
    assert "slowdown" not in names(busy)  # other work took the time: nothing to say of the run
    pressed = feed(Doctor(config()), slowing(1.0, 3.5, memory_now=200.0))
    assert "slowdown" in names(pressed, "warning")  # memory grew a fifth and more: the run's own


def test_an_async_run_too_far_off_policy_is_told_to_lower_max_staleness_live():
    doctor = Doctor(config("[async]\nmax_staleness = 3\n"))
    close = [varied(n, extra_metrics={"async/is_clipped": 0.01, "async/staleness_mean": 1.0}) for n in range(1, 12)]
    assert "off_policy" not in names(feed(doctor, close))
    far = [varied(n, extra_metrics={"async/is_clipped": 0.4, "async/staleness_mean": 3.0}) for n in range(12, 24)]
    said = feed(doctor, far)
    finding = [f for f in said if f.name == "off_policy" and not f.cleared][-1]  # once the window is all far
    assert finding.severity == "warning" and "40%" in finding.message.replace(" %", "%")
    assert finding.suggestion == "async.max_staleness=2"
    from grpo_tui.common.live_settings import check

    assert check(config("[async]\nmax_staleness = 3\n"), finding.suggestion, "config.toml") == ("async.max_staleness", 2)
