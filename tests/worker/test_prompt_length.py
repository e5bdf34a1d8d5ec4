"""Prompts longer than the model's context: cut from the left with ``generation.max_prompt_length``
(TRL's), counted per step and logged once; without it, refused at load in one sentence. Never a
signal, never memory that grows with the input (prompts of 50x the context)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.codec import decode_event
from tests.helpers.worker_harness import ROOT, WorkerProcess, tiny_model, write_config

__all__ = ["tiny_model"]

CONTEXT = 1024  # the tiny model's max_position_embeddings (one token per byte)
LONG = "What is 1+1? " * 4000  # 52,000 tokens: 50x the context


def _long_rows(path: Path, short: int = 0) -> str:
    rows = [{"prompt": LONG + f"row {i}", "answer": "2"} for i in range(8 - short)]
    rows += [{"prompt": "What is 2+2?", "answer": "4"} for _ in range(short)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _run(config: Path) -> tuple[int, list[m.Event], int]:
    """The worker to its end: (exit status, its frames, its peak resident memory in MB)."""
    out = config.parent / "frames.bin"
    with open(out, "wb") as stdout, open(config.parent / "stderr.txt", "wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "grpo_tui.worker", str(config)], stdin=subprocess.PIPE,
                                stdout=stdout, stderr=stderr, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        assert proc.stdin is not None
        proc.stdin.close()
    return proc.returncode, [decode_event(line) for line in out.read_bytes().splitlines()], usage.ru_maxrss // 1024


def test_prompts_of_fifty_times_the_context_are_refused_at_load_in_one_sentence(tmp_path, tiny_model):
    data = _long_rows(tmp_path / "long.jsonl")
    config = write_config(tmp_path, tiny_model, data={"path": data})
    rc, events, peak_mb = _run(config)
    assert 0 < rc < 128, rc  # refused, not killed by a signal (before: exit 139, or the OOM killer)
    assert not [e for e in events if isinstance(e, (m.Step, m.Sample))]  # before any rollout
    (error,) = [e for e in events if isinstance(e, m.Error) and e.fatal]
    assert "long.jsonl row 1: its prompt is 52," in error.message
    assert f"does not fit in the model's context of {CONTEXT:,} tokens" in error.message
    assert f"set generation.max_prompt_length = {CONTEXT - 8}" in error.message
    # Bounded, far below what it was (6 GB and climbing, or the OOM killer). wait4's peak also
    # counts the worker's finished children: 3.2 GB in a clean-clone CI run, under 2.5 GB here.
    assert peak_mb < 4000, peak_mb


def test_max_prompt_length_cuts_from_the_left_counts_per_step_and_says_so_once(tmp_path, tiny_model):
    data = _long_rows(tmp_path / "long.jsonl", short=4)  # rows 1-4 long, 5-8 short
    config = write_config(tmp_path, tiny_model, data={"path": data, "shuffle": False},
                          generation={"max_completion_length": 8, "max_prompt_length": 200},
                          training={"max_steps": 4}, checkpoint={"save_every": 0})
    worker = WorkerProcess(config)
    worker.wait_for(m.Complete, timeout=300)
    assert worker.finish() == 0
    steps = worker.of(m.Step)
    assert [s.extra_metrics["prompts_truncated"] for s in steps] == [2.0, 2.0, 0.0, 0.0]  # batch 2, in order
    said = [e.message for e in worker.of(m.Log) if "max_prompt_length" in e.message]
    assert len(said) == 1 and "4 of the 8 prompts" in said[0] and "cut from the left" in said[0]
    first = [s for s in worker.of(m.Sample) if s.step == 1][0]
    # the end is kept (the row's own words and the generation prompt); 200 tokens: a byte each, but
    # the template's special tokens
    assert "row 0<|im_end|>\n<|im_start|>assistant\n" in first.prompt and len(first.prompt) < 260
