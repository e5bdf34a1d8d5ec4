"""The memory switches through the real worker process: a run with all of them on trains, and the
engine log line says what runs."""

from __future__ import annotations

import math
import re
from pathlib import Path

import mlx_lm
import pytest

from grpo_tui.protocol import messages as m
from grpo_tui.worker.engine.models import memory_fit
from tests.helpers.worker_harness import WorkerProcess, tiny_model, write_config

__all__ = ["tiny_model"]  # the fixture, imported for pytest

SWITCHES = {"gradient_checkpointing": True, "vocab_chunk_size": 5, "logprob_batch_size": 1}


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_run_with_every_memory_switch_trains(tmp_path, tiny_model, lora, monkeypatch):
    monkeypatch.delenv("MLX_BFS_MAX_WIDTH", raising=False)  # an in-process Trainer of another test set it
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


def _peak_resident_gb(pid: int) -> float:
    """The process's peak resident memory so far (the kernel's ``VmHWM``), GB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) * 1024 / 1e9


# Above the tiny run's peak resident memory (the worker's whole process), below what the estimate
# used to say (a fixed 1 GB for the process alone): the 2.5 GB budget that fits, shrunk.
FITTING_BUDGET_GB = 0.4


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the worker's peak from /proc")
def test_a_budget_the_default_step_fits_in_is_accepted_with_no_switch(tmp_path, tiny_model, monkeypatch):
    monkeypatch.delenv("MLX_BFS_MAX_WIDTH", raising=False)
    config = write_config(tmp_path, tiny_model, training={"max_steps": 1, "memory_limit_gb": FITTING_BUDGET_GB})
    worker = WorkerProcess(config)
    worker.wait_for(m.Complete)
    peak = _peak_resident_gb(worker.proc.pid)
    assert worker.finish() == 0
    assert peak < FITTING_BUDGET_GB  # the step really fits the budget...
    messages = [log.message for log in worker.of(m.Log)]
    chosen = [t for t in messages if t.startswith("memory_limit_gb")]
    # ... and the worker runs it as it is: no switch, said once
    assert len(chosen) == 1 and chosen[0].startswith(f"memory_limit_gb = {FITTING_BUDGET_GB:g}: no memory switch"), chosen
    estimate = float(re.search(r"a step is estimated at ([0-9.]+) GB", chosen[0]).group(1))
    assert estimate <= FITTING_BUDGET_GB
    # MLX's own limit, read back from MLX in the worker: the budget less the process's own allowance
    allowance = FITTING_BUDGET_GB - memory_fit.evaluation_limit(FITTING_BUDGET_GB) / memory_fit.GB
    assert 0.05 <= allowance <= 0.4
    assert chosen[0].endswith(f"MLX's evaluation waits for queued work past "
                              f"{memory_fit.evaluation_limit(FITTING_BUDGET_GB) / memory_fit.GB:.1f} GB of arrays")
    engine = next(text for text in messages if text.startswith("engine:"))
    assert "evaluation order width" not in engine and "compiled loss" not in engine
    assert not any(words in engine for words in ("gradient checkpointing", "chunks of", "log-prob/loss passes"))
    assert len(worker.of(m.Step)) == 1


def test_an_absurd_memory_limit_stops_before_the_first_step_in_one_sentence(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, training={"memory_limit_gb": 0.001})
    worker = WorkerProcess(config)
    assert worker.finish() != 0
    errors = worker.of(m.Error)
    assert len(errors) == 1 and errors[0].fatal and not worker.of(m.Step)
    message = errors[0].message
    assert message.startswith("training.memory_limit_gb: 0.001 GB is too little for this model: ")
    assert message.count(". ") == 0 and "\n" not in message and "ConfigError" not in message
    need = re.search(r"the smallest budget that works is memory_limit_gb = ([0-9.]+)$", message)
    assert need is not None, message
    # ... and the budget it names is accepted
    again = WorkerProcess(config, "--set", f"training.memory_limit_gb={need.group(1)}", "--set", "training.max_steps=1")
    again.wait_for(m.Complete)
    assert again.finish() == 0 and len(again.of(m.Step)) == 1


def test_the_fused_head_runs_in_the_worker_and_measures_what_mlx_s_ops_do(tmp_path, tiny_model):
    """An eager loss without the numpy log-softmax (here: the compiled loss off) gets the fused head:
    the engine line says so, the run trains and saves a model mlx-lm loads, and the first step (same
    weights, same seed, so the same rollout) has the loss and entropy of MLX's own ops (the switch
    off). Equal gradients: tests/worker/engine/test_memory_switches.py."""
    first = {}
    for fused in ("1", "0"):
        out = tmp_path / fused
        out.mkdir()
        config = write_config(out, tiny_model, grpo={"group_size": 3, "beta": 0.05},
                              training={"max_steps": 2, "batch_size": 2})
        worker = WorkerProcess(config, env={"GRPO_TUI_COMPILED_LOSS": "0", "GRPO_TUI_FUSED_HEAD": fused})
        worker.wait_for(m.Complete)
        assert worker.finish() == 0
        engine = next(log.message for log in worker.of(m.Log) if log.message.startswith("engine:"))
        assert ("LM head and log-softmax fused" in engine) == (fused == "1")
        steps = worker.of(m.Step)
        assert [s.step for s in steps] == [1, 2] and all(math.isfinite(s.loss) and s.gradients_applied for s in steps)
        first[fused] = (steps[0].loss, steps[0].entropy)
        assert mlx_lm.load(str(out / "out" / "final"))[0]
    assert first["1"][1] > 1.0  # a random tiny model: the metric is really computed
    assert first["1"] == pytest.approx(first["0"], rel=1e-5, abs=1e-7)
