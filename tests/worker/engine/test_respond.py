"""Multi-turn text episodes (an ``[environment]`` with ``respond``; docs/environments.md): each turn
the model ends without a tool call goes to ``respond``, whose reply the model reads as a ``user``
message in its context but out of its loss (the mask), until ``respond`` returns None."""

from __future__ import annotations

from pathlib import Path

import mlx_lm
import pytest

from grpo_tui.protocol.config import GenerationConfig
from grpo_tui.protocol.messages import Turn
from grpo_tui.worker.engine.policy import agent
from grpo_tui.worker.engine.accel import fastgen
from grpo_tui.worker.engine.scoring.tools import RowTools
from tests.helpers.plans import stock_plan

DEMO_MODEL = Path(__file__).resolve().parents[3] / "examples" / "models" / "tiny-agent"


@pytest.fixture(scope="module")
def demo():
    return mlx_lm.load(str(DEMO_MODEL))


def _judge(heard: list[str], replies: int):
    def respond(message: str) -> Turn | None:
        heard.append(message)
        return None if len(heard) > replies else Turn(role="user", content=f"no, try again ({len(heard)})")
    return respond


@pytest.mark.parametrize("kind", ["compiled", "generator"])
def test_each_reply_is_a_masked_user_message_and_none_ends_the_episode(demo, kind, monkeypatch):
    if kind == "generator":
        monkeypatch.setattr(fastgen, "supports", lambda *args: False)
    model, tokenizer = demo
    gen = GenerationConfig(max_completion_length=160, max_tool_calls=0)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is 12 * 34?"}], add_generation_prompt=True)
    heard: list[list[str]] = [[], []]
    rows = [RowTools({}, _judge(heard[0], 2)), RowTools({}, _judge(heard[1], 1))]
    completions = agent.generate(model, tokenizer, [prompt], 2, gen, [], greedy=True, plan=stock_plan(model, gen),
                                 row_tools=rows)
    for c, said, replies in zip(completions, heard, (2, 1)):
        roles = [t.role for t in c.turns]
        assert roles == ["assistant", "user"] * replies + ["assistant"] and c.finish_reason == "stop"
        assert said == [t.content for t in c.turns if t.role == "assistant"]  # respond read every model turn
        expected_mask: list[int] = []
        for t in c.turns:  # the model's tokens (its end of turn included) 1, each reply's template tokens 0
            if t.role == "assistant":
                expected_mask += [1] * (len(tokenizer.encode(t.content, add_special_tokens=False)) + 1)
            else:
                expected_mask += [0] * len(agent.tool_glue(tokenizer, [t], False, tokenizer.eos_token_id))
        assert c.mask == expected_mask and len(c.token_ids) == len(c.mask)
        assert "<|im_start|>user\nno, try again (1)<|im_end|>" in c.transcript
