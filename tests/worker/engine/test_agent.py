"""Agent rollouts: a real model's tool calls run mid-rollout, their results are in the context but
out of the loss (the mask), and rows that call nothing are generated once."""

from __future__ import annotations

import mlx.core as mx
import mlx_lm
import pytest

from grpo_tui.protocol.config import GenerationConfig, GrpoConfig
from grpo_tui.protocol.messages import Turn
from grpo_tui.worker.engine import agent, rollout
from grpo_tui.worker.engine.batch import MicroBatch, pack
from grpo_tui.worker.engine.grpo import LossSettings
from grpo_tui.worker.engine.loss import loss_and_grad
from grpo_tui.worker.engine.reward_call import tool_conversation
from grpo_tui.worker.engine.tool_schema import function_schema
from grpo_tui.worker.engine.tools import Tool
from tests.worker_harness import TOOL_CALL_TEXT, build_tool_calling_model


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first
        b: second
    """
    return a + b


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory):
    path = build_tool_calling_model(tmp_path_factory.mktemp("tool-model"))
    return mlx_lm.load(str(path))


def _generate(model, tokenizer, max_tool_calls=2, length=120, tools=None):
    gen = GenerationConfig(max_completion_length=length, max_tool_calls=max_tool_calls)
    tools = tools if tools is not None else [Tool("add", add, 5.0, function_schema(add))]
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "1+2?"}], add_generation_prompt=True)
    return prompt, agent.generate(model, tokenizer, [prompt], 2, gen, tools)


def test_each_call_runs_and_its_result_is_appended_as_a_tool_message(tool_model):
    model, tokenizer = tool_model
    prompt, completions = _generate(model, tokenizer)
    glue = agent.tool_message_ids(tokenizer, [Turn(role="tool", content="3", name="add")], False)
    assert tokenizer.decode(glue) == (
        "<|im_end|>\n<|im_start|>tool\n3<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")  # the template's
    call_id = tokenizer.encode(TOOL_CALL_TEXT, add_special_tokens=False)
    assert len(call_id) == 1
    for c in completions:
        roles = [(t.role, t.content) for t in c.turns]
        # two calls run (max_tool_calls), the third is the model's last turn, cut by the length
        assert roles[:4] == [("assistant", TOOL_CALL_TEXT), ("tool", "3")] * 2
        assert roles[4][0] == "assistant" and roles[4][1].startswith(TOOL_CALL_TEXT)
        assert c.turns[1].arguments == {"a": 1, "b": 2} and c.turns[1].seconds is not None
        # the tokens: call, glue, call, glue, then the model's tokens up to the length
        assert c.token_ids[: 2 * (1 + len(glue))] == (call_id + glue) * 2
        assert c.mask == ([1] + [0] * len(glue)) * 2 + [1] * (120 - 2 * (1 + len(glue)))
        assert len(c.token_ids) == 120 and c.finish_reason in ("length", "repetition")
        assert c.model_tokens == 120 - 2 * len(glue)
        assert c.text == TOOL_CALL_TEXT * c.model_tokens  # the model's text only
        assert "<|im_start|>tool\n3" in c.transcript
    assert tool_conversation(completions[0].turns)[:3] == [
        {"role": "assistant", "content": TOOL_CALL_TEXT,
         "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]},
        {"role": "tool", "name": "add", "content": "3"},
        {"role": "assistant", "content": TOOL_CALL_TEXT,
         "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]},
    ]


def test_an_unknown_tool_s_error_is_what_the_model_reads_and_no_tools_means_one_plain_round(tool_model):
    model, tokenizer = tool_model
    _, completions = _generate(model, tokenizer, max_tool_calls=1, length=150,
                               tools=[Tool("mul", add, 5.0, function_schema(add))])
    turn = completions[0].turns[1]
    assert turn.error == "unknown tool 'add' (available: mul)" and turn.content == f"Error: {turn.error}"
    _, plain = _generate(model, tokenizer, max_tool_calls=0, length=10)
    assert [len(c.turns) for c in plain] == [1, 1] and all(c.mask == [1] * 10 for c in plain)


def test_a_result_that_does_not_fit_the_length_ends_the_row_with_what_it_sampled(tool_model):
    model, tokenizer = tool_model
    _, completions = _generate(model, tokenizer, length=12)  # the glue is ~40 tokens
    assert all(c.mask == [1] * 12 and [t.role for t in c.turns] == ["assistant"] for c in completions)


def _loss(model, batch: MicroBatch) -> float:
    settings = LossSettings.from_config(type("C", (), {"grpo": GrpoConfig(group_size=2),
                                                       "generation": GenerationConfig()})())
    (loss, _, _), _ = loss_and_grad(model, batch, settings, 1.0, float(mx.sum(batch.mask).item()), 1, compiled=False)
    return float(loss.item())


@pytest.mark.parametrize("group", [1, 2])
def test_the_loss_of_a_multi_turn_completion_is_the_hand_built_sequence_s_with_its_mask(tool_model, group):
    model, tokenizer = tool_model
    prompt, completions = _generate(model, tokenizer, length=100)
    completions[1] = rollout.Completion(0, completions[1].token_ids[:70], "", "length", mask=completions[1].mask[:70])
    advantages = [1.0, -0.5]
    batch = pack([prompt, prompt], [c.token_ids for c in completions], advantages, [True, True], group=group,
                 token_masks=[c.mask for c in completions])
    # by hand: prompt + completion in one right-padded sequence, the mask 1 on the model's tokens only
    seqs = [prompt + c.token_ids for c in completions]
    width = max(map(len, seqs))
    ids = mx.array([s + [0] * (width - len(s)) for s in seqs])
    start = len(prompt) - 1
    mask = [c.mask + [0] * (width - 1 - start - len(c.mask)) for c in completions]
    by_hand = MicroBatch(inputs=ids[:, :-1], targets=ids[:, start + 1:], mask=mx.array(mask, dtype=mx.float32),
                         advantages=mx.array(advantages), start=start)
    assert float(mx.sum(batch.mask).item()) == sum(sum(c.mask) for c in completions)
    assert _loss(model, batch) == pytest.approx(_loss(model, by_hand), rel=1e-5, abs=1e-7)
    unmasked = MicroBatch(inputs=by_hand.inputs, targets=by_hand.targets, advantages=by_hand.advantages,
                          start=start, mask=mx.array([[1.0] * len(c.mask) + [0.0] * (width - 1 - start - len(c.mask))
                                                      for c in completions]))
    assert _loss(model, unmasked) != pytest.approx(_loss(model, by_hand), rel=1e-3)


def test_the_stored_tool_calls_carry_the_error_of_a_call_that_ran_and_failed():
    turns = [
        Turn(role="assistant", content='<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'),
        Turn(role="tool", content="Error: wrong arguments", name="add", arguments={"a": 1}, error="wrong arguments"),
        Turn(role="assistant", content='<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'),
        Turn(role="tool", content="3", name="add", arguments={"a": 1, "b": 2}),
        Turn(role="assistant", content="<tool_call>{oops</tool_call> <answer>3</answer>"),
    ]
    calls = agent.tool_calls(turns)
    assert [(c.index, c.name, c.status, c.error) for c in calls] == [
        (0, "add", "ok", "wrong arguments"), (1, "add", "ok", None), (2, None, "invalid_json", calls[2].error)]
    assert calls[2].error


def test_only_the_rows_that_called_a_tool_are_generated_again(tool_model, monkeypatch):
    model, tokenizer = tool_model
    call = tokenizer.encode(TOOL_CALL_TEXT, add_special_tokens=False)
    eos = tokenizer.eos_token_id
    plain = tokenizer.encode("<answer>3</answer>", add_special_tokens=False)
    rounds: list[list[list[int]]] = []

    def scripted(model, tokenizer, prompts, n, gen, **kwargs):
        rounds.append([list(p) for p in prompts for _ in range(n)])
        if len(rounds) == 1:  # row 0 calls the tool (and samples on past the call), row 1 answers
            return [rollout.Completion(0, call + plain + [eos], "", "stop"),
                    rollout.Completion(0, plain + [eos], "", "stop")]
        assert gen.max_completion_length == 100 - len(rounds[1][0]) + len(rounds[0][0])  # what is left of row 0
        return [rollout.Completion(0, plain + [eos], "", "stop")]

    monkeypatch.setattr(rollout, "generate", scripted)
    prompt, completions = _generate(model, tokenizer, length=100)
    assert [len(r) for r in rounds] == [2, 1]  # the second round holds row 0 only
    glue = agent.tool_message_ids(tokenizer, [Turn(role="tool", content="3", name="add")], False)
    assert rounds[1][0] == prompt + call + glue  # cut right after </tool_call>, the result appended
    assert completions[0].token_ids == call + glue + plain + [eos] and completions[0].finish_reason == "stop"
    assert completions[1].token_ids == plain + [eos] and completions[1].turns == [Turn(role="assistant", content="<answer>3</answer>")]
