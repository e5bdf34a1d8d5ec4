"""reasoning-gym as a data source (docs/environments.md), through the real worker: the rows are
generated in the worker from ``[data] reasoning_gym``, and the built-in ``reasoning_gym`` reward's
stored score of each completion is the package's own score of the stored answer; a missing package
or an unknown task is one sentence and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import reasoning_gym
from reasoning_gym.composite import DatasetSpec

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.outcome import Exit
from tests.helpers.worker_harness import ROOT, WorkerProcess, query

TINY = ROOT / "examples" / "models" / "tiny-arith"  # its completions are digits: some answers are right
ARITH = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "operators": ["+"]}
TASKS = '[{ name = "basic_arithmetic", weight = 3, config = { min_terms = 2, max_terms = 2, min_digits = 1, ' \
        'max_digits = 1, operators = ["+"] } }, "leg_counting"]'


def _config(folder: Path, tasks: str = TASKS, steps: int = 3) -> Path:
    text = f'''
[model]
path = "{TINY}"
[data]
reasoning_gym = {{ tasks = {tasks}, size = 24, seed = 5, eval_size = 6 }}
[[rewards]]
name = "reasoning_gym"
[grpo]
group_size = 4
[generation]
max_completion_length = 3
[training]
batch_size = 4
max_steps = {steps}
silent_patience = 0
[eval]
every = 0
[checkpoint]
output_dir = "{folder / 'out'}"
'''
    (folder / "config.toml").write_text(text)
    return folder / "config.toml"


def _entries(seed: int, size: int) -> dict[str, dict]:
    """The package's own entries for the config above, by question."""
    specs = [DatasetSpec("basic_arithmetic", 3.0, dict(ARITH)), DatasetSpec("leg_counting", 1.0, {})]
    dataset = reasoning_gym.create_dataset("composite", size=size, seed=seed, datasets=specs)
    return {dataset[i]["question"]: dataset[i] for i in range(size)}


def _own_answer(completion: str) -> str:
    """reasoning-gym's extract_answer, else the whole text (docs/environments.md)."""
    found = reasoning_gym.utils.extract_answer(completion)
    return found if found is not None else completion.strip()


def test_two_tasks_the_stored_reward_is_the_packages_score_of_the_stored_answer(tmp_path):
    worker = WorkerProcess(_config(tmp_path))
    worker.wait_for(m.Complete)
    assert worker.finish() == 0, worker.stderr.decode()[-3000:]
    entries = _entries(5, 24)
    rows = query(tmp_path / "out" / "outputs.db",
                 "SELECT prompt, completion, reward, reward_details, reward_notes FROM generations")
    assert len(rows) == 3 * 4 * 4
    tasks, scores = set(), []
    for prompt, completion, reward, details, notes in rows:
        (entry,) = [e for q, e in entries.items() if q in prompt]  # the stored prompt renders the entry's question
        answer = json.loads(notes)["answer"]
        assert answer == _own_answer(completion)
        own = reasoning_gym.get_score_answer_fn(entry["metadata"]["source_dataset"])(answer, entry)
        assert json.loads(details)["reasoning_gym"] == reward == own
        tasks.add(entry["metadata"]["source_dataset"])
        scores.append(own)
    assert tasks == {"basic_arithmetic", "leg_counting"}
    assert any(s > 0 for s in scores) and any(s == 0 for s in scores)  # the digits model is right at times
    evals = worker.of(m.Eval)  # the eval rows (eval_size, from seed + 1); their accuracy is the reward's
    assert [e.num_prompts for e in evals] == [6, 6] and all(e.accuracy is not None for e in evals)


def test_the_reward_gives_a_right_answer_full_marks_through_the_packages_scorer():
    from grpo_tui.worker.engine.prompts.reasoning_gym_source import reasoning_gym as reward

    entries = list(_entries(5, 8).values())
    completions = [f"<think>hmm</think> so <answer>{e['answer']}</answer>" for e in entries] + ["<answer>nope</answer>"]
    entries.append(entries[0])
    notes: dict = {}
    scores = reward([e["question"] for e in entries], completions, answer=[e["answer"] for e in entries],
                    metadata=[e["metadata"] for e in entries], log_extra=notes.__setitem__)
    assert scores == [1.0] * 8 + [0.0] and notes["answer"][-1] == "nope"
    assert reward(["q"], ["1"], answer=["1"], metadata=[None]) == [None]  # a row that is no entry


def test_an_unknown_task_is_one_sentence_and_exit_2(tmp_path):
    out = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(_config(tmp_path, '["leg_countin"]')),
                          "--plain"], capture_output=True, text=True, timeout=300)
    assert out.returncode == Exit.MISTAKE, out.stderr[-2000:]
    assert "data.reasoning_gym: no reasoning-gym task 'leg_countin'" in out.stderr + out.stdout
    assert "Traceback" not in out.stderr


HIDE = """
import sys

class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "reasoning_gym":
            raise ModuleNotFoundError("No module named 'reasoning_gym'", name=name)
        return None

sys.meta_path.insert(0, Hide())
"""


def test_without_the_package_check_and_the_worker_say_the_pip_command(tmp_path):
    (tmp_path / "hide").mkdir()  # a Python where reasoning-gym is not installed
    (tmp_path / "hide" / "sitecustomize.py").write_text(HIDE)
    env = {"PYTHONPATH": str(tmp_path / "hide")}
    config = _config(tmp_path)
    check = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "check", str(config)], capture_output=True,
                           text=True, timeout=300, env={**_env(), **env})
    worker = WorkerProcess(config, env=env)
    assert worker.finish() == Exit.MISTAKE and worker.of(m.Step) == []
    (error,) = [e for e in worker.of(m.Error) if e.fatal]
    sentence = "data.reasoning_gym needs the reasoning-gym package, which is not installed: `pip install "
    assert check.returncode == Exit.MISTAKE and check.stderr.count("\n") == 1 and sentence in check.stderr
    assert error.message.startswith(sentence) and "reasoning-gym" in error.message.split("pip install ")[1]


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def test_data_without_a_path_or_tasks_and_data_with_both_are_one_sentence_each(tmp_path):
    import pytest

    from grpo_tui.protocol.config import ConfigError, parse_config

    head = f'[model]\npath = "{TINY}"\n[[rewards]]\nname = "reasoning_gym"\n'
    with pytest.raises(ConfigError, match=r"data.path: is required: a JSONL, JSON, CSV or Parquet file, .*data.reasoning_gym"):
        parse_config(head + "[data]\nseed = 1\n", base_dir=tmp_path)
    (tmp_path / "rows.jsonl").write_text('{"prompt": "x"}\n')
    with pytest.raises(ConfigError, match="give data.path or data.reasoning_gym, not both"):
        parse_config(head + '[data]\npath = "rows.jsonl"\nreasoning_gym = { tasks = ["leg_counting"] }\n', base_dir=tmp_path)
    for eval_seed in (1, 2, 1000):  # reasoning-gym's entry i of seed s is s + i's: these overlap seed 1's 1,000 rows
        with pytest.raises(ConfigError, match=rf"data.reasoning_gym.eval_seed: {eval_seed} gives eval rows that are training "
                                              r"rows .*use at least seed \+ size = 1001 \(the default\), or at most seed - eval_size = -99"):
            parse_config(head + f'[data]\nreasoning_gym = {{ tasks = ["leg_counting"], seed = 1, eval_seed = {eval_seed} }}\n',
                         base_dir=tmp_path)


def test_the_default_eval_rows_are_held_out():
    from grpo_tui.protocol.config_environments import ReasoningGymConfig, ReasoningGymTask
    from grpo_tui.worker.engine.prompts import reasoning_gym_source

    two_digits = {**ARITH, "min_digits": 2, "max_digits": 2}  # few enough repeats by chance to see it
    tasks: list[str | ReasoningGymTask] = [ReasoningGymTask(name="basic_arithmetic", config=two_digits), "leg_counting"]
    source = ReasoningGymConfig(tasks=tasks, size=40, seed=3, eval_size=40)
    train = {row["prompt"] for row in reasoning_gym_source.build(source)[0]}
    held_out = {row["prompt"] for row in reasoning_gym_source.build(source, held_out=True)[0]}
    assert len(held_out) == 40 and source.held_out_seed == 43
    assert not held_out & train  # seed + 1, the old default, gave 39 of the 40 training questions again
