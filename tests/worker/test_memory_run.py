"""The memory switches through the real worker process: a run with all of them on trains, and the
engine log line says what runs."""

from __future__ import annotations

import math

import mlx_lm
import pytest

from grpo_tui.protocol import messages as m
from tests.worker_harness import WorkerProcess, tiny_model, write_config

__all__ = ["tiny_model"]  # the fixture, imported for pytest

SWITCHES = {"gradient_checkpointing": True, "vocab_chunk_size": 5, "logprob_batch_size": 1}


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_run_with_every_memory_switch_trains(tmp_path, tiny_model, lora):
    adapters = {"model.lora": {"rank": 4, "layers": -1}} if lora else {}
    config = write_config(tmp_path, tiny_model, grpo={"group_size": 3, "beta": 0.05},
                          training={"max_steps": 2, "batch_size": 2} | SWITCHES, **adapters)
    worker = WorkerProcess(config)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0
    engine = [log.message for log in worker.of(m.Log) if log.message.startswith("engine:")]
    assert len(engine) == 1
    for words in ("gradient checkpointing", "chunks of 5 positions", "at most 1 completions"):
        assert words in engine[0]
    assert "compiled loss" not in engine[0] and "evaluation order width" not in engine[0]
    steps = worker.of(m.Step)
    assert [s.step for s in steps] == [1, 2]
    assert all(math.isfinite(s.loss) and s.gradients_applied and s.peak_memory_mb > 0 for s in steps)
    final = tmp_path / "out" / "final"
    assert mlx_lm.load(str(tiny_model), adapter_path=str(final))[0] if lora else mlx_lm.load(str(final))[0]
