"""Reward functions that misbehave: one clear error naming the function, or the configured skip.

First the engine's ``score`` on every kind of misbehaviour (fast), then the real worker on a tiny
model: a fatal ``error`` frame naming the function, the run marked crashed in the store, no rows
for the failed step, every checkpoint on disk still loadable.
"""

from __future__ import annotations

import time
from pathlib import Path

import mlx_lm
import pytest

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import RewardConfig
from grpo_tui.worker.engine.scoring.rewards import RewardError, RewardFailed, load_rewards, score
from tests.helpers.worker_harness import WorkerProcess, query, tiny_model, write_config

__all__ = ["tiny_model"]

BAD_REWARDS = '''
import asyncio, math, os, sys, time

CALLS = 0

def _late(fail):
    """Good scores until call FAIL_AT_CALL (so a run has a few good steps first), then ``fail``."""
    def fn(prompts, completions, **kw):
        global CALLS
        CALLS += 1
        if CALLS >= int(os.environ.get("FAIL_AT_CALL", "1")):
            return fail(completions)
        return [len(set(c)) / 10 for c in completions]
    fn.__name__ = fail.__name__
    return fn

def _raise(c): raise ValueError("the reward service is down")
def _hang(c): time.sleep(60)
def _short(c): return [1.0]
def _nan(c): return [math.nan] * len(c)
def _inf(c): return [math.inf] * len(c)
def _string(c): return "0.5"
def _strings(c): return ["0.5"] * len(c)
def _none(c): return None
def _generator(c): return (1.0 for _ in c)
def _exit(c): sys.exit(3)
def _interrupt(c): raise KeyboardInterrupt
def _recursion(c): return _recursion(c)
def _huge_int(c): return [10 ** 400] * len(c)
class _Unprintable(Exception):
    def __str__(self): raise RuntimeError("even str() fails")
def _unprintable(c): raise _Unprintable()

raises, hangs, short, nan, inf, string, strings, none, generator = map(
    _late, [_raise, _hang, _short, _nan, _inf, _string, _strings, _none, _generator])
exits, interrupt, recursion, huge_int, unprintable = map(_late, [_exit, _interrupt, _recursion, _huge_int, _unprintable])

async def async_hangs(prompts, completions, **kw):
    await asyncio.sleep(60)
'''

# function -> words the error must contain (besides the function's name; {path} is the file). Every
# one is the user's to fix: a mistake (exit 2, never restarted).
KINDS = {
    "raises": "raised ValueError: the reward service is down at {path}:17",
    "hangs": "did not return within timeout_s = 0.5 s (it was at {path}:18)",
    "async_hangs": "did not return within timeout_s = 0.5 s (it was at {path}:38)",
    "short": "returned 1 scores for 2 completions; return one number (or None) per completion",
    "inf": "returned inf for completion 0; return finite numbers (or None)",
    "string": "returned a str, not a list of 2 numbers (one per completion)",
    "strings": "returned '0.5' for completion 0; return numbers (or None), not str",
    "none": "returned a NoneType, not a list of 2 numbers",
    "generator": "returned a generator, not a list of 2 numbers",
    "exits": "called sys.exit(3) at {path}:26, which would end the run",  # used to kill the worker without a word
    "interrupt": "raised KeyboardInterrupt at {path}:27",
    "recursion": "raised RecursionError: maximum recursion depth exceeded at {path}:28",
    "huge_int": "returned an integer of 401 digits for completion 0, which overflows float32",
    "unprintable": "raised _Unprintable at {path}:32",  # used to escape as the RuntimeError from its __str__
}
# Raised, hung or exited inside the user's function: a mistake (RewardFailed) whose sentence names
# the function, the user's line and on_error; the rest returned what is not one number per completion.
FAILS = {"raises", "hangs", "async_hangs", "exits", "interrupt", "recursion", "unprintable"}
ON_ERROR = 'fix it, or set on_error = "skip" in its [[rewards]] table if it may fail now and then'



def write_rewards(folder: Path) -> Path:
    path = folder / "bad_rewards.py"
    path.write_text(BAD_REWARDS)
    return path


def configs(path: Path, name: str, **fields) -> list[RewardConfig]:
    return [RewardConfig(function=f"{path}:{name}", timeout_s=0.5, **fields), RewardConfig(name="length")]


def call(rewards, warn=lambda message: None):
    extras = {"num_tokens": [2, 4], "max_completion_length": 8}
    return score(rewards, ["p", "q"], ["ab", "abcd"], {"answer": ["1", "2"]}, extras, warn)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_bad_reward_is_one_error_naming_it(tmp_path, name):
    rewards = load_rewards(configs(write_rewards(tmp_path), name))
    start = time.monotonic()
    with pytest.raises(RewardFailed if name in FAILS else RewardError) as info:
        call(rewards)
    message = str(info.value)
    assert f"reward function {name!r} {KINDS[name].format(path=tmp_path / 'bad_rewards.py')}" in message, message
    assert "\n" not in message
    if name in FAILS and "hang" not in name:
        assert message.endswith(ON_ERROR + " (a failed call then scores None and the run goes on)")
    assert time.monotonic() - start < 5  # a hung function costs its timeout, not the run


def test_nan_is_none_and_an_array_is_a_list_as_in_trl(tmp_path):
    """TRL reads NaN as "not applicable" (None) and takes a numpy array of scores."""
    path = tmp_path / "array_rewards.py"
    path.write_text("import numpy as np\n\ndef arr(completions, **kw):\n"
                    "    return np.array([np.nan, 2.0], dtype=np.float32)\n\n"
                    "def nan(completions, **kw):\n    return [float('nan'), np.float64(1.5)]\n")
    rewards = load_rewards([RewardConfig(function=f"{path}:arr"), RewardConfig(function=f"{path}:nan")])
    totals, per_fn = call(rewards)
    assert per_fn == {"arr": [None, 2.0], "nan": [None, 1.5]} and totals == [None, 3.5]


@pytest.mark.parametrize("name", sorted(KINDS))
def test_on_error_skip_scores_none_and_warns_once(tmp_path, name):
    rewards = load_rewards(configs(write_rewards(tmp_path), name, on_error="skip"))
    warnings: list[str] = []
    totals, per_fn = call(rewards, warnings.append)
    assert per_fn[name] == [None, None]
    assert per_fn["length"] == [0.75, 0.5] and totals == [0.75, 0.5]  # the other function still counts
    assert len(warnings) == 1 and name in warnings[0] and "on_error = skip" in warnings[0]


@pytest.mark.parametrize(
    "body, words",
    [
        # a syntax error names its line: the file is compiled before it is imported
        ("def f(prompts, completions:\n", ["broken_rewards.py, line 1: syntax error ('(' was never closed); fix that line"]),
        ("raise RuntimeError('no API key')\n", ["cannot import", "RuntimeError: no API key"]),
        ("import no_such_module_for_rewards\n", ["cannot import", "ModuleNotFoundError"]),
    ],
)
def test_a_reward_file_that_does_not_import_is_a_reward_error(tmp_path, body, words):
    path = tmp_path / "broken_rewards.py"
    path.write_text(body)
    with pytest.raises(RewardError) as info:
        load_rewards([RewardConfig(function=f"{path}:f")])
    assert f"{path}:f" in str(info.value) and all(w in str(info.value) for w in words), str(info.value)


# ------------------------------------------------------------------ through the real worker


def reward_table(path: Path, name: str, on_error: str = "raise") -> str:
    return f'[[rewards]]\nfunction = "{path}:{name}"\ntimeout_s = 0.5\non_error = "{on_error}"\n'


@pytest.mark.slow
@pytest.mark.parametrize("name", ["raises", "hangs", "inf", "exits"])
def test_a_bad_reward_stops_the_worker_cleanly(tmp_path, tiny_model, name):
    rewards = reward_table(write_rewards(tmp_path), name)
    config = write_config(tmp_path, tiny_model, rewards=rewards, checkpoint={"save_every": 1, "keep_last": 0})
    worker = WorkerProcess(config, env={"FAIL_AT_CALL": "3"})  # steps 1 and 2 are fine, step 3 fails
    error = worker.wait_for(m.Error)
    assert worker.finish() == 2, worker.stderr.decode()[-3000:]  # the user's to fix, never restarted
    assert error.fatal and name in error.message and KINDS[name].format(path=tmp_path / "bad_rewards.py") in error.message
    assert error.exit_code == 2 and error.kind == "reward"
    assert worker.bad_lines == [] and not worker.of(m.Complete)

    db = tmp_path / "out" / "outputs.db"
    assert query(db, "SELECT status, ended_at IS NOT NULL FROM runs") == [("stopped", 1)]
    assert query(db, "SELECT step FROM steps ORDER BY step") == [(1,), (2,)]
    assert query(db, "SELECT DISTINCT step FROM generations ORDER BY step") == [(1,), (2,)]
    assert query(db, "SELECT count(*) FROM logs WHERE level = 'error' AND message LIKE ?", f"%{name}%") == [(1,)]
    folders = sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir())
    assert folders == ["checkpoint-1", "checkpoint-2"]  # nothing half-written, no checkpoint of step 3
    for folder in folders:
        assert mlx_lm.load(str(tmp_path / "out" / folder))[0] is not None


@pytest.mark.slow
def test_on_error_skip_through_the_worker_finishes_and_stores_none(tmp_path, tiny_model):
    path = write_rewards(tmp_path)
    rewards = reward_table(path, "string", on_error="skip") + '[[rewards]]\nname = "length"\n'
    config = write_config(tmp_path, tiny_model, rewards=rewards)
    worker = WorkerProcess(config, env={"FAIL_AT_CALL": "3"})
    worker.wait_for(m.Complete)
    assert worker.finish() == 0, worker.stderr.decode()[-3000:]
    db = tmp_path / "out" / "outputs.db"
    assert query(db, "SELECT status FROM runs") == [("completed",)]
    details = query(db, "SELECT step, json_extract(reward_details, '$.string') FROM generations ORDER BY step")
    assert len(details) == 4 * 2 * 2
    assert all(d is not None for s, d in details if s <= 2)
    assert all(d is None for s, d in details if s >= 3)  # call 3 is step 3's scoring: skipped from then on
    warnings = query(db, "SELECT step FROM logs WHERE level = 'warning' AND message LIKE '%string%on_error = skip%'")
    assert len(warnings) == 2  # one warning per skipped step (3 and 4)
