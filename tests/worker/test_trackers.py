"""[logging] report_to through the real worker, read back with each tracker's own reader: TRL's
metric names under train/ and eval/, the mean over logging steps, the config as hyperparameters,
the completions table, and a resumed run continuing the same tracker run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.codec import decode_event
from grpo_tui.protocol.config import load_config
from grpo_tui.common.install_hint import pip_install
from grpo_tui.protocol.outcome import Mistake
from grpo_tui.worker import trackers
from tests.helpers.tracker_files import tensorboard_scalars, trackio_alerts, trackio_logs, wandb_history, wandb_records

ALL = '["wandb", "trackio", "tensorboard"]'


def worker(root, out, env, *sets):
    args = [sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(root / "examples" / "quickstart.toml"), "--plain",
            "--set", f"checkpoint.output_dir='{out}'", "--set", f"logging.report_to={ALL}", "--set", "logging.steps=2",
            "--set", "logging.log_completions=true", "--set", "eval.every=2", "--set", "eval.limit=8",
            "--set", "training.batch_size=2", "--set", "grpo.group_size=4"]
    for item in sets:
        args += ["--set", item]
    return subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)


def test_every_tracker_gets_trl_names_evals_config_and_completions_and_a_resume_continues(root, tmp_path, monkeypatch):
    import os

    out, tk = tmp_path / "out", tmp_path / "trackio"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "TRACKIO_DIR": str(tk)}
    done = worker(root, out, env, "training.max_steps=4", "eval.also_sampled=true")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    frames = [decode_event(line) for line in (out / "run.jsonl").read_bytes().splitlines()]
    steps = {e.step: e for e in frames if isinstance(e, m.Step)}
    mean_reward = {s: (steps[s - 1].reward + steps[s].reward) / 2 for s in (2, 4)}  # logging.steps = 2
    identity = json.loads((out / "trackers.json").read_text())

    # TensorBoard: its event reader
    acc, scalars = tensorboard_scalars(out / "tensorboard")
    assert [s for s, _ in scalars["train/reward"]] == [2, 4]
    assert [v for _, v in scalars["train/reward"]] == pytest.approx([mean_reward[2], mean_reward[4]], rel=1e-6)
    for name in ("train/loss", "train/reward_std", "train/rewards/accuracy/mean", "train/completions/mean_length",
                 "train/clip_ratio/low_mean", "train/entropy", "train/grad_norm", "train/learning_rate"):
        assert name in scalars, name
    assert [s for s, _ in scalars["eval/reward"]] == [0, 2, 4] and "eval/accuracy" in scalars
    # eval.also_sampled: the greedy pass keeps TRL's eval/ names, the sampled pass is eval_sampled/
    assert [s for s, _ in scalars["eval_sampled/accuracy"]] == [0, 2, 4]
    table = acc.Tensors("completions")
    assert [t.step for t in table] == [2, 4]
    text = table[0].tensor_proto.string_val[0].decode()
    assert text.startswith("| step | prompt | completion | accuracy | xml_format | advantage |")
    assert text.count("\n") == 1 + 2 * 4  # header rule + every completion of the step (2 prompts x 4)
    assert "_hparams_/session_start_info" in acc.Tags()["tensors"]

    # Trackio: its local database
    got = trackio_logs(tk, "grpo-tui", identity["name"])
    rows = [r for r in got["logs"] if "train/reward" in r]
    assert [r["step"] for r in rows] == [2, 4]
    assert [r["train/reward"] for r in rows] == pytest.approx([mean_reward[2], mean_reward[4]], rel=1e-6)
    assert [r["step"] for r in got["logs"] if "eval/reward" in r] == [0, 2, 4]
    tables = [r for r in got["logs"] if "completions" in r]
    assert len(tables) == 2 and len(tables[0]["completions"]["_value"]) == 8
    assert got["config"]["grpo"]["group_size"] == 4

    # W&B: the offline run file
    (run_dir,) = (out / "wandb").glob(f"offline-run-*-{identity['id']}")
    config, history = wandb_history(next(run_dir.glob("*.wandb")))
    assert config["grpo"]["group_size"] == 4 and config["training"]["learning_rate"] == 5e-5
    train = [h for h in history if "train/reward" in h]
    assert [h["_step"] for h in train] == [2, 4]
    assert [h["train/reward"] for h in train] == pytest.approx([mean_reward[2], mean_reward[4]], rel=1e-6)
    assert any(h.get("completions/_type") == "table-file" for h in history)

    # Resume: the same tracker run goes on
    done = worker(root, out, env, "training.max_steps=6")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads((out / "trackers.json").read_text()) == identity
    _, scalars = tensorboard_scalars(out / "tensorboard")
    assert [s for s, _ in scalars["train/reward"]] == [2, 4, 6]
    got = trackio_logs(tk, "grpo-tui", identity["name"])
    assert [r["step"] for r in got["logs"] if "train/reward" in r] == [2, 4, 6]
    runs = sorted((out / "wandb").glob(f"offline-run-*-{identity['id']}"))
    assert len(runs) == 2  # one id: `wandb sync` resumes it into one run
    _, history = wandb_history(next(runs[-1].glob("*.wandb")))
    assert [h["_step"] for h in history if "train/reward" in h] == [6]

    # A fresh start is a new tracker run
    done = worker(root, out, env, "training.max_steps=2", "checkpoint.resume=false", 'logging.report_to=["tensorboard"]')
    assert done.returncode == 0
    assert json.loads((out / "trackers.json").read_text())["id"] != identity["id"]


def test_a_tracker_that_is_not_installed_is_one_sentence_with_the_pip_command(root, tmp_path, monkeypatch):
    config = load_config(root / "examples" / "quickstart.toml", overrides=['logging.report_to=["trackio"]'])
    monkeypatch.setattr(trackers.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(Mistake) as err:
        trackers.check_installed(config)
    assert str(err.value) == f"logging.report_to names trackio, which is not installed: {pip_install('trackio')}"
    assert "pip install 'trackio>=" in str(err.value)  # the library itself, with grpo-tui's bound
    assert err.value.kind == "config"


def test_the_engine_imports_no_tracker_that_the_run_does_not_report_to():
    """Every worker's start: mlx-lm's LoRA tuner imports wandb and swanlab when they are installed (a
    second or more), so the engine imports the tuner only for a run that trains adapters."""
    code = "import sys, grpo_tui.worker.engine.trainer; print(sorted({'wandb', 'swanlab', 'trackio'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_the_worker_stops_before_loading_when_a_tracker_is_missing(root, tmp_path):
    import os

    (tmp_path / "hide").mkdir()
    (tmp_path / "hide" / "sitecustomize.py").write_text("import sys\nsys.modules['wandb'] = None  # not installed\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'hide'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        [sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(root / "examples" / "quickstart.toml"), "--plain",
         "--set", f"checkpoint.output_dir='{tmp_path / 'out'}'", "--set", 'logging.report_to=["wandb"]'],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 2  # a fixable mistake (protocol/outcome.py), never restarted
    assert f"logging.report_to names wandb, which is not installed: {pip_install('wandb')}" in done.stdout
    assert "steps/epoch" not in done.stdout  # it stopped before loading the model


@pytest.mark.slow
@pytest.mark.ranks
def test_with_two_ranks_only_rank_0_reports(root, tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(root / "examples" / "quickstart.toml"), "--plain",
         "--ranks", "2", "--set", "training.gradient_accumulation_steps=2", "--set", "training.max_steps=3",
         "--set", f"checkpoint.output_dir='{out}'", "--set", 'logging.report_to=["tensorboard"]',
         "--set", "eval.every=0", "--set", "eval.limit=8"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert len(list((out / "tensorboard").iterdir())) == 1  # one writer
    _, scalars = tensorboard_scalars(out / "tensorboard")
    assert [s for s, _ in scalars["train/reward"]] == [1, 2, 3]  # each step once


def test_a_live_change_reaches_every_tracker(root, tmp_path):
    """W&B: a config update and a logged event; TensorBoard: a text entry; Trackio: the new value."""
    import os

    from tests.helpers.worker_harness import WorkerProcess

    out, tk = tmp_path / "out", tmp_path / "trackio"
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "TRACKIO_DIR": str(tk)}
    worker = WorkerProcess(root / "examples" / "quickstart.toml", "--set", f"checkpoint.output_dir='{out}'",
                           "--set", f"logging.report_to={ALL}", "--set", "training.max_steps=3",
                           "--set", "training.batch_size=2", "--set", "grpo.group_size=2", env={**os.environ, **env})
    worker.wait_for(m.Step, lambda e: e.step == 1)
    worker.send(m.Pause())
    n = worker.wait_for(m.Paused).step
    worker.send(m.SetSetting(key="training.learning_rate", value="2e-5", source="cli"))
    worker.wait_for(m.SettingChanged)
    worker.send(m.Resume())
    worker.wait_for(m.Complete)
    assert worker.finish() == 0, worker.stderr.decode()[-3000:]
    identity = json.loads((out / "trackers.json").read_text())

    acc, _ = tensorboard_scalars(out / "tensorboard")
    [entry] = acc.Tensors("live_changes")
    assert entry.step == n + 1
    assert entry.tensor_proto.string_val[0].decode() == f"from step {n + 1}: training.learning_rate 5e-05 -> 2e-05 (cli)"

    got = trackio_logs(tk, "grpo-tui", identity["name"])
    assert [(r["step"], r["live/training.learning_rate"]) for r in got["logs"] if "live/training.learning_rate" in r] \
        == [(n + 1, 2e-5)]

    (run_dir,) = (out / "wandb").glob(f"offline-run-*-{identity['id']}")
    config, history = wandb_history(next(run_dir.glob("*.wandb")))
    assert config["training.learning_rate"] == 2e-5
    [event] = [h for h in history if "live_change" in h]
    assert event["_step"] == n + 1 and event["live_change"] == "training.learning_rate: 5e-05 -> 2e-05 (cli)"


def test_a_doctor_finding_is_an_alert_in_wandb_and_trackio_and_text_in_tensorboard(root, tmp_path):
    """Completions cut at 4 tokens: the truncation finding (critical) reaches every tracker the way
    each says such a thing: W&B's run.alert, Trackio's alert, TensorBoard's text under doctor."""
    import os

    from tests.helpers.worker_harness import WorkerProcess

    out, tk = tmp_path / "out", tmp_path / "trackio"
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "TRACKIO_DIR": str(tk)}
    worker = WorkerProcess(root / "examples" / "quickstart.toml", "--set", f"checkpoint.output_dir='{out}'",
                           "--set", f"logging.report_to={ALL}", "--set", "training.max_steps=3", "--set", "eval.every=0",
                           "--set", "training.batch_size=2", "--set", "grpo.group_size=2",
                           "--set", "generation.max_completion_length=4", "--set", "doctor.window=4",
                           env={**os.environ, **env})
    worker.wait_for(m.Complete)
    assert worker.finish() == 0, worker.stderr.decode()[-3000:]
    [finding] = [f for f in worker.of(m.Finding) if f.name == "truncation"]
    assert finding.severity == "critical"
    title = f"grpo-tui doctor: truncation (critical) at step {finding.step}"
    identity = json.loads((out / "trackers.json").read_text())

    acc, _ = tensorboard_scalars(out / "tensorboard")
    [entry] = [e for e in acc.Tensors("doctor") if title in e.tensor_proto.string_val[0].decode()]
    assert entry.step == finding.step
    assert "suggested live change: generation.max_completion_length=8" in entry.tensor_proto.string_val[0].decode()

    [alert] = [a for a in trackio_alerts(tk, "grpo-tui", identity["name"]) if a["title"] == title]
    assert alert["level"] == "error" and "max_completion_length" in alert["text"]

    (run_dir,) = (out / "wandb").glob(f"offline-run-*-{identity['id']}")
    [record] = [r for r in wandb_records(next(run_dir.glob("*.wandb"))) if r.WhichOneof("record_type") == "alert"
                and r.alert.title == title]
    assert record.alert.level == "ERROR" and "max_completion_length" in record.alert.text
