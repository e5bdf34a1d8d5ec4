"""The run doctor through the real worker (docs/doctor.md): findings on runs made to show them, with
evidence that exists in the store and shows it, the offline ``grpo-tui doctor`` that reads the same,
``doctor.stop_on`` (a healthy run that raises nothing above info: test_doctor_quiet.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.outcome import Exit
from tests.helpers.worker_harness import ROOT, WorkerProcess, query, reward_config, tiny_model, write_config

__all__ = ["tiny_model"]

CONSTANT = '''
def zero(prompts, completions, **kw):
    return [0.0] * len(completions)

def full(prompts, completions, **kw):
    return [1.0] * len(completions)

def three_digits(prompts, completions, **kw):
    """A format-only reward: a three-digit number in the answer tags, right or wrong."""
    import re
    return [1.0 if re.fullmatch(r"<answer>\\d{3}</answer>", c.strip()) else 0.0 for c in completions]
'''
ARITH = {"model": ROOT / "examples" / "models" / "tiny-arith", "train": ROOT / "examples" / "data" / "arith.jsonl",
         "eval": ROOT / "examples" / "data" / "arith_eval.jsonl"}  # the quickstart's warm model: it answers


def run(config, *args: str, timeout: float = 120) -> tuple[WorkerProcess, int]:
    worker = WorkerProcess(config, *args)
    worker.wait_for(m.Complete, timeout=timeout)
    return worker, worker.finish()


def doctor(out, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "doctor", str(out), *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_cut_completions_are_a_finding_whose_evidence_the_store_shows(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"),
                          generation={"max_completion_length": 4}, training={"max_steps": 6, "silent_patience": 0},
                          doctor={"window": 4})
    worker, code = run(config)
    assert code == 0, worker.stderr.decode()[-2000:]
    [finding] = [f for f in worker.of(m.Finding) if f.name == "truncation"]
    assert finding.severity == "critical" and finding.since == 2 and finding.suggestion == "generation.max_completion_length=8"
    db = tmp_path / "out" / "outputs.db"
    for step, prompt, group in finding.evidence.generations:
        assert query(db, "SELECT finish_reason FROM generations WHERE step = ? AND prompt_index = ? AND group_index = ?",
                     step, prompt, group) == [("length",)]
    assert query(db, "SELECT name, severity, since FROM findings WHERE name = 'truncation'") == [("truncation", "critical", 2)]
    offline = doctor(tmp_path / "out", "--json")
    assert offline.returncode == 11, offline.stderr  # a critical finding holds
    report = json.loads(offline.stdout)
    assert report["health"] == "critical" and "truncation" in [f["name"] for f in report["findings"]]
    text = doctor(tmp_path / "out")
    assert "critical  truncation (since step 2)" in text.stdout and "suggested change: generation.max_completion_length=8" in text.stdout


def test_a_reward_that_never_pays_is_too_hard_and_one_always_full_is_converged(tmp_path, tiny_model):
    (tmp_path / "constant.py").write_text(CONSTANT)
    said = {}
    for name in ("zero", "full"):
        folder = tmp_path / name
        folder.mkdir()
        config = write_config(folder, tiny_model, rewards=f'[[rewards]]\nfunction = "{tmp_path / "constant.py"}:{name}"\n',
                              training={"max_steps": 6, "silent_patience": 0}, doctor={"window": 4})
        worker, code = run(config)
        assert code == 0, worker.stderr.decode()[-2000:]
        said[name] = {f.name: f for f in worker.of(m.Finding) if not f.cleared}
    assert said["zero"]["no_signal"].severity == "critical" and "too hard" in said["zero"]["no_signal"].message
    assert "converged" in said["full"] and "no_signal" not in said["full"]  # solved is no fault


def test_stop_on_critical_ends_the_run_with_its_sentence_and_a_checkpoint(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"),
                          generation={"max_completion_length": 4}, training={"max_steps": 8, "silent_patience": 0},
                          checkpoint={"save_every": 0}, doctor={"window": 4, "stop_on": "critical"})
    worker, code = run(config)
    assert code == Exit.DOCTOR
    [error] = [e for e in worker.of(m.Error) if e.fatal]
    assert error.exit_code == Exit.DOCTOR and "doctor.stop_on" in error.message and "max_completion_length" in error.message
    assert worker.of(m.Step)[-1].step == 2 and (tmp_path / "out" / "checkpoint-2").is_dir()  # resume = "latest" picks it


def check_probe(config, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "check", str(config), "--probe", "8", *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_check_probe_says_in_one_sentence_whether_a_run_will_learn(tmp_path, tiny_model):
    quickstart = check_probe(ROOT / "examples" / "quickstart.toml")
    assert quickstart.returncode == 0, quickstart.stderr
    assert "# verdict: looks trainable" in quickstart.stdout and "pass rate (the accuracy reward)" in quickstart.stdout
    cut = check_probe(ROOT / "examples" / "quickstart.toml", "--set", "generation.max_completion_length=3")
    assert cut.returncode == 10
    assert "# verdict: 100 % of completions are cut at max_completion_length = 3: set it to at least 16" in cut.stdout
    (tmp_path / "constant.py").write_text(CONSTANT)
    from grpo_tui.common.tomlout import dumps
    from grpo_tui.protocol.config import RewardConfig, load_config

    quick = load_config(ROOT / "examples" / "quickstart.toml")  # its model and data, a reward that never pays
    quick.rewards, quick.eval = [RewardConfig(function=f"{tmp_path / 'constant.py'}:zero")], None
    config = tmp_path / "never.toml"
    config.write_text(dumps(quick.to_dict()))
    never = check_probe(config)
    assert never.returncode == 10 and "never earn a reward" in never.stdout.splitlines()[-1]

    (tmp_path / "leaves.py").write_text("import os\n\ndef leave(prompts, completions, **kw):\n    os._exit(0)\n")
    quick.rewards = [RewardConfig(function=f"{tmp_path / 'leaves.py'}:leave")]  # issue 57.8: an IndexError before
    config.write_text(dumps(quick.to_dict()))
    left = check_probe(config)
    assert left.returncode == 2 and "Traceback" not in left.stderr and left.stderr.count("\n") == 1, left.stderr
    assert "the probe could not run: its process ended without its figures" in left.stderr


def test_check_probe_times_a_step_by_the_median_so_one_slow_step_does_not_make_the_estimate(tmp_path, tiny_model):
    """A step that compiles again (its completions reach a new length) takes several steps' time: the
    first timed step stands for one here (the reward's third call sleeps 5 s)."""
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "slow"), training={"max_steps": 100})
    env = {**os.environ, "SLOW_REWARD_S": "5", "SLOW_FROM_CALL": "3", "SLOW_UNTIL_CALL": "3"}
    done = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "check", str(config), "--probe", "2"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert done.returncode in (0, 10), done.stderr
    said = re.search(r"a step: ([0-9.]+) s, .*the run: about ([0-9.]+) min for 100 steps", done.stdout)
    assert said is not None, done.stdout
    assert float(said[1]) < 2.5 and float(said[2]) < 2.5 * 100 / 60


def test_doctor_probe_true_says_the_probe_before_step_1(tmp_path, tiny_model):
    """[doctor] probe = true: the probe's measurement, as the finding "probe" at step 0, before the
    first step (run.jsonl, the store); completions cut at 3 tokens: a warning and the change."""
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"),
                          generation={"max_completion_length": 3}, training={"max_steps": 1, "silent_patience": 0},
                          doctor={"probe": True, "probe_prompts": 4})
    worker, code = run(config)
    assert code == 0, worker.stderr.decode()[-2000:]
    lines = (tmp_path / "out" / "run.jsonl").read_bytes().splitlines()
    from grpo_tui.protocol.codec import decode_event

    frames = [decode_event(line) for line in lines]
    [probe] = [f for f in frames if isinstance(f, m.Finding) and f.name == "probe"]
    first_step = next(i for i, f in enumerate(frames) if isinstance(f, m.Step))
    assert frames.index(probe) < first_step and (probe.step, probe.since, probe.severity) == (0, 0, "warning")
    assert "100 % of completions are cut at max_completion_length = 3: set it to at least" in probe.message
    assert probe.suggestion is not None and probe.suggestion.startswith("generation.max_completion_length=")
    assert probe.numbers["truncated"] == 1.0 and "step_seconds" in probe.numbers
    db = tmp_path / "out" / "outputs.db"
    assert query(db, "SELECT name, severity, since FROM findings WHERE name = 'probe'") == [("probe", "warning", 0)]


def test_a_collapsing_looping_run_is_entropy_collapse_and_repetition_with_the_looping_texts(tmp_path, tiny_model):
    """A learning rate far too high for the tiny model: its token entropy falls to a fraction of its
    start while the reward stays flat, and its completions loop. Both findings fire, their evidence
    is in the store and shows it (the named completions repeat; the named steps' entropy is low)."""
    from grpo_tui.common.doctor import repeats

    config = write_config(tmp_path, tiny_model, generation={"max_completion_length": 32},
                          training={"max_steps": 12, "silent_patience": 0, "learning_rate": 3e-2},
                          checkpoint={"save_every": 0}, doctor={"window": 4})
    worker, code = run(config)
    assert code == 0, worker.stderr.decode()[-2000:]
    said = {f.name: f for f in worker.of(m.Finding) if not f.cleared}
    assert said["repetition"].severity in ("warning", "critical") and said["repetition"].step <= 12
    assert said["entropy_collapse"].severity in ("warning", "critical")
    db = tmp_path / "out" / "outputs.db"
    for step, prompt, group in said["repetition"].evidence.generations:
        [(text,)] = query(db, "SELECT completion FROM generations WHERE step = ? AND prompt_index = ? AND group_index = ?",
                          step, prompt, group)
        assert repeats(text), text
    start = said["entropy_collapse"].numbers["entropy_start"]
    for step in said["entropy_collapse"].evidence.steps:
        [(entropy,)] = query(db, "SELECT entropy FROM steps WHERE step = ?", step)
        assert entropy < start


def arith_config(folder, rewards: str, **sections):
    """The quickstart's warm model and data, 4 prompts × 4 per step, a learning rate high enough to
    show a bad reward's effect within a few steps, the doctor's window 4 (it judges from step 2)."""
    values = {"data": {"path": str(ARITH["train"]), "eval_path": str(ARITH["eval"]), "seed": 0},
              "grpo": {"group_size": 4}, "checkpoint": {"save_every": 0}, "doctor": {"window": 4},
              "training": {"batch_size": 4, "learning_rate": 1e-3, "silent_patience": 0}}
    for section, table in sections.items():
        values.setdefault(section, {}).update(table)
    return write_config(folder, ARITH["model"], rewards=rewards, **values)


def test_a_reward_that_pays_for_length_is_length_hacking_with_the_long_completions(tmp_path):
    """The length reward with its target at the limit pays for every token: the answers (5-6 tokens)
    grow to the limit. Length hacking fires at step 8, the first whose window (5-8) follows the first
    one (1-4), and names long, well-paid completions of the store."""
    config = arith_config(tmp_path, '[[rewards]]\nname = "length"\nparams = { target = 24 }\n',
                          generation={"max_completion_length": 24}, training={"max_steps": 8})
    worker, code = run(config)
    assert code == 0, worker.stderr.decode()[-2000:]
    [finding] = [f for f in worker.of(m.Finding) if f.name == "length_hacking"]
    assert finding.since == 8 and finding.severity in ("warning", "critical") and finding.numbers["rank_correlation"] >= 0.6
    db = tmp_path / "out" / "outputs.db"
    [(start,)] = query(db, "SELECT avg(completion_mean_length) FROM steps WHERE step <= 4")
    [(first_best,)] = query(db, "SELECT max(reward) FROM generations WHERE step = 1")
    assert finding.evidence.generations and start < 8
    for step, prompt, group in finding.evidence.generations:
        [(tokens, reward)] = query(db, "SELECT num_tokens, reward FROM generations WHERE step = ? AND prompt_index = ? "
                                   "AND group_index = ?", step, prompt, group)
        assert step >= 5 and tokens >= 1.5 * start and reward > first_best  # longer than at the start, and paid more


def test_a_format_only_reward_with_eval_measuring_correctness_is_reward_up_eval_down(tmp_path):
    """A reward for a three-digit answer, right or wrong; eval (greedy) measures correctness. The model
    learns to answer three digits and forgets the sums: at step 5, with three evaluations and the
    window's reward above the first window's, the finding names the evaluations (the store's evals at
    steps 0 and 4) and the completions the reward pays, which the accuracy reward scores 0."""
    (tmp_path / "format.py").write_text(CONSTANT)
    rewards = (f'[[rewards]]\nfunction = "{tmp_path / "format.py"}:three_digits"\n'
               '[[rewards]]\nname = "accuracy"\nweight = 0.0\n')  # measured, not paid
    config = arith_config(tmp_path, rewards, generation={"max_completion_length": 12},
                          training={"max_steps": 6}, eval={"every": 2, "limit": 64})
    worker, code = run(config)
    assert code == 0, worker.stderr.decode()[-2000:]
    [finding] = [f for f in worker.of(m.Finding) if f.name == "reward_up_eval_down"]
    assert (finding.since, finding.severity) == (5, "critical")
    db = tmp_path / "out" / "outputs.db"
    best, now = finding.evidence.steps
    assert (best, now) == (0, 4)  # the start's evaluation is step 0's, as the store keeps it
    assert query(db, "SELECT step, accuracy FROM evals WHERE step IN (?, ?) ORDER BY step", best, now) == [
        (0, finding.numbers["eval_best"]), (4, finding.numbers["eval_now"])]
    wrong = 0
    for step, prompt, group in finding.evidence.generations:
        [(details,)] = query(db, "SELECT reward_details FROM generations WHERE step = ? AND prompt_index = ? "
                             "AND group_index = ?", step, prompt, group)
        scores = json.loads(details)
        assert scores["three_digits"] == 1.0
        wrong += scores["accuracy"] == 0.0
    assert wrong >= 0.75 * len(finding.evidence.generations) > 0  # paid for its form, wrong
    offline = json.loads(doctor(tmp_path / "out", "--json").stdout)  # the same from the store, as of step 6
    [again] = [f for f in offline["findings"] if f["name"] == "reward_up_eval_down"]
    assert again["since"] == 5 and again["evidence"]["steps"] == [0, 6]


def test_a_nan_reward_is_unscored_not_too_hard(tmp_path, tiny_model):
    """Issue 57.12: every reward NaN (TRL reads it as None: unscored) made the doctor call the
    prompts too hard; it says they are unscored, and suggests no change for it."""
    (tmp_path / "nan.py").write_text("def accuracy(completions, **kw):\n    return [float('nan')] * len(completions)\n")
    config = write_config(tmp_path, tiny_model, rewards=f'[[rewards]]\nfunction = "{tmp_path / "nan.py"}:accuracy"\n',
                          training={"max_steps": 4, "silent_patience": 0}, doctor={"window": 2})
    worker, code = run(config)
    said = [f for f in worker.of(m.Finding) if not f.cleared]
    assert all("too hard" not in f.message for f in said), [f.message for f in said]
    [no_signal] = [f for f in said if f.name == "no_signal"][-1:]
    assert "are unscored (every reward None or NaN" in no_signal.message and no_signal.suggestion in (None, "")
