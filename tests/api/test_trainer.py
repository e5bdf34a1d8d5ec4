"""GRPOTrainer runs the real worker: functions from the caller (closures, lambdas, tools) score and
act there, log_history has TRL's names, save_model loads, resume_from_checkpoint continues."""

from __future__ import annotations

import json

import datasets
import mlx_lm
import pytest

from grpo_tui import GRPOConfig, GRPOTrainer, TrainingError
from tests.helpers.worker_harness import build_tool_calling_model


@pytest.fixture
def rows(root):
    lines = (root / "examples" / "data" / "arith.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines[:32]]


def quick_args(tmp_path, **kw):
    base = dict(output_dir=str(tmp_path / "run"), max_steps=4, learning_rate=5e-5, num_generations=4,
                max_completion_length=16, save_steps=2, logging_steps=1, gradient_checkpointing=False,
                lr_scheduler_type="constant", extra={"training": {"batch_size": 4}})
    return GRPOConfig(**{**base, **kw})


def test_closures_and_lambdas_score_in_the_worker_and_log_history_has_trl_names(root, tmp_path, rows):
    seen_weight = 0.5  # a local the closure reads: pickled by value

    def exact(completions, answer, **kwargs):
        return [seen_weight * float(a in c) + 1.0 for c, a in zip(completions, answer)]

    trainer = GRPOTrainer(
        model=str(root / "examples" / "models" / "tiny-arith"),
        reward_funcs=[exact, "xml_format", lambda completions, **k: [0.25] * len(completions)],
        args=quick_args(tmp_path, logging_steps=2, eval_steps=2, reward_weights=[1.0, 0.0, 1.0]),
        train_dataset=datasets.Dataset.from_list(rows), eval_dataset=rows[:8],
    )
    out = trainer.train()
    assert out.global_step == 4 and trainer.state.global_step == 4 and trainer.state.max_steps == 4
    history = trainer.state.log_history
    train = [e for e in history if "reward" in e]
    assert [e["step"] for e in train] == [2, 4]  # logging_steps = 2
    for entry in train:
        assert 1.0 <= entry["rewards/exact/mean"] <= 1.5 and entry["rewards/reward_2/mean"] == 0.25
        assert entry["reward"] == pytest.approx(entry["rewards/exact/mean"] + 0.25)  # weight 0 on xml_format
        for name in ("loss", "reward_std", "completions/mean_length", "clip_ratio/low_mean", "entropy", "epoch"):
            assert name in entry
    evals = [e for e in history if "eval_reward" in e]
    assert [e["step"] for e in evals] == [0, 2, 4] and all("eval_rewards/exact/mean" in e for e in evals)
    assert "train_runtime" in history[-1] and out.training_loss == pytest.approx(history[-1]["train_loss"])

    saved = trainer.save_model(tmp_path / "model")
    assert not (saved / "optimizer.safetensors").exists()
    assert mlx_lm.load(str(saved))[0] is not None
    # the run's config is a plain TOML file the CLI takes
    assert "rewards.pkl:exact" in (tmp_path / "run" / "config.toml").read_text()

    # resume_from_checkpoint=True continues from final/ (step 4) to the new max_steps
    trainer.args.max_steps = 6
    trainer.train(resume_from_checkpoint=True)
    assert trainer.state.global_step == 6
    assert [e["step"] for e in trainer.state.log_history if "reward" in e][-1:] == [6]


def test_a_closure_tool_runs_in_the_worker(tmp_path):
    model = build_tool_calling_model(tmp_path / "tool-model")  # every turn calls add(a=1, b=2)
    offset = 100

    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: first
            b: second
        """
        return a + b + offset

    def saw_tool_result(completions, **kwargs):
        return [float(any(t.get("role") == "tool" and t["content"] == "103" for t in c)) for c in completions]

    trainer = GRPOTrainer(
        model=model, reward_funcs=saw_tool_result, tools=[add],
        args=quick_args(tmp_path, max_steps=1, num_generations=2, max_completion_length=80,
                        max_tool_calling_iterations=1, extra={"training": {"batch_size": 2}}),
        train_dataset=[{"prompt": "add"}, {"prompt": "add again"}],
    )
    trainer.train()
    assert trainer.state.log_history[0]["rewards/saw_tool_result/mean"] == 1.0


def test_a_failing_reward_is_a_training_error_with_its_message(root, tmp_path, rows):
    def broken(completions, **kwargs):
        raise KeyError("no such column")

    trainer = GRPOTrainer(model=str(root / "examples" / "models" / "tiny-arith"), reward_funcs=[broken],
                          args=quick_args(tmp_path), train_dataset=rows)
    with pytest.raises(TrainingError) as err:
        trainer.train()
    assert "broken" in str(err.value) and err.value.exit_code != 0


def test_a_worker_that_exits_0_without_its_last_frame_is_a_training_error(root, tmp_path, rows):
    def leaves(completions, **kwargs):
        import os

        os._exit(0)

    trainer = GRPOTrainer(model=str(root / "examples" / "models" / "tiny-arith"), reward_funcs=[leaves],
                          args=quick_args(tmp_path), train_dataset=rows)
    with pytest.raises(TrainingError) as err:
        trainer.train()
    assert err.value.exit_code == 1
    assert str(err.value).startswith("the worker exited with code 0 during step 1 (scoring) without reporting why")


def test_mistakes_in_the_arguments_name_them(root, tmp_path, rows):
    model = str(root / "examples" / "models" / "tiny-arith")
    with pytest.raises(ValueError, match=r"reward_funcs\[0\]: 'gpt-judge' is not a built-in"):
        GRPOTrainer(model=model, reward_funcs=["gpt-judge"], train_dataset=rows)
    with pytest.raises(TrainingError, match="args: builtins.dict is not grpo_tui's GRPOConfig"):
        GRPOTrainer(model=model, reward_funcs=["accuracy"], args={"learning_rate": 1e-5}, train_dataset=rows)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="model: object"):
        GRPOTrainer(model=object(), reward_funcs=["accuracy"], train_dataset=rows)  # type: ignore[arg-type]
    trainer = GRPOTrainer(model=model, reward_funcs=["accuracy"], train_dataset=rows,
                          args=quick_args(tmp_path, reward_weights=[1.0, 2.0]))
    with pytest.raises(ValueError, match="reward_weights: 2 weights for 1 reward functions"):
        trainer.train()
    trainer = GRPOTrainer(model=str(tmp_path / "nowhere"), reward_funcs=["accuracy"], train_dataset=rows,
                          args=quick_args(tmp_path))
    with pytest.raises(ValueError, match="^model: .* does not exist"):  # the argument, not the TOML key
        trainer.train()
    trainer = GRPOTrainer(model=model, reward_funcs=["accuracy"], train_dataset=rows, args=quick_args(tmp_path))
    with pytest.raises(ValueError, match="^resume_from_checkpoint: .* does not exist"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-9"))


def test_dashboard_runs_grpo_tui_run_on_the_written_config_and_fills_the_state(root, tmp_path, rows, monkeypatch):
    """In a terminal, train(dashboard=True) runs `grpo-tui run config.toml`; here a headless worker
    stands in for the dashboard (same config, same run.jsonl), and the state is read from run.jsonl."""
    import subprocess
    import sys

    import grpo_tui.trainer as api

    calls = []

    def dashboard(argv, env=None):
        calls.append(argv)
        assert argv[1:4] == ["-m", "grpo_tui.tui.cli", "run"]
        return subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "worker", argv[4], "--plain"],
                              env=env, stdout=subprocess.DEVNULL).returncode

    monkeypatch.setattr(api.sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(api.sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(api.subprocess, "call", dashboard)
    trainer = GRPOTrainer(model=str(root / "examples" / "models" / "tiny-arith"), reward_funcs=["accuracy"],
                          args=quick_args(tmp_path, max_steps=2), train_dataset=rows)
    trainer.train(dashboard=True)
    assert len(calls) == 1 and calls[0][4] == str(tmp_path / "run" / "config.toml")
    assert trainer.state.global_step == 2
    assert [e["step"] for e in trainer.state.log_history if "reward" in e] == [1, 2]


def test_dashboard_without_a_terminal_falls_back_to_the_progress_bar(root, tmp_path, rows, capsys):
    trainer = GRPOTrainer(model=str(root / "examples" / "models" / "tiny-arith"), reward_funcs=["accuracy"],
                          args=quick_args(tmp_path, max_steps=1), train_dataset=rows)
    trainer.train(dashboard=True)  # pytest's stdin is no terminal
    assert "dashboard=True needs a terminal" in capsys.readouterr().err and trainer.state.global_step == 1


def test_a_toml_config_trains_through_the_api_as_it_is(root, tmp_path):
    from grpo_tui.protocol.config import load_config

    quick = root / "examples" / "quickstart.toml"
    args = GRPOConfig.from_toml(quick, overrides=["training.max_steps=2", "eval.limit=8",
                                                  f"checkpoint.output_dir='{tmp_path / 'q'}'"])
    trainer = GRPOTrainer(model=None, reward_funcs=None, args=args)  # model, data, rewards: the file's
    trainer.train()
    entry = trainer.state.log_history[1]
    assert entry["step"] == 1 and {"rewards/accuracy/mean", "rewards/xml_format/mean"} <= entry.keys()
    ran, original = load_config(tmp_path / "q" / "config.toml").to_dict(), load_config(quick).to_dict()
    for section in ("model", "data", "rewards", "grpo", "generation"):
        assert ran[section] == original[section], section


def test_trainer_set_from_a_thread_and_from_a_callback_changes_the_run_and_log_history_says_so(root, tmp_path, rows):
    """trainer.set while train() runs: the step it applies from, or the sentence as a ValueError."""
    import threading

    answers: dict[str, object] = {}

    class Slower:  # a callback: at step 2 it lowers the temperature (it cannot wait for the answer there)
        def on_step_end(self, args, state, control, trainer):
            if state.global_step == 2:
                answers["callback"] = trainer.set("generation.temperature", 0.5)

    def slow(completions, **kwargs):
        import time

        time.sleep(0.2)  # a step long enough for the other thread's set to land before the end
        return [float(len(set(c))) for c in completions]

    trainer = GRPOTrainer(model=str(root / "examples" / "models" / "tiny-arith"), reward_funcs=[slow],
                          args=quick_args(tmp_path, max_steps=6, save_steps=0), train_dataset=rows,
                          callbacks=[Slower()])

    def steer() -> None:
        while trainer.state.global_step < 1:
            threading.Event().wait(0.05)
        answers["rate"] = trainer.set("training.learning_rate", 2e-5)
        try:
            trainer.set("training.batch_size", 8)
        except ValueError as exc:
            answers["refused"] = str(exc)

    thread = threading.Thread(target=steer)
    thread.start()
    trainer.train()
    thread.join(timeout=60)
    changes = [e for e in trainer.state.log_history if "live_change" in e]
    assert sorted((e["live_change"], e["new"], e["source"]) for e in changes) == [
        ("generation.temperature", 0.5, "api"), ("training.learning_rate", 2e-5, "api")]
    assert answers["rate"] == [e["step"] for e in changes if e["live_change"] == "training.learning_rate"][0]
    assert answers["callback"] is None
    assert "training.batch_size: cannot change in a live run" in str(answers["refused"])
    rates = [e["learning_rate"] for e in trainer.state.log_history if "learning_rate" in e]
    assert rates[-1] == pytest.approx(2e-5) and rates[0] == pytest.approx(5e-5)
    with pytest.raises(RuntimeError, match="while train\\(\\) runs"):
        trainer.set("training.learning_rate", 1e-5)


def test_max_staleness_runs_a_closure_reward_in_the_generator_process(root, tmp_path, rows):
    """TRL 1.18's AsyncGRPOConfig name on GRPOConfig: the caller's closure scores in the generator
    process, the steps train on completions one update old (docs/async.md)."""
    bonus = 0.5

    def exact(completions, answer, **kwargs):
        return [bonus * float(a in c) + 1.0 for c, a in zip(completions, answer)]

    trainer = GRPOTrainer(model=str(root / "examples" / "models" / "tiny-arith"), reward_funcs=[exact],
                          args=quick_args(tmp_path, max_staleness=1, vllm_importance_sampling_mode="token_truncate"),
                          train_dataset=datasets.Dataset.from_list(rows))
    assert trainer.train().global_step == 4
    train = [e for e in trainer.state.log_history if "reward" in e]
    assert all(1.0 <= e["rewards/exact/mean"] <= 1.5 for e in train)
    assert [e.get("async/staleness_max") for e in train] == [0.0, 1.0, 1.0, 1.0]
