"""Runs that would "complete" while learning nothing stop at load, before any rollout, with one
sentence: a built-in reward's column missing, ``data.answer_column`` naming no column, a chat
message with a role the template was never meant to see."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.outcome import Exit
from tests.helpers.worker_harness import WorkerProcess, tiny_model, write_config

__all__ = ["tiny_model"]


def _rows(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _refused(config: Path) -> str:
    worker = WorkerProcess(config)
    rc = worker.finish()
    assert rc in (Exit.MISTAKE, Exit.CRASH) and rc != 0  # 2 once the mistake reporting lands (issue 31)
    assert worker.of(m.Step) == [] and worker.of(m.Sample) == []  # nothing trained, nothing generated
    (error,) = [e for e in worker.of(m.Error) if e.fatal]
    return error.message


SOLUTIONS = [{"prompt": f"What is {a} + 1?", "solution": str(a + 1)} for a in range(8)]


def test_accuracy_without_an_answer_column_is_refused_at_load(tmp_path, tiny_model):
    data = _rows(tmp_path / "solutions.jsonl", SOLUTIONS)
    config = write_config(tmp_path, tiny_model, rewards='[[rewards]]\nname = "accuracy"\n', data={"path": data})
    message = _refused(config)
    assert "'accuracy' reward compares completions with the 'answer' column" in message
    assert "solutions.jsonl" in message and "'solution'" in message and "data.answer_column" in message


def test_an_answer_column_that_no_row_has_is_refused_at_load(tmp_path, tiny_model):
    data = _rows(tmp_path / "answers.jsonl", [{"prompt": "What is 1 + 1?", "answer": "2"}] * 8)
    config = write_config(tmp_path, tiny_model, data={"path": data, "answer_column": "solution"})
    message = _refused(config)
    assert "data.answer_column = 'solution', but no row of" in message and "'answer'" in message


def test_answer_column_aliases_the_column_accuracy_reads(tmp_path, tiny_model):
    data = _rows(tmp_path / "solutions.jsonl", SOLUTIONS)
    config = write_config(tmp_path, tiny_model, rewards='[[rewards]]\nname = "accuracy"\n',
                          data={"path": data, "answer_column": "solution"}, training={"max_steps": 1})
    worker = WorkerProcess(config)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0
    (step,) = worker.of(m.Step)
    assert step.rewards["accuracy"] is not None  # scored against the solutions, not None


@pytest.mark.parametrize("role", ["wizard", "User"])
def test_an_unknown_chat_role_is_refused_at_load(tmp_path, tiny_model, role):
    rows = [{"prompt": [{"role": "user", "content": "hi"}], "answer": "1"}] * 3
    rows.append({"prompt": [{"role": "system", "content": "be brief"}, {"role": role, "content": "hi"}], "answer": "1"})
    data = _rows(tmp_path / "chat.jsonl", rows)
    config = write_config(tmp_path, tiny_model, data={"path": data})
    message = _refused(config)
    assert f"message 1 of column 'prompt' has the role {role!r}" in message
    assert "chat.jsonl:4:" in message and "system, user, assistant, tool" in message
