"""Rollouts with mlx-lm's batched generator on a tiny random Qwen3 model."""

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx_lm import load

from grpo_tui.protocol.config import GenerationConfig
from grpo_tui.worker.engine.learning.batch import pack
from grpo_tui.worker.engine.learning.logps import completion_logits, token_logps
from grpo_tui.worker.engine.models.plan import EnginePlan, Head
from grpo_tui.worker.engine.policy.rollout import finish_reason, generate, repetition_period
from tests.helpers.tiny_model import build_tiny_model
from tests.helpers.plans import stock_plan


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model, tokenizer = load(str(build_tiny_model(tmp_path_factory.mktemp("tiny"))))
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": "2+3="}], add_generation_prompt=True, enable_thinking=False),
        tokenizer.encode("a much longer prompt than the first one"),
    ]
    return model, tokenizer, prompts


class EosBiased(nn.Module):
    """The tiny model with a bonus on the stop token, so some completions stop early."""

    def __init__(self, inner, eos, bonus):
        super().__init__()
        self.inner, self.eos, self.bonus = inner, eos, bonus

    @property
    def layers(self):
        return self.inner.layers

    def __call__(self, inputs, cache=None):
        logits = self.inner(inputs, cache=cache)
        return logits + self.bonus * (mx.arange(logits.shape[-1]) == self.eos)


def test_n_completions_per_prompt_in_prompt_order(tiny):
    model, tokenizer, prompts = tiny
    out = generate(model, tokenizer, prompts, 3, GenerationConfig(max_completion_length=6), plan=stock_plan(model, GenerationConfig(max_completion_length=6)))
    assert [c.prompt_index for c in out] == [0, 0, 0, 1, 1, 1]
    assert all(len(c.token_ids) == 6 and c.finish_reason in ("length", "repetition") for c in out)
    assert all(c.text == tokenizer.decode(c.token_ids) for c in out)


def test_sampling_logprobs_match_the_training_forward_pass(tiny):
    """Token ids and positions line up: the trainer's log-probs (temperature 1) equal mlx-lm's."""
    model, tokenizer, prompts = tiny
    mx.random.seed(3)
    out = generate(model, tokenizer, prompts, 2, GenerationConfig(max_completion_length=8), plan=stock_plan(model, GenerationConfig(max_completion_length=8)))
    batch = pack([prompts[c.prompt_index] for c in out], [c.token_ids for c in out], [0.0] * 4, [True] * 4)
    logps = token_logps(model, batch, 1.0).logps
    logps, mask = np.array(logps), np.array(batch.mask)
    for i, c in enumerate(out):
        np.testing.assert_allclose(logps[i][mask[i] > 0], c.sampling_logprobs, atol=1e-4)


@pytest.mark.parametrize("gen", [GenerationConfig(max_completion_length=8, temperature=0.7),
                                 GenerationConfig(max_completion_length=8, top_p=0.9, top_k=50)], ids=["temperature", "filters"])
def test_the_host_draws_logprobs_match_the_training_forward_pass(tiny, gen):
    """The plan's numpy draw reports the sampled tokens' log-probs at temperature 1, unfiltered."""
    model, tokenizer, prompts = tiny
    plan = EnginePlan(device="cpu", parameters=0, vocabulary=model.args.vocab_size, fast_rollout=True,
                      shared_prompt=False, compiled_loss=False, head=Head.MLX, two_streams=False,
                      cpu_kernels=False, keep_freed_memory=False, evaluation_width=None, host_sampling=True)
    out = generate(model, tokenizer, prompts, 2, gen, plan=plan, keys=[1, 2, 3, 4])
    batch = pack([prompts[c.prompt_index] for c in out], [c.token_ids for c in out], [0.0] * 4, [True] * 4)
    logps, mask = (np.array(a) for a in (token_logps(model, batch, 1.0)[0], batch.mask))
    for i, c in enumerate(out):
        np.testing.assert_allclose(logps[i][mask[i] > 0], c.sampling_logprobs, atol=1e-4)


def test_stop_token_is_kept_in_ids_but_not_in_text(tiny):
    model, tokenizer, prompts = tiny
    eos = next(iter(tokenizer.eos_token_ids))
    mx.random.seed(0)
    out = generate(EosBiased(model, eos, 4.0), tokenizer, prompts, 8, GenerationConfig(max_completion_length=12), plan=stock_plan(EosBiased(model, eos, 4.0), GenerationConfig(max_completion_length=12)))
    stopped = [c for c in out if c.finish_reason == "stop"]
    assert stopped and len(stopped) < len(out)
    for c in stopped:
        assert c.token_ids[-1] == eos and eos not in c.token_ids[:-1]
        assert c.text == tokenizer.decode(c.token_ids[:-1])


def test_same_seed_same_rollout_and_top_k_1_is_greedy(tiny):
    model, tokenizer, prompts = tiny
    cfg = GenerationConfig(max_completion_length=8, temperature=1.5)
    runs = []
    for _ in range(2):
        mx.random.seed(7)
        runs.append([c.token_ids for c in generate(model, tokenizer, prompts, 2, cfg, plan=stock_plan(model, cfg))])
    assert runs[0] == runs[1]
    greedy = [c.token_ids for c in generate(model, tokenizer, prompts, 1, cfg, greedy=True, plan=stock_plan(model, cfg))]
    top1 = [c.token_ids for c in generate(model, tokenizer, prompts, 1, GenerationConfig(max_completion_length=8, top_k=1), plan=stock_plan(model, GenerationConfig(max_completion_length=8, top_k=1)))]
    assert greedy == top1


def test_repetition_penalty_changes_the_greedy_loop(tiny):
    model, tokenizer, prompts = tiny
    plain = generate(model, tokenizer, prompts, 1, GenerationConfig(max_completion_length=16), greedy=True, plan=stock_plan(model, GenerationConfig(max_completion_length=16)))
    assert any(c.finish_reason == "repetition" for c in plain)  # the random model loops when greedy
    penalised = generate(model, tokenizer, prompts, 1, GenerationConfig(max_completion_length=16, repetition_penalty=5.0), greedy=True, plan=stock_plan(model, GenerationConfig(max_completion_length=16, repetition_penalty=5.0)))
    assert [c.token_ids for c in penalised] != [c.token_ids for c in plain]


def test_repetition_is_a_short_block_looping_at_the_end():
    assert repetition_period([5, 1, 2, 3, 1, 2, 3, 1, 2, 3]) == 3
    assert repetition_period([9] * 8) == 1
    assert repetition_period([9] * 7) is None  # shorter than the minimum span
    assert repetition_period(list(range(40))) is None
    assert finish_reason([9] * 8, stopped=True) == "stop"
    assert finish_reason([9] * 8, stopped=False) == "repetition"
    assert finish_reason(list(range(8)), stopped=False) == "length"


@pytest.mark.parametrize("tie", [True, False])
def test_completion_logits_equal_the_full_forward_sliced(tmp_path, tie):
    model, _ = load(str(build_tiny_model(tmp_path, tie=tie)))
    inputs = mx.array([[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 0, 0]])
    np.testing.assert_allclose(np.array(completion_logits(model, inputs, 3)), np.array(model(inputs)[:, 3:]), atol=1e-5)
