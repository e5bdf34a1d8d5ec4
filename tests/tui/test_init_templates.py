"""grpo-tui init TEMPLATE [DIR]: each template is written with the bundled tiny model and trains as
written (a few steps here), offline; a used folder or an unknown template is one line."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from grpo_tui.protocol.config import load_config


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=900)


@pytest.mark.parametrize("template", ["math", "json", "tools", "reasoning-gym"])
def test_each_template_trains_as_written_and_its_eval_rises(template, tmp_path):
    """As written: every step, ending 0, its held-out reward higher at the end than before the first step
    (on two quiet cores each takes well under a minute: bench/newcomer.sh times them)."""
    out = cli("init", template, str(tmp_path / template))
    assert out.returncode == 0, out.stderr
    assert f"grpo-tui run {tmp_path / template / 'config.toml'}" in out.stdout
    folder = tmp_path / template
    config_text = (folder / "config.toml").read_text()
    assert 'path = "Qwen/Qwen3-0.6B"' in config_text and "SWITCH" in config_text  # how to go to the hub
    assert (folder / "model" / "model.safetensors").is_file() and (folder / "rewards.py").is_file()
    config = load_config(folder / "config.toml")  # valid as written
    # named after its folder wherever the run goes (a run in `det` is "det" in ls, browse and its forks)
    assert load_config(folder / "config.toml", overrides=["checkpoint.output_dir=det"]).run_name == "det"
    run = cli("worker", str(folder / "config.toml"), "--plain", cwd=folder)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f"completed: {config.training.max_steps} steps" in run.stdout
    labels = [r.label for r in config.rewards]
    step_lines = [line for line in run.stdout.splitlines() if line.startswith("step ")]
    assert all(label in step_lines[0] for label in labels)
    evals = [float(re.search(r"\| reward (-?[\d.]+) \|", line).group(1))  # type: ignore[union-attr]
             for line in run.stdout.splitlines() if line.startswith("eval at step")]
    assert len(evals) >= 2 and evals[-1] > evals[0], evals


def test_hub_dataset_lines_are_real_settings(tmp_path):
    """The commented hub switch of the math template is a valid config once uncommented."""
    assert cli("init", "math", str(tmp_path / "m")).returncode == 0
    text = (tmp_path / "m" / "config.toml").read_text()
    for line in ('# path = "Qwen/Qwen3-0.6B"', '# path = "openai/gsm8k"', '# subset = "main"', '# eval_split = "test"'):
        assert line in text
        text = text.replace(line, line[2:])
    text = text.replace('path = "model"\n', "").replace('path = "data/train.jsonl"', "").replace(
        'eval_path = "data/eval.jsonl"\n', "")
    (tmp_path / "m" / "hub.toml").write_text(text)
    config = load_config(tmp_path / "m" / "hub.toml")  # hub ids need no local files
    assert (config.model.path, config.data.path, config.data.subset) == ("Qwen/Qwen3-0.6B", "openai/gsm8k", "main")


def test_a_used_folder_or_an_unknown_template_is_one_line(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    out = cli("init", "math", str(tmp_path / "busy"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "already exists and is not empty" in out.stderr and (tmp_path / "busy" / "notes.txt").read_text() == "mine"
    out = cli("init", "chess", str(tmp_path / "x"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and not (tmp_path / "x").exists()
    assert "no template 'chess': choose one of math, json, tools, reasoning-gym" in out.stderr
    out = cli("init", "json", cwd=tmp_path)  # DIR defaults to the template's name
    assert out.returncode == 0 and (tmp_path / "json" / "config.toml").is_file()
