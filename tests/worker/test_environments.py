"""TRL's ``environment_factory`` (docs/environments.md), through the real worker: TRL's documented
``IncrementEnv`` as written there (only the model path changed), one instance per rollout, its
method the tool, ``get_reward`` a reward column; an environment that raises, hangs or returns
non-text never stops the run; a broken class is one sentence, exit 2."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

from grpo_tui.protocol.outcome import Exit
from tests.helpers.worker_harness import ROOT, query

AGENT = ROOT / "examples" / "models" / "tiny-agent"  # calls tools in <tool_call> blocks


class IncrementEnv:  # TRL's docs/source/grpo_trainer.md, "Environments", as written there
    # Reserved methods
    def reset(self, **kwargs) -> str | None:  # required; called at the start of each rollout
        self.counter = 0
        self.target = random.randint(1, 6)  # self-sample the task
        return f"Increment the counter by {self.target}."  # returned string becomes the prompt

    def get_reward(self) -> float:  # optional: the environment scores itself from its own state
        return float(self.counter == self.target)

    # Public methods (exposed as tools)
    def increment(self, step: int) -> int:
        """
        Increment the internal counter.

        Args:
            step: Value to add to the counter.

        Returns:
            The updated counter value.
        """
        self.counter += step
        return self.counter


def test_trls_documented_increment_env_trains_as_written(tmp_path):
    from grpo_tui import GRPOConfig, GRPOTrainer

    trainer = GRPOTrainer(
        model=str(AGENT),
        args=GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=8,
                        num_generations=4, max_completion_length=48, chat_template_kwargs={"enable_thinking": False}),
        environment_factory=IncrementEnv,
    )
    trainer.train()
    rows = query(tmp_path / "out" / "outputs.db", "SELECT prompt, reward, reward_details FROM generations")
    assert len(rows) == 3 * 2 * 4
    for prompt, reward, details in rows:
        assert "Increment the counter by " in prompt  # reset's text is the prompt
        assert set(json.loads(details)) == {"IncrementEnv"} and reward in (0.0, 1.0)  # get_reward's column
    by_group: dict = {}
    for i, (prompt, _, _) in enumerate(rows):  # the 4 rollouts of a row reset alike (seeded per row)
        by_group.setdefault(i // 4, set()).add(prompt)
    assert all(len(p) == 1 for p in by_group.values())


FAULTY = '''
import time


class Faulty:
    def __init__(self, mode):
        self.mode = mode

    def reset(self, prompt, **row):
        if self.mode == "raise":
            raise RuntimeError("the board is on fire")
        if self.mode == "hang":
            time.sleep(30)
        return {"board": [1, 2, 3]}  # not text

    def get_reward(self):
        if self.mode == "raise":
            raise ValueError("no score")
        return 0.5

    def look(self, where: str) -> str:
        """Look somewhere.

        Args:
            where: where to look.
        """
        raise RuntimeError("nothing there")


class NoReset:
    def look(self) -> str:
        """Look."""
        return "x"
'''


def _run(tmp_path: Path, env_table: str) -> subprocess.CompletedProcess:
    (tmp_path / "env.py").write_text(FAULTY)
    (tmp_path / "data.jsonl").write_text('{"prompt": "Go. "}\n{"prompt": "Now. "}\n')
    (tmp_path / "config.toml").write_text(f"""
[model]
path = "{AGENT}"
[data]
path = "data.jsonl"
{env_table}
[grpo]
group_size = 2
[generation]
max_completion_length = 24
[training]
batch_size = 2
max_steps = 2
silent_patience = 0
[checkpoint]
output_dir = "out"
""")
    return subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(tmp_path / "config.toml"), "--plain"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_an_environment_that_raises_hangs_or_returns_non_text_never_stops_the_run(tmp_path):
    for mode in ("raise", "hang", "text"):
        folder = tmp_path / mode
        folder.mkdir()
        out = _run(folder, f'[environment]\nclass = "env.py:Faulty"\nargs = {{ mode = "{mode}" }}\ntimeout_s = 1')
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        assert "completed: 2 steps" in out.stdout
        prompts = [p for (p,) in query(folder / "out" / "outputs.db", "SELECT prompt FROM generations")]
        said = {"raise": "Error: Faulty.reset raised RuntimeError: the board is on fire",
                "hang": "Error: Faulty.reset timed out after 1s", "text": 'Go. {"board": [1, 2, 3]}'}[mode]
        assert any(said in p for p in prompts), prompts[0][-200:]
        scores = [json.loads(d)["Faulty"] for (d,) in query(folder / "out" / "outputs.db",
                                                           "SELECT reward_details FROM generations")]
        assert all(s == (None if mode == "raise" else 0.5) for s in scores)


def test_a_broken_class_is_one_sentence_and_exit_2(tmp_path):
    for table, said in [('class = "env.py:Missing"', "environment.class: "),
                        ('class = "env.py:NoReset"', "NoReset (")]:
        out = _run(tmp_path, "[environment]\n" + table)
        assert out.returncode == Exit.MISTAKE, out.stdout[-2000:] + out.stderr[-2000:]
        assert said in out.stderr + out.stdout and "Traceback" not in out.stderr


COUNTER = '''
class Counter:
    def __init__(self, offset):
        self.offset = offset

    def reset(self, prompt, **row):
        self.calls = 0
        return None  # the row's prompt as it is

    def get_reward(self):
        return float(self.calls)

    def add(self, a: int, b: int) -> int:
        """Add two numbers.

        Args:
            a: the first.
            b: the second.
        """
        self.calls += 1
        return a + b + self.offset
'''


def test_each_rollout_calls_its_own_instance_and_reads_the_result_as_a_tool_message(tmp_path):
    from tests.helpers.worker_harness import build_tool_calling_model

    model = build_tool_calling_model(tmp_path / "model")  # every turn calls add(a=1, b=2)
    (tmp_path / "counter.py").write_text(COUNTER)
    (tmp_path / "rewards.py").write_text("def calls(completions, environments, **kwargs):\n"
                                         "    return [float(e.calls) for e in environments]\n")  # TRL's environments argument
    (tmp_path / "data.jsonl").write_text('{"prompt": "Add. "}\n{"prompt": "More. "}\n')
    (tmp_path / "config.toml").write_text(f"""
[model]
path = "{model}"
[data]
path = "data.jsonl"
[environment]
class = "counter.py:Counter"
args = {{ offset = 10 }}
[[rewards]]
function = "rewards.py:calls"
[grpo]
group_size = 2
[generation]
max_completion_length = 32
max_tool_calls = 2
[training]
batch_size = 2
max_steps = 2
silent_patience = 0
[checkpoint]
output_dir = "out"
""")
    out = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(tmp_path / "config.toml"), "--plain"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "tools: add;" in out.stdout + out.stderr
    rows = query(tmp_path / "out" / "outputs.db", "SELECT reward_details, turns FROM generations")
    assert len(rows) == 2 * 2 * 2
    for details, turns in rows:
        results = [t for t in json.loads(turns) if t["role"] == "tool"]
        assert results and all(t["content"] == "13" for t in results)  # the instance's own offset (args)
        assert json.loads(details)["Counter"] == float(len(results))  # one instance per rollout: its calls alone
        assert json.loads(details)["calls"] == float(len(results))  # the reward function read the same instance


GUESS = '''
import random


class Guess:
    def __init__(self, mode="ok"):
        self.mode = mode

    def reset(self, prompt, **row):
        self.secret, self.turns, self.won = random.randint(1, 9), 0, False
        return " Guess my number (1-9)."

    def respond(self, message):
        self.turns += 1
        if self.mode == "raise" and self.turns == 1:
            raise RuntimeError("the judge fell over")
        digits = [int(c) for c in message if c.isdigit()]
        if digits and digits[-1] == self.secret:
            self.won = True
            return None
        if self.turns >= 3:
            return None
        return "higher" if not digits or digits[-1] < self.secret else "lower"

    def get_reward(self):
        return float(self.won)
'''


def test_a_text_episode_replies_to_each_turn_until_respond_says_none(tmp_path):
    for mode in ("ok", "raise"):
        folder = tmp_path / mode
        folder.mkdir()
        (folder / "guess.py").write_text(GUESS)
        (folder / "data.jsonl").write_text('{"prompt": "Play."}\n{"prompt": "Again."}\n')
        (folder / "config.toml").write_text(f"""
[model]
path = "{AGENT}"
[data]
path = "data.jsonl"
[environment]
class = "guess.py:Guess"
args = {{ mode = "{mode}" }}
[grpo]
group_size = 2
[generation]
max_completion_length = 96
[training]
batch_size = 2
max_steps = 2
silent_patience = 0
[checkpoint]
output_dir = "out"
""")
        out = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(folder / "config.toml"), "--plain"],
                             capture_output=True, text=True, timeout=300, cwd=folder)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        rows = query(folder / "out" / "outputs.db", "SELECT reward_details, turns, finish_reason FROM generations")
        assert len(rows) == 8
        replies: list[str] = []
        errors: list[str] = []
        for details, turns, finish in rows:
            said = [t["content"] for t in json.loads(turns) if t["role"] == "user"]
            assert len(said) <= 2 and json.loads(details)["Guess"] in (0.0, 1.0)
            if mode == "raise" and said:  # the exception is what the model reads, and the episode goes on
                assert said[0] == "Error: Guess.respond raised RuntimeError: the judge fell over"
                errors.append(said.pop(0))
            assert set(said) <= {"higher", "lower"}
            replies += said
        assert replies if mode == "ok" else errors  # some turns ended in time to be replied to


def test_an_environment_run_resumed_mid_way_equals_one_run_straight(tmp_path):
    from tests.helpers.environments import write_game_run

    def run(config: Path, *args: str) -> None:
        out = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(config), "--plain", *args],
                             capture_output=True, text=True, timeout=300, cwd=config.parent)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]

    run(write_game_run(tmp_path / "straight", 4))
    run(write_game_run(tmp_path / "split", 2))
    run(write_game_run(tmp_path / "split", 4))  # resume = "latest": from final/ of step 2
    sql = "SELECT step, prompt, completion, reward, turns FROM generations ORDER BY step, id"
    straight, split = (query(tmp_path / f / "out" / "outputs.db", sql) for f in ("straight", "split"))
    assert [r[0] for r in split] == [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4
    assert straight == split  # the same episodes: resets seeded per (seed, step, row), draws keyed
    assert any('"role":"user"' in (r[4] or "") for r in straight)  # respond replied somewhere


def test_an_environment_run_reuses_its_generation_over_steps_with_each_steps_own_episodes(tmp_path):
    """steps_per_generation = 2: step 1 rolls out step 1's and step 2's episodes (their resets keyed
    by their own step), one step at a time through the environment; step 2 trains them."""
    from tests.helpers.environments import write_game_run

    for name, extra in (("reused", {"steps_per_generation": 2}), ("fresh", {})):
        config = write_game_run(tmp_path / name, 2, **extra)
        out = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(config), "--plain"],
                             capture_output=True, text=True, timeout=300, cwd=config.parent)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    sql = "SELECT step, prompt, completion FROM generations ORDER BY step, id"
    reused, fresh = (query(tmp_path / f / "out" / "outputs.db", sql) for f in ("reused", "fresh"))
    assert [r[0] for r in reused] == [1] * 4 + [2] * 4
    assert reused[:4] == fresh[:4]  # step 1 is the same step either way
    assert [r[1] for r in reused[4:]] == [r[1] for r in fresh[4:]]  # step 2's own episodes


class CodingEnv:  # TRL's docs/source/grpo_trainer.md, "Multiple environments", as written there
    def reset(self, **kwargs) -> str:
        n = random.randint(1, 20)
        return f"Compute the {n}th Fibonacci number."

    def run_code(self, code: str) -> str:  # exposed as a tool only for "coding" examples
        """Run the given Python code and return its stdout.

        Args:
            code: The Python source to execute.

        Returns:
            The captured standard output.
        """
        ...


class GameEnv:
    def reset(self, **kwargs) -> str:
        return "Reach the goal tile."

    def move(self, action: str) -> str:  # exposed as a tool only for "game" examples
        """Apply an action to the game and return the new observation.

        Args:
            action: One of "up", "down", "left", "right".

        Returns:
            The observation after the move.
        """
        ...


def reward_func(completions, **kwargs):  # TRL's example leaves it to the reader
    return [float(len(c[0]["content"] if isinstance(c, list) else c) % 3) for c in completions]


def test_trls_documented_dict_of_environments_routes_each_row_by_its_environment_column(tmp_path):
    from grpo_tui import GRPOConfig, GRPOTrainer
    from tests.helpers.worker_harness import build_tool_calling_model

    model = build_tool_calling_model(tmp_path / "model")  # every turn calls add(a=1, b=2): no tool of either
    dataset = [{"environment": e} for e in ["coding", "game"] * 4]  # TRL's Dataset.from_dict({...} * 500), shorter
    trainer = GRPOTrainer(
        model=str(model),
        args=GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=4, num_generations=2,
                        max_completion_length=32, chat_template_kwargs={"enable_thinking": False}),
        train_dataset=dataset,
        reward_funcs=reward_func,
        environment_factory={"coding": CodingEnv, "game": GameEnv},
    )
    trainer.train()
    rows = query(tmp_path / "out" / "outputs.db", "SELECT prompt, turns FROM generations")
    assert len(rows) == 2 * 2 * 2
    seen = set()
    for prompt, turns in rows:  # the error the model reads names the tools its rollout has: its environment's only
        errors = {t["error"] for t in json.loads(turns) if t["role"] == "tool"}
        if "th Fibonacci number." in prompt:
            seen.add("coding")
            assert errors == {"unknown tool 'add' (available: run_code)"}
        else:
            seen.add("game")
            assert "Reach the goal tile." in prompt and errors == {"unknown tool 'add' (available: move)"}
    assert seen == {"coding", "game"}


def test_with_a_dict_of_classes_a_row_naming_none_of_them_is_one_sentence_and_exit_2(tmp_path):
    out = _run(tmp_path, '[environment]\nclasses = { board = "env.py:Faulty" }\nargs = { board = { mode = "text" } }')
    assert out.returncode == Exit.MISTAKE, out.stdout[-2000:] + out.stderr[-2000:]
    assert "data.jsonl row 1: environment = None is not one of environment.classes ('board')" in out.stdout + out.stderr


def test_eval_runs_the_environments_episodes_and_reports_get_rewards_column(tmp_path):
    from tests.helpers.environments import write_game_run

    config = write_game_run(tmp_path / "run", 2)
    config.write_text(config.read_text() + "[eval]\nevery = 0\ngreedy = true\n")
    out = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(config), "--plain"],
                         capture_output=True, text=True, timeout=300, cwd=config.parent)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    evals = [line for line in out.stdout.splitlines() if line.startswith("eval at step")]
    assert len(evals) == 2 and all("| Game " in line and "4 prompts" in line for line in evals), evals


def test_check_says_an_environment_class_that_is_not_in_its_file(tmp_path):
    _run(tmp_path, '[environment]\nclass = "env.py:Faulty"')  # writes the run's files
    (tmp_path / "config.toml").write_text((tmp_path / "config.toml").read_text().replace("env.py:Faulty", "env.py:Missing"))
    out = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "check", str(tmp_path / "config.toml")],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == Exit.MISTAKE and out.stderr.count("\n") == 1
    assert "environment.class: " in out.stderr and "'Missing' is not a function in" in out.stderr


BUILDS = '''
import os


class Pooled:
    built = 0

    def __init__(self):
        Pooled.built += 1
        with open(os.environ["BUILDS_FILE"], "a") as f:
            f.write("built\\n")

    def reset(self, **row):
        return None

    def get_reward(self):
        return 1.0
'''


def test_instances_are_built_once_and_reset_for_each_episode_as_trl_pools_them(tmp_path):
    (tmp_path / "pooled.py").write_text(BUILDS)
    (tmp_path / "data.jsonl").write_text('{"prompt": "Go."}\n{"prompt": "Now."}\n')
    (tmp_path / "config.toml").write_text(f"""
[model]
path = "{AGENT}"
[data]
path = "data.jsonl"
[environment]
class = "pooled.py:Pooled"
[grpo]
group_size = 2
[generation]
max_completion_length = 8
[training]
batch_size = 2
max_steps = 3
silent_patience = 0
[checkpoint]
output_dir = "out"
""")
    import os

    out = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(tmp_path / "config.toml"), "--plain"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env={**os.environ, "BUILDS_FILE": str(tmp_path / "builds.txt")})
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert (tmp_path / "builds.txt").read_text().count("built") == 4  # the 4 rollouts of a step, for 3 steps


def test_with_a_dict_of_classes_an_eval_row_naming_none_of_them_is_refused_too(tmp_path):
    (tmp_path / "env.py").write_text(FAULTY)
    (tmp_path / "train.jsonl").write_text('{"prompt": "Go.", "environment": "board"}\n')
    (tmp_path / "eval.jsonl").write_text('{"prompt": "Go.", "environment": "chess"}\n')
    (tmp_path / "config.toml").write_text(f"""
[model]
path = "{AGENT}"
[data]
path = "train.jsonl"
eval_path = "eval.jsonl"
[environment]
classes = {{ board = "env.py:Faulty" }}
args = {{ board = {{ mode = "text" }} }}
[eval]
[checkpoint]
output_dir = "out"
""")
    out = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(tmp_path / "config.toml"), "--plain"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == Exit.MISTAKE, out.stdout[-2000:] + out.stderr[-2000:]
    assert "eval.jsonl row 1: environment = 'chess' is not one of environment.classes ('board')" in out.stdout + out.stderr
