"""Drive a real worker process over real pipes: write a run folder, start
``python -m grpo_tui.worker``, send commands, read decoded frames."""

from __future__ import annotations

import json
import os
import queue
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.codec import decode_event, encode

ROOT = Path(__file__).resolve().parents[2]

@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen3 folder that mlx_lm.load opens (built once per test session)."""
    from tests.helpers.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


def query(db: Path, sql: str, *args: Any) -> list[tuple]:
    """Read the store the way the dashboard does: read-only."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


PROMPTS = [f"What is {a} + {b}?" for a, b in [(1, 2), (3, 4), (5, 1), (2, 2), (7, 1), (4, 4), (6, 3), (9, 0)]]


def write_dataset(path: Path) -> Path:
    rows = [{"prompt": p, "answer": str(eval(p[8:-1]))} for p in PROMPTS]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_config(folder: Path, model: Path, *, rewards: str | None = None, **sections: dict[str, Any]) -> Path:
    """A small run in ``folder``: 8 prompts, batch 2, group 2, 8-token completions, save every 2."""
    data = write_dataset(folder / "data.jsonl")
    values: dict[str, dict[str, Any]] = {
        "model": {"path": str(model)},
        "data": {"path": str(data), "seed": 0},
        "grpo": {"group_size": 2},
        "generation": {"max_completion_length": 8},
        "training": {"batch_size": 2, "learning_rate": 1e-2, "max_steps": 4, "seed": 0},
        "checkpoint": {"output_dir": str(folder / "out"), "save_every": 2, "keep_last": 2},
        "display": {"sample_display": "best_worst"},
    }
    for section, overrides in sections.items():
        values.setdefault(section, {}).update(overrides)
    text = rewards or '[[rewards]]\nname = "length"\n'
    for section, table in values.items():
        text += f"\n[{section}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in table.items())
    path = folder / "config.toml"
    path.write_text(text)
    return path


class WorkerProcess:
    """A worker subprocess; frames are decoded on a reader thread into ``events``."""

    def __init__(self, config: Path, *args: str, env: dict[str, str] | None = None) -> None:
        full_env = {**os.environ, **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "grpo_tui.worker", str(config), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, cwd=ROOT,
        )  # fmt: skip
        self.events: list[m.Event] = []
        self.bad_lines: list[bytes] = []
        self.stderr = b""
        self._queue: queue.Queue[m.Event | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = decode_event(line)
            except ValueError:
                self.bad_lines.append(line)
                continue
            self.events.append(event)
            self._queue.put(event)
        self._queue.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr += line

    def send(self, command: m.Command | bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command if isinstance(command, bytes) else encode(command))
        self.proc.stdin.flush()

    def wait_for(
        self, kind: type, predicate: Callable[[Any], bool] = lambda e: True, timeout: float = 120
    ) -> Any:
        """The next event of ``kind`` matching ``predicate`` (events before it are kept in ``events``)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                event = self._queue.get(timeout=max(left, 0.01))
            except queue.Empty:
                stderr = self.stderr.decode()[-3000:]
                raise AssertionError(f"no {kind.__name__} within {timeout}s; stderr:\n{stderr}") from None
            if event is None:
                raise AssertionError(
                    f"worker exited (rc={self.proc.wait()}) before {kind.__name__}; stderr:\n{self.stderr.decode()[-3000:]}"
                )
            if isinstance(event, kind) and predicate(event):
                return event

    def finish(self, timeout: float = 120) -> int:
        """Close stdin only if asked elsewhere; wait for exit and the reader to drain."""
        rc = self.proc.wait(timeout=timeout)
        while self._queue.get(timeout=10) is not None:
            pass
        return rc

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


REWARDS_PY = '''
import os, time

def varied(prompts, completions, **columns):
    """Differs between completions, so advantages (and updates) are non-zero."""
    return [len(set(c)) / 10 for c in completions]

def noisy(prompts, completions, **columns):
    print("a reward function printing to stdout")
    os.write(1, b"raw bytes written straight to fd 1\\n")
    return [len(c) % 3 / 2 for c in completions]

SLOW_CALLS = 0

def slow(prompts, completions, **columns):
    global SLOW_CALLS
    SLOW_CALLS += 1
    if int(os.environ.get("SLOW_FROM_CALL", "1")) <= SLOW_CALLS <= int(os.environ.get("SLOW_UNTIL_CALL", "1000000")):
        time.sleep(float(os.environ.get("SLOW_REWARD_S", "0.3")))
    return varied(prompts, completions)

CALLS = 0

def boom(prompts, completions, **columns):
    global CALLS
    CALLS += 1
    if CALLS == int(os.environ.get("BOOM_AT_CALL", "3")):
        raise ValueError("boom: the reward service is down")
    return varied(prompts, completions)
'''


def reward_config(folder: Path, *names: str) -> str:
    """[[rewards]] tables for functions of REWARDS_PY (written to ``folder/rewards.py``)."""
    (folder / "rewards.py").write_text(REWARDS_PY)
    return "".join(f'[[rewards]]\nfunction = "{folder / "rewards.py"}:{n}"\n' for n in names)


FAULTY_TRAINER = f"{Path(__file__).with_name('fake_trainer.py')}:FaultyTrainer"


TOOL_CALL_TEXT = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
SECOND_CALL_TEXT = '<tool_call>{"name": "add", "arguments": {"a": 3, "b": 4}}</tool_call>'
PLAIN_TEXT = "<plain>"  # a prompt that ends with this token gets it again and again, never a call


def build_tool_calling_model(directory: Path, calls_per_turn: int = 1) -> Path:
    """A tiny real Qwen3 whose every assistant turn is ``TOOL_CALL_TEXT`` (then, with
    ``calls_per_turn=2``, ``SECOND_CALL_TEXT``) and its end-of-turn token ``<|im_end|>``: one added
    token carries each call's text, and the blocks are zeroed, so the residual stream is the input
    embedding and the next token depends on the last one only. The tied embeddings make the choice:
    every hidden state leans along dimension 0, where the first call's token points most; that
    token's state along dimension 1, where the next token (the second call, or the end of turn)
    points further; the second call's along dimension 2, where the end of turn points further.
    ``PLAIN_TEXT``'s state points along dimension 3, where only that token points: a row whose
    prompt ends with it repeats it and never calls a tool."""
    import mlx.core as mx
    from tokenizers import Tokenizer

    from tests.helpers.tiny_model import build_tiny_model

    build_tiny_model(directory)
    tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tok.add_tokens([TOOL_CALL_TEXT, SECOND_CALL_TEXT, PLAIN_TEXT])
    tok.save(str(directory / "tokenizer.json"))
    first, second, plain, end = (tok.token_to_id(t) for t in (TOOL_CALL_TEXT, SECOND_CALL_TEXT, PLAIN_TEXT, "<|im_end|>"))
    config = json.loads((directory / "config.json").read_text())
    config["vocab_size"] = tok.get_vocab_size()
    (directory / "config.json").write_text(json.dumps(config))

    weights = mx.load(str(directory / "model.safetensors"))
    for name, value in weights.items():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            weights[name] = mx.zeros_like(value)  # every block adds nothing to the residual
        elif name == "model.norm.weight":
            weights[name] = mx.ones_like(value)  # the final norm keeps the direction
    embed = weights["model.embed_tokens.weight"] * 0.01
    embed = mx.concatenate([embed, mx.zeros((config["vocab_size"] - embed.shape[0], embed.shape[1]))])
    embed[:, 0] = 1.0
    for token in (first, second, plain, end):
        embed[token] = 0.0
    embed[plain, 3] = 60.0
    embed[first, 0], embed[first, 1] = 40.0, 40.0  # after any other token: the first call
    if calls_per_turn == 2:
        embed[second, 1], embed[second, 2] = 100.0, 100.0  # after the first call: the second
        embed[end, 2] = 250.0  # after the second: the end of the turn
    else:
        embed[end, 1] = 100.0  # after the call: the end of the turn
    weights["model.embed_tokens.weight"] = embed
    mx.save_safetensors(str(directory / "model.safetensors"), weights)
    return directory
