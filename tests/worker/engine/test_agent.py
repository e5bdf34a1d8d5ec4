"""Agent rollouts: a real model's tool calls run mid-rollout while the other rows keep decoding, every
call of a turn runs in order, the results are in the context but out of the loss (the mask), and a
row's tokens do not depend on the rows beside it."""

from __future__ import annotations

import threading
from pathlib import Path

import mlx.core as mx
import mlx_lm
import pytest

from grpo_tui.protocol.config import AsyncConfig, GenerationConfig, GrpoConfig
from grpo_tui.protocol.messages import Turn
from grpo_tui.worker.engine.policy import agent, rollout, sampling
from grpo_tui.worker.engine.accel import fastgen
from grpo_tui.worker.engine.learning.batch import MicroBatch, pack
from grpo_tui.worker.engine.learning.grpo import LossSettings
from tests.helpers.loss_cases import loss_and_grad
from grpo_tui.worker.engine.scoring.reward_call import tool_conversation
from grpo_tui.worker.engine.scoring.tool_schema import function_schema
from grpo_tui.worker.engine.scoring.tools import Tool
from tests.helpers.worker_harness import PLAIN_TEXT, SECOND_CALL_TEXT, TOOL_CALL_TEXT, build_tool_calling_model
from tests.helpers.plans import stock_plan

DEMO_MODEL = Path(__file__).resolve().parents[3] / "examples" / "models" / "tiny-agent"


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first
        b: second
    """
    return a + b


ADD = Tool("add", add, 5.0, function_schema(add))


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory):
    return mlx_lm.load(str(build_tool_calling_model(tmp_path_factory.mktemp("tool-model"))))


@pytest.fixture(scope="module")
def two_call_model(tmp_path_factory):
    return mlx_lm.load(str(build_tool_calling_model(tmp_path_factory.mktemp("two-call-model"), calls_per_turn=2)))


@pytest.fixture(params=["compiled", "generator"])
def decoder_kind(request, monkeypatch):
    """Both decoders: the compiled loop (llama family) and mlx-lm's BatchGenerator (the rest)."""
    if request.param == "generator":
        monkeypatch.setattr(fastgen, "supports", lambda *args: False)
    return request.param


def _prompt(tokenizer) -> list[int]:
    return tokenizer.apply_chat_template([{"role": "user", "content": "1+2?"}], add_generation_prompt=True)


def _generate(model, tokenizer, max_tool_calls=2, length=120, tools=(ADD,), **kwargs):
    gen = GenerationConfig(max_completion_length=length, max_tool_calls=max_tool_calls)
    prompt = _prompt(tokenizer)
    return prompt, agent.generate(model, tokenizer, [prompt], 2, gen, list(tools), **kwargs, plan=stock_plan(model, gen))


def _glue(tokenizer, *results: str) -> list[int]:
    turns = [Turn(role="tool", content=r, name="add") for r in results]
    return agent.tool_glue(tokenizer, turns, False, tokenizer.eos_token_id)


def test_each_turn_ends_at_the_end_of_turn_token_and_its_call_s_result_is_a_tool_message(tool_model, decoder_kind):
    model, tokenizer = tool_model
    prompt, completions = _generate(model, tokenizer)
    glue = _glue(tokenizer, "3")
    assert tokenizer.decode(glue) == (  # the template's, after the model's own <|im_end|>
        "\n<|im_start|>tool\n3<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    call, eos = tokenizer.encode(TOOL_CALL_TEXT, add_special_tokens=False), tokenizer.eos_token_id
    assert len(call) == 1
    for c in completions:
        # two calls run (max_tool_calls); the third turn's call is past it and ends the completion
        assert [(t.role, t.content) for t in c.turns] == [("assistant", TOOL_CALL_TEXT), ("tool", "3")] * 2 + [
            ("assistant", TOOL_CALL_TEXT)]
        assert c.turns[1].arguments == {"a": 1, "b": 2} and c.turns[1].seconds is not None
        # nothing sampled is thrown away: call and end of turn are the model's, then the tool message
        assert c.token_ids == (call + [eos] + glue) * 2 + call + [eos]
        assert c.mask == ([1, 1] + [0] * len(glue)) * 2 + [1, 1]
        assert c.finish_reason == "stop" and c.model_tokens == 6
        assert c.text == TOOL_CALL_TEXT * 3  # the model's text only
        assert c.transcript.count("<|im_start|>tool\n3<|im_end|>") == 2 and not c.transcript.endswith("<|im_end|>")
    assert tool_conversation(completions[0].turns)[:2] == [
        {"role": "assistant", "content": TOOL_CALL_TEXT,
         "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]},
        {"role": "tool", "name": "add", "content": "3"},
    ]


def test_every_call_of_a_turn_runs_in_order_and_their_results_follow_in_order(two_call_model, decoder_kind):
    model, tokenizer = two_call_model
    seen: list[tuple[int, int]] = []

    def traced(a: int, b: int) -> int:
        seen.append((a, b))
        return a + b

    tools = [Tool("add", traced, 5.0, function_schema(add))]
    _, completions = _generate(model, tokenizer, max_tool_calls=3, tools=tools)
    calls = tokenizer.encode(TOOL_CALL_TEXT + SECOND_CALL_TEXT, add_special_tokens=False)
    glue = _glue(tokenizer, "3", "7")  # one tool message per result, in the calls' order
    for c in completions:
        # the second turn's two calls would make four: past max_tool_calls = 3, so the completion ends
        assert [(t.role, t.content) for t in c.turns] == [
            ("assistant", TOOL_CALL_TEXT + SECOND_CALL_TEXT), ("tool", "3"), ("tool", "7"),
            ("assistant", TOOL_CALL_TEXT + SECOND_CALL_TEXT)]
        assert c.token_ids == calls + [tokenizer.eos_token_id] + glue + calls + [tokenizer.eos_token_id]
        assert c.mask == [1] * 3 + [0] * len(glue) + [1] * 3
    assert sorted(seen) == [(1, 2), (1, 2), (3, 4), (3, 4)]  # two rows' turns, which may overlap
    seen.clear()
    gen = GenerationConfig(max_completion_length=120, max_tool_calls=3)
    agent.generate(model, tokenizer, [_prompt(tokenizer)], 1, gen, tools, plan=stock_plan(model, gen))
    assert seen == [(1, 2), (3, 4)]  # one row's calls one after the other, first call first
    stored = agent.tool_calls(completions[0].turns)
    assert [(s.index, s.arguments) for s in stored] == [(0, {"a": 1, "b": 2}), (1, {"a": 3, "b": 4}),
                                                         (2, {"a": 1, "b": 2}), (3, {"a": 3, "b": 4})]


def test_a_turn_with_more_calls_than_are_left_ends_the_completion_and_runs_none(two_call_model):
    model, tokenizer = two_call_model
    ran: list[int] = []
    tools = [Tool("add", lambda a, b: ran.append(a) or a + b, 5.0, function_schema(add))]
    _, completions = _generate(model, tokenizer, max_tool_calls=1, tools=tools)
    assert ran == [] and all([t.role for t in c.turns] == ["assistant"] and c.mask == [1, 1, 1] for c in completions)


def test_an_unknown_tool_s_error_is_what_the_model_reads_and_no_tools_means_one_turn(tool_model):
    model, tokenizer = tool_model
    _, completions = _generate(model, tokenizer, max_tool_calls=1, length=150,
                               tools=[Tool("mul", add, 5.0, function_schema(add))])
    turn = completions[0].turns[1]
    assert turn.error == "unknown tool 'add' (available: mul)" and turn.content == f"Error: {turn.error}"
    _, plain = _generate(model, tokenizer, max_tool_calls=0, length=10)
    assert [len(c.turns) for c in plain] == [1, 1] and all(c.mask == [1, 1] and c.finish_reason == "stop" for c in plain)


def test_a_result_that_does_not_fit_the_length_ends_the_row_with_what_it_sampled(tool_model, decoder_kind):
    model, tokenizer = tool_model
    _, completions = _generate(model, tokenizer, length=12)  # the tool message is ~40 tokens
    assert all(c.mask == [1, 1] and len(c.token_ids) == 2 for c in completions)
    assert all(c.finish_reason == "length" for c in completions)
    # the call ran: its turn is kept (so a failure reaches the store), marked as never read
    assert all([(t.role, t.unread) for t in c.turns] == [("assistant", False), ("tool", True)] for c in completions)
    assert all(c.turns[1].content == "3" for c in completions)


class Counting:
    """A decoder wrapper that records, per decode step, which rows got a token, and calls
    ``on_end(row)`` when a row is done."""

    def __init__(self, inner, on_end) -> None:
        self.inner, self.on_end, self.steps, self.got, self.paused = inner, on_end, 0, [], []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def step(self):
        out = self.inner.step()
        self.steps += 1
        self.got.append([i for i, _ in out])
        return out

    def end(self, row):
        self.inner.end(row)
        self.on_end(row)

    def pause(self, row):  # the row's calls were just handed to a thread
        self.paused.append((row, self.steps))
        self.inner.pause(row)


def test_a_slow_tool_runs_while_the_other_rows_decode_and_delays_none_of_them(tool_model, decoder_kind):
    model, tokenizer = tool_model
    gen = GenerationConfig(max_completion_length=60, max_tool_calls=1)
    plain = _prompt(tokenizer) + tokenizer.encode(PLAIN_TEXT, add_special_tokens=False)
    prompts = [_prompt(tokenizer), plain]  # row 0 calls the tool, row 1 never does
    plain_done = threading.Event()
    inner = agent.decoder(model, prompts, 1, gen, set(tokenizer.eos_token_ids), agent._Picker(gen, True, None),
                          stock_plan(model, gen), None)
    counting = Counting(inner, lambda row: row == 1 and plain_done.set())
    def slow(a: int, b: int) -> str:
        # returns only once row 1 is done: a loop that waited for the tool would never get there
        return "waited" if plain_done.wait(timeout=20) else "the other rows stalled"

    completions = agent.generate(model, tokenizer, prompts, 1, gen, [Tool("add", slow, 30.0, function_schema(add))],
                                 greedy=True, rows_decoder=counting, plan=stock_plan(model, gen))
    assert completions[0].turns[1].content == "waited"
    assert counting.paused == [(0, 2)]  # the call went out as soon as its turn ended: the call, the end of turn
    # row 1 got a token at every step until its 60 tokens, exactly as without a tool call beside it
    row1_steps = [k for k, rows in enumerate(counting.got) if 1 in rows]
    assert completions[1].turns == [Turn(role="assistant", content=PLAIN_TEXT * 60)]
    assert row1_steps == list(range(row1_steps[0], row1_steps[0] + 60))
    # and row 0 came back after the tool and finished its turn
    assert [t.role for t in completions[0].turns] == ["assistant", "tool", "assistant"]


def _rounds(model, tokenizer, prompts, gen, tools):
    """The rounds design rebuilt from the public pieces, greedy: every row to the end of its turn,
    the calls of the rows that made some, those rows again from their whole context."""
    by_name = {t.name: t for t in tools}
    tokens: list[list[int]] = [[] for _ in prompts]
    live, calls = list(range(len(prompts))), [0] * len(prompts)
    while live:
        budget = max(gen.max_completion_length - len(tokens[i]) for i in live)
        outs = rollout.generate(model, tokenizer, [prompts[i] + tokens[i] for i in live], 1,
                                GenerationConfig(max_completion_length=budget), greedy=True, logprobs=False, plan=stock_plan(model, GenerationConfig(max_completion_length=budget)))
        again = []
        for i, out in zip(live, outs):
            ids = out.token_ids[: gen.max_completion_length - len(tokens[i])]
            tokens[i] += ids
            found = agent.closed_calls(out.text) if out.finish_reason == "stop" and len(ids) == len(out.token_ids) else []
            if found and calls[i] + len(found) <= gen.max_tool_calls:
                glue = agent.tool_glue(tokenizer, agent.run_calls(by_name, found), False, ids[-1])
                if len(tokens[i]) + len(glue) < gen.max_completion_length:
                    tokens[i] += glue
                    calls[i] += len(found)
                    again.append(i)
        live = again
    return tokens


def test_the_continuous_rollout_gives_each_row_the_conversation_rounds_would(tool_model, decoder_kind):
    model, tokenizer = tool_model
    gen = GenerationConfig(max_completion_length=100, max_tool_calls=2)
    plain = _prompt(tokenizer) + tokenizer.encode(PLAIN_TEXT, add_special_tokens=False)
    prompts = [_prompt(tokenizer), plain, _prompt(tokenizer)]
    continuous = agent.generate(model, tokenizer, prompts, 1, gen, [ADD], greedy=True, plan=stock_plan(model, gen))
    assert [c.token_ids for c in continuous] == _rounds(model, tokenizer, prompts, gen, [ADD])


@pytest.fixture(scope="module")
def demo_model():
    return mlx_lm.load(str(DEMO_MODEL))


def _demo_prompts(tokenizer, count):
    return [tokenizer.apply_chat_template([{"role": "user", "content": f"What is {a}*{a + 13}?"}],
                                          add_generation_prompt=True, enable_thinking=False)
            for a in range(11, 11 + count)]


def _multiply(a: int, b: int) -> int:
    """Multiply.

    Args:
        a: first
        b: second
    """
    return a * b


def test_keyed_agent_rows_do_not_depend_on_the_rows_beside_them(demo_model, decoder_kind):
    model, tokenizer = demo_model
    gen = GenerationConfig(max_completion_length=96, max_tool_calls=2, temperature=1.0)
    tools = [Tool("multiply", _multiply, 5.0, function_schema(_multiply))]
    prompts = _demo_prompts(tokenizer, 3)
    keys = sampling.step_keys(0, 3, [0, 1, 2], 4)
    together = agent.generate(model, tokenizer, prompts, 4, gen, tools, keys=keys, plan=stock_plan(model, gen))
    called = [any(t.role == "tool" for t in c.turns) for c in together]
    assert any(called) and not all(called)  # a mix: rows that call and rows that do not
    for p in range(3):  # each prompt's rows alone, with their own keys: the same tokens
        alone = agent.generate(model, tokenizer, [prompts[p]], 4, gen, tools, keys=keys[4 * p : 4 * p + 4], plan=stock_plan(model, gen))
        assert [c.token_ids for c in alone] == [c.token_ids for c in together[4 * p : 4 * p + 4]]
    other = agent.generate(model, tokenizer, prompts, 4, gen, tools, keys=sampling.step_keys(1, 3, [0, 1, 2], 4), plan=stock_plan(model, gen))
    assert [c.token_ids for c in other] != [c.token_ids for c in together]


def test_rows_that_call_no_tool_get_exactly_the_plain_rollout_s_tokens(demo_model):
    model, tokenizer = demo_model
    gen = GenerationConfig(max_completion_length=128, max_tool_calls=2, temperature=1.0)
    prompts = _demo_prompts(tokenizer, 2)
    keys = sampling.step_keys(0, 1, [0, 1], 4)
    plain = rollout.generate(model, tokenizer, prompts, 4, gen, logprobs=False, keys=keys, plan=stock_plan(model, gen))
    tools = [Tool("multiply", _multiply, 5.0, function_schema(_multiply))]
    agentic = agent.generate(model, tokenizer, prompts, 4, gen, tools, keys=keys, plan=stock_plan(model, gen))
    untouched = [(a.token_ids, p.token_ids) for a, p in zip(agentic, plain) if len(a.turns) == 1]
    assert untouched and len(untouched) < len(plain)  # rows beside them did call the tool
    assert all(a == p for a, p in untouched)


def test_the_cpu_kernels_model_gives_the_same_agent_rollout():
    # cpu_fast's RoPE and attention take rowgen's per-row positions (one offset per row)
    from grpo_tui.worker.engine.accel import patches

    gen = GenerationConfig(max_completion_length=128, max_tool_calls=2, temperature=1.0)
    tools = [Tool("multiply", _multiply, 5.0, function_schema(_multiply))]
    outs = []
    for patched in (False, True):
        model, tokenizer = mlx_lm.load(str(DEMO_MODEL))
        assert not patched or patches.patch_model(model)
        prompts = _demo_prompts(tokenizer, 3)
        outs.append(agent.generate(model, tokenizer, prompts, 4, gen, tools, keys=sampling.step_keys(0, 3, [0, 1, 2], 4), plan=stock_plan(model, gen)))
    assert [c.token_ids for c in outs[0]] == [c.token_ids for c in outs[1]]
    assert any(len(c.turns) > 1 for c in outs[0])


def _loss(model, batch: MicroBatch) -> float:
    settings = LossSettings.from_config(type("C", (), {"grpo": GrpoConfig(group_size=2), "async_": AsyncConfig(),
                                                       "generation": GenerationConfig()})())
    (loss, _, _), _ = loss_and_grad(model, batch, settings, 1.0, float(mx.sum(batch.mask).item()), 1, compiled=False)
    return float(loss.item())


@pytest.mark.parametrize("group", [1, 2])
def test_the_loss_of_a_multi_turn_completion_is_the_hand_built_sequence_s_with_its_mask(tool_model, group):
    model, tokenizer = tool_model
    prompt, completions = _generate(model, tokenizer, length=100)
    cut = len(completions[1].token_ids) - 3
    completions[1] = rollout.Completion(0, completions[1].token_ids[:cut], "", "length", mask=completions[1].mask[:cut])
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


def test_the_stored_tool_calls_carry_the_error_of_each_call_that_ran_and_failed():
    turns = [
        Turn(role="assistant", content='<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
                                       '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'),
        Turn(role="tool", content="Error: wrong arguments", name="add", arguments={"a": 1}, error="wrong arguments"),
        Turn(role="tool", content="3", name="add", arguments={"a": 1, "b": 2}),
        Turn(role="assistant", content='<tool_call>{"name": "nope", "arguments": {}}</tool_call>'),
        Turn(role="tool", content="Error: unknown tool", name="nope", arguments={}, error="unknown tool"),
        Turn(role="assistant", content="<tool_call>{oops</tool_call> <answer>3</answer>"),
    ]
    calls = agent.tool_calls(turns)
    assert [(c.index, c.name, c.status, c.error) for c in calls] == [
        (0, "add", "ok", "wrong arguments"), (1, "add", "ok", None), (2, "nope", "ok", "unknown tool"),
        (3, None, "invalid_json", calls[3].error)]
    assert calls[3].error


def test_keyed_agent_draws_take_the_planned_host_draw(monkeypatch):
    """On the CPU with a large vocabulary (the plan's host_sampling) an agent row draws with the
    numpy inverse-CDF, as the plain rollout does, not with MLX's Gumbel-max over every logit."""
    import mlx.core as mx

    from grpo_tui.protocol.config import GenerationConfig
    from grpo_tui.worker.engine.policy import agent, sampling
    from grpo_tui.worker.engine.accel import host_sampling

    calls = []
    real = host_sampling.draw
    monkeypatch.setattr(host_sampling, "draw", lambda *a, **k: calls.append(1) or real(*a, **k))
    gen = GenerationConfig(top_p=0.9)
    keys = sampling.step_keys(3, 1, [0, 1], 2)
    logits = mx.random.normal((4, 50))
    positions = mx.array([0, 5, 2, 7], dtype=mx.uint32)
    tokens = agent._Picker(gen, False, keys, host=True)(logits, positions)
    assert calls and not agent._Picker(gen, False, keys, host=True).normalize
    expected = sampling.KeyedSampler(gen, keys, host=True).draw(logits, mx.array(keys, dtype=mx.uint32), positions)
    assert tokens.tolist() == expected.tolist()
