"""Multi-turn rollouts with tools (``[[tools]]``): the model calls a tool, reads its result, goes on.

Rounds: every row is generated as usual (``rollout.generate``); a row whose text closes a
``<tool_call>`` is cut right after that ``</tool_call>`` (the tokens sampled after it never saw the
result, and a prefix of a sample is itself a sample), the call runs (``tools.run_call``), and the
chat template's rendering of the tool message (the assistant turn's closing, the ``tool`` message,
the next generation prompt) is appended to the row's context. The rows that called a tool are then
generated again from their contexts, the others are done and never regenerated; this repeats until
no row calls a tool, each row bounded by ``generation.max_tool_calls`` and by
``max_completion_length`` (model and tool tokens together).

Each completion's ``mask`` marks the tokens the model sampled (1) apart from the tool-result and
template tokens (0): the trainer's loss, log-probs, KL and length metrics count only the former.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from grpo_tui.protocol.config import GenerationConfig
from grpo_tui.protocol.messages import ToolCall, Turn

from . import rollout
from .accel import fastgen
from .parsing import parse_tool_calls
from .plan import EnginePlan
from .rewards import describe_error
from .tools import Tool, ToolError, run_call

CLOSE = "</tool_call>"
_MARK = "GRPOTUIASSISTANTTURNEND"  # stands for the model's turn when the template renders a tool message


def tool_message_ids(tokenizer: Any, turns: list[Turn], enable_thinking: bool) -> list[int]:
    """The tokens the chat template puts after an assistant turn that called tools: its closing,
    one ``tool`` message per result and the next assistant generation prompt."""
    if getattr(tokenizer, "chat_template", None) is None:  # data.render joins messages with blank lines
        return list(tokenizer.encode("".join(f"\n\n{t.content}" for t in turns) + "\n\n"))
    messages = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _MARK}]
    messages += [{"role": "tool", "name": t.name or "", "content": t.content} for t in turns]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                         enable_thinking=enable_thinking)
    glue = text[text.rindex(_MARK) + len(_MARK):]
    return list(tokenizer.encode(glue, add_special_tokens=False))


def tool_call_end(tokenizer: Any, ids: list[int]) -> int | None:
    """The shortest prefix length of ``ids`` whose text closes a ``<tool_call>``, or ``None``."""
    if CLOSE not in tokenizer.decode(ids):
        return None
    lo, hi = 1, len(ids)  # "the prefix's text holds </tool_call>" only turns true as the prefix grows
    while lo < hi:
        mid = (lo + hi) // 2
        if CLOSE in tokenizer.decode(ids[:mid]):
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass
class _Row:
    prompt: list[int]
    prompt_index: int
    tokens: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    calls: int = 0
    finish_reason: str = "length"

    @property
    def context(self) -> list[int]:
        return self.prompt + self.tokens


def generate(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    n: int,
    gen: GenerationConfig,
    tools: list[Tool],
    *,
    greedy: bool = False,
    plan: EnginePlan | None = None,
    decode: fastgen.DecodeStep | None = None,
) -> list[rollout.Completion]:
    """``n`` multi-turn completions per prompt, ordered as ``rollout.generate``'s, each with its
    ``mask`` and ``turns``."""
    by_name = {t.name: t for t in tools}
    rows = [_Row(prompts[i // n], i // n) for i in range(len(prompts) * n)]
    active = list(range(len(rows)))
    outputs = rollout.generate(model, tokenizer, prompts, n, gen, greedy=greedy, logprobs=False, plan=plan,
                               decode=decode)
    while True:
        again = []
        for index, out in zip(active, outputs):
            row = rows[index]
            budget = gen.max_completion_length - len(row.tokens)
            ids, stopped = out.token_ids[:budget], out.finish_reason == "stop" and len(out.token_ids) <= budget
            if _absorb(row, ids, stopped, tokenizer, by_name, gen):
                again.append(index)
        if not again:
            break
        active = again
        longest = max(gen.max_completion_length - len(rows[i].tokens) for i in again)
        outputs = rollout.generate(model, tokenizer, [rows[i].context for i in again], 1,
                                   msgspec.structs.replace(gen, max_completion_length=longest),
                                   greedy=greedy, logprobs=False, plan=plan, decode=decode)
    return [_completion(row, tokenizer) for row in rows]


def _absorb(row: _Row, ids: list[int], stopped: bool, tokenizer: Any, tools: dict[str, Tool],
            gen: GenerationConfig) -> bool:
    """Add one round's sampled ``ids`` to ``row``; True when a tool ran and the row goes on."""
    cut = tool_call_end(tokenizer, ids) if row.calls < gen.max_tool_calls else None
    if cut is not None:
        text = tokenizer.decode(ids[:cut])
        closed = [c for c in parse_tool_calls(text) if c.raw.endswith(CLOSE)]
        result = run_call(tools, closed[-1]) if closed else None
        glue = tool_message_ids(tokenizer, [result], gen.enable_thinking) if result is not None else []
        # The result must fit with room for at least one more sampled token; a row without room
        # keeps what it sampled and ends there (the call ran, but the model never read its result).
        if result is not None and len(row.tokens) + cut + len(glue) < gen.max_completion_length:
            row.tokens += ids[:cut] + glue
            row.mask += [1] * cut + [0] * len(glue)
            row.turns += [Turn(role="assistant", content=text), result]
            row.calls += 1
            return True
    body = ids[:-1] if stopped else ids
    row.tokens += ids
    row.mask += [1] * len(ids)
    row.turns.append(Turn(role="assistant", content=tokenizer.decode(body)))
    row.finish_reason = rollout.finish_reason(body, stopped)
    return False


def _completion(row: _Row, tokenizer: Any) -> rollout.Completion:
    model_text = "".join(t.content for t in row.turns if t.role == "assistant")
    stopped = row.finish_reason == "stop"
    return rollout.Completion(
        prompt_index=row.prompt_index,
        token_ids=row.tokens,
        text=model_text,
        finish_reason=row.finish_reason,
        mask=row.mask,
        turns=row.turns,
        transcript=tokenizer.decode(row.tokens[:-1] if stopped else row.tokens),
    )


def tool_calls(turns: list[Turn]) -> list[ToolCall]:
    """The parsed ``<tool_call>`` blocks of an agent completion's turns, numbered through, each call
    that ran and failed carrying its error (the store's ``tool_calls`` rows, which the Database
    tab's "a failed tool call" filter reads)."""
    out: list[ToolCall] = []
    for i, turn in enumerate(turns):
        if turn.role != "assistant":
            continue
        calls = parse_tool_calls(turn.content)
        ran = turns[i + 1] if i + 1 < len(turns) and turns[i + 1].role == "tool" else None
        if ran is not None and calls and ran.error is not None and calls[-1].error is None:
            calls[-1] = msgspec.structs.replace(calls[-1], error=ran.error)  # the call that ran is the turn's last
        out += [msgspec.structs.replace(c, index=len(out) + k) for k, c in enumerate(calls)]
    return out


def check_template(tokenizer: Any, enable_thinking: bool) -> None:
    """Fail at the start, not mid-rollout, when the chat template cannot render a ``tool`` message
    (some templates only allow alternating user and assistant turns)."""
    try:
        tool_message_ids(tokenizer, [Turn(role="tool", content="0", name="check")], enable_thinking)
    except Exception as exc:  # noqa: BLE001 — a Jinja error raised by the template: say what it means
        raise ToolError(f"tools: the model's chat template cannot render a tool result message ({describe_error(exc)})") from None
