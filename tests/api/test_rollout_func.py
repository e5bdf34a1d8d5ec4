"""TRL's ``rollout_func(prompts, trainer)`` through the real worker (docs/environments.md, "Your own
rollout function"): the function generates with ``generate_rollout_completions`` on the policy
being trained, its tokens are the batch, ``env_mask``'s zeros stay out of the lengths, an extra key
reaches the reward as a column; a malformed return is one sentence and exit 2."""

from __future__ import annotations

import json

import pytest

from tests.helpers.api_runs import TINY_MODEL, quick_args
from tests.helpers.worker_harness import query


def test_a_rollout_func_generates_with_the_policy_and_its_tokens_extra_keys_and_mask_are_the_batch(tmp_path):
    from grpo_tui import GRPOTrainer, generate_rollout_completions

    log = tmp_path / "calls.jsonl"

    def rollout_func(prompts, trainer):
        outs = generate_rollout_completions(trainer, prompts)
        feedback = trainer.processing_class.encode(" ok", add_special_tokens=False)  # the environment's tokens
        parity = [float(len(o["completion_ids"]) % 2) for o in outs]
        with open(log, "a") as f:
            f.write(json.dumps({"training": trainer.model.training, "prompts": prompts, "G": trainer.num_generations, "lengths": [len(o["completion_ids"]) for o in outs],
                                "logprobs_fit": all(len(o["logprobs"]) == len(o["completion_ids"]) for o in outs),
                                "parity": parity}) + "\n")
        return {"prompt_ids": [o["prompt_ids"] for o in outs],
                "completion_ids": [o["completion_ids"] + feedback for o in outs],
                "logprobs": [o["logprobs"] + [0.0] * len(feedback) for o in outs],
                "env_mask": [[1] * len(o["completion_ids"]) + [0] * len(feedback) for o in outs],
                "parity": parity}

    def parity_reward(completions, parity, **kwargs):
        return parity

    rows = [{"prompt": f"{i}+{i}="} for i in range(1, 5)]
    trainer = GRPOTrainer(model=str(TINY_MODEL), reward_funcs=[parity_reward],
                          args=quick_args(tmp_path, max_steps=2, eval_strategy="steps", eval_steps=2),
                          train_dataset=rows, eval_dataset=rows[:1], rollout_func=rollout_func)
    trainer.train()
    every = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["training"] for c in every] == [True, True, False]  # the evaluation's episodes go through it too
    assert "eval_reward" in trainer.state.log_history[-1] or any("eval_reward" in e for e in trainer.state.log_history)
    calls = every[:2]
    for call in calls:  # each row's prompt num_generations times in a row, as TRL's sampler hands them
        assert call["G"] == 4 and len(call["prompts"]) == 4 and len(set(map(str, call["prompts"]))) == 1
        assert call["logprobs_fit"]
    for call, logged in zip(calls, [e for e in trainer.state.log_history if "loss" in e]):
        # the environment's tokens (env_mask 0) are not the model's: the lengths count the policy's only
        assert logged["completions/mean_length"] == pytest.approx(sum(call["lengths"]) / 4)
        assert logged["rewards/parity_reward/mean"] == pytest.approx(sum(call["parity"]) / 4)  # the extra key, a column
    rows_stored = query(tmp_path / "run" / "outputs.db", "SELECT step, completion, reward FROM generations ORDER BY step, id")
    assert len(rows_stored) == 8 and all(text.endswith(" ok") for _, text, _ in rows_stored)  # the returned tokens
    assert sorted(r for s, _, r in rows_stored if s == 1) == sorted(calls[0]["parity"])


def test_a_malformed_return_is_one_sentence_and_exit_2(tmp_path):
    from grpo_tui import GRPOTrainer, TrainingError, generate_rollout_completions

    def rollout_func(prompts, trainer):
        outs = generate_rollout_completions(trainer, prompts)
        return {"prompt_ids": [o["prompt_ids"] for o in outs], "completion_ids": [o["completion_ids"] for o in outs]}

    trainer = GRPOTrainer(model=str(TINY_MODEL), reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                          args=quick_args(tmp_path, max_steps=1), train_dataset=[{"prompt": "1+1="}], rollout_func=rollout_func)
    with pytest.raises(TrainingError) as err:
        trainer.train()
    assert err.value.exit_code == 2
    assert str(err.value) == ("environment.rollout_func: its dict has no 'logprobs'; TRL's contract requires prompt_ids, "
                              "completion_ids and logprobs")


MALFORMED = {  # issue 57.8: each was an MLX error, then restarted as a crash
    "string log-probs": (lambda outs: {"logprobs": [[str(x) for x in o["logprobs"]] for o in outs]},
                         "environment.rollout_func: logprobs[0] holds str '"),
    "empty prompt_ids": (lambda outs: {"prompt_ids": [[] for _ in outs]},
                         "environment.rollout_func: prompt_ids[0] is empty; give the prompt's token ids"),
    "past the context": (lambda outs: {"completion_ids": [[5] * 600 for _ in outs], "logprobs": [[-1.0] * 600 for _ in outs]},
                         "past the model's context of 512; cut the completion (max_tokens)"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_return_the_model_cannot_take_is_one_sentence_and_exit_2(tmp_path, case):
    from grpo_tui import GRPOTrainer, TrainingError, generate_rollout_completions

    change, words = MALFORMED[case]

    def rollout_func(prompts, trainer):
        outs = generate_rollout_completions(trainer, prompts)
        out = {"prompt_ids": [o["prompt_ids"] for o in outs], "completion_ids": [o["completion_ids"] for o in outs],
               "logprobs": [o["logprobs"] for o in outs]}
        return {**out, **change(outs)}

    trainer = GRPOTrainer(model=str(TINY_MODEL), reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                          args=quick_args(tmp_path, max_steps=1), train_dataset=[{"prompt": "1+1="}], rollout_func=rollout_func)
    with pytest.raises(TrainingError) as err:
        trainer.train()
    assert err.value.exit_code == 2 and words in str(err.value), str(err.value)
