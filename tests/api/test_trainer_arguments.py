"""GRPOTrainer's TRL arguments through the real worker: callbacks (a stop at step 3), a PEFT
LoraConfig, a pandas DataFrame with numpy and datetime columns, processing_class, log_completions,
evaluate(), log_history across a resume by a new trainer, and the mistakes TRL raises for."""

from __future__ import annotations

import datetime
import re
import sys
import tomllib

import pytest

from grpo_tui import GRPOTrainer, TrainingError
from tests.helpers.api_runs import TINY_MODEL, quick_args
from tests.helpers.peft_like import LoraConfig, PromptTuningConfig


def typed(completions, when, vector, **kwargs):
    """1.0 where the columns reach the reward with their types (a datetime, a list of floats)."""
    ok = isinstance(when[0], datetime.datetime) and isinstance(vector[0], list) and isinstance(vector[0][0], float)
    return [float(ok)] * len(completions)


def frame(n: int = 8):
    pandas = pytest.importorskip("pandas")
    import numpy as np

    return pandas.DataFrame({
        "prompt": [f"What is {i}+{i}?" for i in range(n)], "answer": [str(2 * i) for i in range(n)],
        "when": pandas.date_range("2026-01-01", periods=n, freq="D"),
        "vector": [np.array([0.5, float(i)]) for i in range(n)],
    })


def test_a_callback_stops_at_step_3_with_lora_a_dataframe_and_the_completions_table(tmp_path, capsys):
    from transformers import AutoTokenizer, TrainerCallback

    events: list[tuple[str, int]] = []

    class StopAtThree(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            events.append(("train_begin", state.max_steps))

        def on_step_end(self, args, state, control, **kwargs):
            events.append(("step_end", state.global_step))
            if state.global_step == 3:
                control.should_training_stop = True
            return control

        def on_log(self, args, state, control, logs=None, **kwargs):
            events.append(("log", logs["step"]))

        def on_save(self, args, state, control, **kwargs):
            events.append(("save", state.global_step))

        def on_train_end(self, args, state, control, **kwargs):
            events.append(("train_end", state.global_step))

    lora = LoraConfig(task_type="CAUSAL_LM", r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    trainer = GRPOTrainer(
        model=str(TINY_MODEL), reward_funcs=typed, train_dataset=frame(), peft_config=lora,
        processing_class=AutoTokenizer.from_pretrained(str(TINY_MODEL)), callbacks=[StopAtThree],
        args=quick_args(tmp_path, max_steps=8, save_steps=0, log_completions=True, num_completions_to_print=2),
    )
    trainer.train()
    assert trainer.state.global_step == 3  # the step the callback stopped at, not one more
    assert events[0] == ("train_begin", 8) and events[-1] == ("train_end", 3)
    assert [s for e, s in events if e == "step_end"] == [1, 2, 3] and [s for e, s in events if e == "log"] == [1, 2, 3]
    assert ("save", 3) in events and trainer.state.last_checkpoint is not None
    assert all(e["rewards/typed/mean"] == 1.0 for e in trainer.state.log_history if "reward" in e)
    lora_table = tomllib.loads((tmp_path / "run" / "config.toml").read_text())["model"]["lora"]
    assert lora_table == {"rank": 4, "alpha": 8, "dropout": 0.0, "layers": -1,
                          "keys": ["self_attn.q_proj", "self_attn.v_proj"]}  # PEFT's suffixes, every block
    out = capsys.readouterr().out
    assert "Step 3" in out and "Advantage" in out and "typed" in out
    table = out[out.index("Step 1"):out.index("Step 2")]
    assert table.count("What is") == 2  # num_completions_to_print rows


def test_evaluate_and_log_history_across_a_resume_by_a_new_trainer(tmp_path):
    rows = [{"prompt": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(8)]
    args = quick_args(tmp_path, max_steps=2, eval_strategy="no")
    first = GRPOTrainer(model=str(TINY_MODEL), reward_funcs="accuracy", args=args, train_dataset=rows,
                        eval_dataset=rows[:4])
    first.train()
    metrics = first.evaluate()
    assert 0.0 <= metrics["eval_reward"] <= 1.0 and "eval_rewards/accuracy/mean" in metrics
    assert first.state.log_history[-1]["step"] == 2 and "eval_reward" in first.state.log_history[-1]

    again = GRPOTrainer(model=str(TINY_MODEL), reward_funcs="accuracy", train_dataset=rows,
                        args=quick_args(tmp_path, max_steps=3, eval_strategy="no"))
    again.train(resume_from_checkpoint=True)
    assert [e["step"] for e in again.state.log_history if "reward" in e] == [1, 2, 3]


def test_what_trl_refuses_is_a_training_error(tmp_path, monkeypatch):
    rows = [{"prompt": "What is 1+1?", "answer": "2"}] * 4
    trainer = GRPOTrainer(model=str(TINY_MODEL), reward_funcs="accuracy", args=quick_args(tmp_path), train_dataset=rows)
    with pytest.raises(TrainingError, match="resume_from_checkpoint=True: no checkpoint in .* to resume from"):
        trainer.train(resume_from_checkpoint=True)
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if wandb were not installed
    trainer = GRPOTrainer(model=str(TINY_MODEL), reward_funcs="accuracy", train_dataset=rows,
                          args=quick_args(tmp_path, report_to="wandb"))
    with pytest.raises(TrainingError, match="names wandb, which is not installed"):
        trainer.write_config()
    with pytest.raises(TrainingError, match="target_modules .* match no linear module"):
        GRPOTrainer(model=str(TINY_MODEL), reward_funcs="accuracy", train_dataset=rows, args=quick_args(tmp_path),
                    peft_config=LoraConfig(target_modules=["query_key_value"])).write_config()
    with pytest.raises(TrainingError, match="use_dora=True is not supported"):
        GRPOTrainer(model=str(TINY_MODEL), reward_funcs="accuracy", train_dataset=rows, args=quick_args(tmp_path),
                    peft_config={"r": 8, "use_dora": True}).write_config()
    with pytest.raises(TrainingError, match="processing_class: a tokenizer from 'gpt2'"):
        GRPOTrainer(model=str(TINY_MODEL), reward_funcs="accuracy", processing_class="gpt2")
    import shutil

    same = shutil.copytree(TINY_MODEL, tmp_path / "tokenizer-copy")  # elsewhere, yet the model's own tokenizer
    GRPOTrainer(model=str(TINY_MODEL), reward_funcs="accuracy", processing_class=str(same))
    (same / "tokenizer_config.json").write_text((same / "tokenizer_config.json").read_text().replace("im_start", "im_begin"))
    with pytest.raises(TrainingError, match="processing_class: a tokenizer from"):
        GRPOTrainer(model=str(TINY_MODEL), reward_funcs="accuracy", processing_class=str(same))


def test_a_callback_that_raises_stops_the_run_and_train_raises_it(tmp_path):
    class Broken:
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2:
                raise LookupError("no such metric")

    rows = [{"prompt": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(8)]
    trainer = GRPOTrainer(model=str(TINY_MODEL), reward_funcs="accuracy", train_dataset=rows, callbacks=[Broken()],
                          args=quick_args(tmp_path, max_steps=6, save_steps=0))
    with pytest.raises(LookupError, match="no such metric"):
        trainer.train()
    assert trainer.state.global_step == 2 and trainer.state.last_checkpoint is not None  # stopped there, saved


def test_callbacks_see_the_evaluations_while_the_worker_waits_for_them_after_each_step(tmp_path):
    seen: list[tuple[str, int]] = []

    class Watch:
        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            seen.append(("evaluate", metrics["step"]))

        def on_step_end(self, args, state, control, **kwargs):
            seen.append(("step_end", state.global_step))

    rows = [{"prompt": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(8)]
    trainer = GRPOTrainer(model=str(TINY_MODEL), reward_funcs="accuracy", train_dataset=rows, eval_dataset=rows[:2],
                          callbacks=[Watch()], args=quick_args(tmp_path, max_steps=4, eval_steps=2, save_steps=0))
    trainer.train()
    # as in transformers' loop: a step's on_evaluate comes before the next step's on_step_end
    assert [x for x in seen if x != ("evaluate", 0)] == [("step_end", 1), ("step_end", 2), ("evaluate", 2),
                                                         ("step_end", 3), ("step_end", 4), ("evaluate", 4)]


def test_logging_first_step_and_disable_tqdm_reach_the_run(tmp_path, capsys):
    rows = [{"prompt": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(8)]
    trainer = GRPOTrainer(model=str(TINY_MODEL), reward_funcs="accuracy", train_dataset=rows,
                          args=quick_args(tmp_path, max_steps=3, logging_steps=3, save_steps=0,
                                          logging_first_step=True, disable_tqdm=True))
    trainer.train()
    assert [e["step"] for e in trainer.state.log_history if "reward" in e] == [1, 3]  # step 1 too, as TRL logs it
    assert "GRPO:" not in capsys.readouterr().err  # no progress bar


def test_peft_exclude_modules_apply_and_what_would_train_something_else_is_refused(tmp_path):
    rows = [{"prompt": "What is 1+1?", "answer": "2"}] * 4

    def lora_keys(peft):
        trainer = GRPOTrainer(model=str(TINY_MODEL), reward_funcs="accuracy", train_dataset=rows,
                              args=quick_args(tmp_path), peft_config=peft)
        return tomllib.loads(trainer.write_config().read_text())["model"]["lora"]["keys"]

    keys = lora_keys(LoraConfig(target_modules="all-linear", exclude_modules=["v_proj", "mlp.up_proj"]))
    assert "self_attn.v_proj" not in keys and "mlp.up_proj" not in keys and "self_attn.q_proj" in keys
    assert not any(k.startswith("mlp.") for k in lora_keys({"target_modules": "all-linear", "exclude_modules": ".*mlp.*"}))
    for peft, words in [(PromptTuningConfig(task_type="CAUSAL_LM"), "PromptTuningConfig (PROMPT_TUNING) is not supported"),
                        (LoraConfig(init_lora_weights="pissa"), "init_lora_weights='pissa' is not supported"),
                        ({"r": 8, "lora_bias": True}, "lora_bias=True is not supported")]:
        with pytest.raises(TrainingError, match=re.escape(f"peft_config: {words}")):
            lora_keys(peft)


def test_numpy_datetimes_in_rows_reach_the_worker_as_datetimes(tmp_path):
    import numpy as np

    from grpo_tui.worker.engine.prompts.dataset_sources import read

    when = np.datetime64("2026-01-02T03:04:05.000000000")  # nanoseconds: tolist() would give an int
    rows = [{"prompt": "What is 1+1?", "answer": "2", "when": when, "gap": np.timedelta64(5_000_000_000, "ns")}] * 4
    trainer = GRPOTrainer(model=str(TINY_MODEL), reward_funcs="accuracy", train_dataset=rows, args=quick_args(tmp_path))
    data = tomllib.loads(trainer.write_config().read_text())["data"]["path"]
    [(_, row)] = read(data).rows[:1]
    assert row["when"] == datetime.datetime(2026, 1, 2, 3, 4, 5) and row["gap"] == datetime.timedelta(seconds=5)


def test_a_stop_asked_in_on_evaluate_ends_the_run_without_an_error_line(tmp_path, capsys):
    class StopOnEval:
        def on_evaluate(self, args, state, control, **kwargs):
            control.should_training_stop = state.global_step >= 2

    rows = [{"prompt": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(8)]
    trainer = GRPOTrainer(model=str(TINY_MODEL), reward_funcs="accuracy", train_dataset=rows, eval_dataset=rows[:2],
                          callbacks=[StopOnEval()], args=quick_args(tmp_path, max_steps=6, eval_steps=2, save_steps=0))
    trainer.train()
    # the worker waits for the callbacks' verdict on step 2's evaluation too (transformers' EarlyStoppingCallback)
    assert trainer.state.global_step == 2 and trainer.state.last_checkpoint is not None
    assert "[error]" not in capsys.readouterr().err
