"""Multi-turn rollouts with tools (``[[tools]]``): the model calls tools, reads their results, goes on.

**Turns.** An assistant turn ends at the model's own end-of-turn token (the tokenizer's EOS, e.g.
Qwen's ``<|im_end|>``), as TRL's tool loop and the Qwen chat template have it. Every closed
``<tool_call>`` block of that turn then runs, in order, and the results are appended as ``tool``
messages rendered by the chat template (``tool_glue``: the rest of the template's turn closing, one
``tool`` message per result, the next generation prompt); the row then goes on. A turn without a
closed call ends the completion (finish reason ``stop``), as do a stop string and the repetition
stop. Nothing is sampled and then thrown away: the turn's tokens, its end-of-turn token included,
are the model's and are trained on. Bounds: ``generation.max_tool_calls`` calls per completion (a
turn whose calls do not all fit ends the completion, none of them run), ``max_completion_length``
over the model's and the tool messages' tokens (a result that leaves no room for one more token
ends the row with what it sampled; its tool turns are kept, marked ``unread``, so a failed call's
error still reaches the store).

**No whole-batch stall.** Rows are continuous: a row whose turn ended on tool calls pauses, its
calls run on a thread of their own (``tools.run_call`` with each tool's timeout), and the decode
loop keeps stepping the other rows; when the results are back the row is fed the tool messages
and samples again. Only when every unfinished row waits for a tool does the loop block, on the
first tool to finish. (A tool that waits, on I/O, a subprocess or a sleep, costs the loop nothing;
one that computes in Python holds the GIL while it runs and slows the loop's host side.) Two
decoders behind one interface (step / pause / resume / end):

- llama-family models without logits processors (the plan's ``fast_rollout``):
  ``accel.rowgen.CompiledRows``, fastgen's compiled fixed-shape step with one cache position per
  row. A paused row costs its slot in the batch and nothing else; rows without tools get exactly
  the plain compiled rollout's tokens at 1.06-1.09x its time (``bench/agent_rollout.py``). The tool
  messages go in one token per step as forced inputs, inside the same compiled step: no second
  prefill shape, no retrace. mlx-lm's ``BatchGenerator`` removes the stall too, but runs every
  step op by op, which is what the compiled loop exists to avoid (docs/architecture.md,
  "Accelerations").
- everything else: ``generator_rows.GeneratorRows``, mlx-lm's ``BatchGenerator``, whose
  ``insert`` takes a paused row back with its KV cache and the tool messages as its prompt.

The alternative, rounds (generate every row, run the tools of the rows that called one, generate
those rows again), made every tool wait for the slowest row of its round and every row wait for
the slowest tool; ``bench/agent_rollout.py`` rebuilds it to measure the difference.

**Sampling.** With ``keys`` (the trainer's ``sampling.step_keys``) every row draws from its own
keyed stream at its own token position (``sampling.KeyedSampler.draw``; the position counts the
model's and the tool messages' tokens), so a row's tokens do not depend on the rows beside it:
an agent step on 2 ranks equals 1 rank, and a resumed step replays. Without keys (demo, tests),
mlx-lm's sampler.

Each completion's ``mask`` marks the tokens the model sampled (1) apart from the tool-message
tokens (0): the trainer's loss, log-probs, KL and length metrics count only the former.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
import msgspec

from grpo_tui.protocol.config import GenerationConfig
from grpo_tui.protocol.messages import ToolCall, Turn
from grpo_tui.worker.engine.policy import rollout
from grpo_tui.worker.engine.accel import fastgen
from grpo_tui.worker.engine.accel.rowgen import CompiledRows
from grpo_tui.worker.engine.policy.generator_rows import GeneratorRows
from grpo_tui.worker.engine.policy.parsing import parse_tool_calls
from grpo_tui.worker.engine.models.plan import EnginePlan
from grpo_tui.worker.engine.scoring.rewards import describe_error
from grpo_tui.worker.engine.policy.sampling import KeyedSampler
from grpo_tui.worker.engine.policy.stopping import cut_at_stop, make_row_stops
from grpo_tui.worker.engine.scoring.tools import RowTools, Tool, ToolError, run_call

CLOSE = "</tool_call>"
_MARK = "GRPOTUIASSISTANTTURNEND"  # stands for the model's turn when the template renders a tool message


def tool_message_ids(tokenizer: Any, turns: list[Turn], enable_thinking: bool) -> list[int]:
    """The tokens the chat template puts after an assistant turn that called tools: its closing,
    one ``tool`` message per result and the next assistant generation prompt."""
    if getattr(tokenizer, "chat_template", None) is None:  # data.render joins messages with blank lines
        return list(tokenizer.encode("".join(f"\n\n{t.content}" for t in turns) + "\n\n"))
    messages = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _MARK}]
    messages += [{"role": "tool", "name": t.name or "", "content": t.content} if t.role == "tool"
                 else {"role": t.role, "content": t.content} for t in turns]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                         enable_thinking=enable_thinking)
    glue = text[text.rindex(_MARK) + len(_MARK):]
    return list(tokenizer.encode(glue, add_special_tokens=False))


def tool_glue(tokenizer: Any, turns: list[Turn], enable_thinking: bool, turn_end: int | None) -> list[int]:
    """The tokens between an assistant turn that ended with the model's own end-of-turn token
    ``turn_end`` and the model's next turn: ``tool_message_ids`` without the template's closing of
    the turn when that closing is the same token (the model wrote it, and it is trained on)."""
    ids = tool_message_ids(tokenizer, turns, enable_thinking)
    return ids[1:] if ids and turn_end is not None and ids[0] == turn_end else ids


def closed_calls(text: str) -> list[ToolCall]:
    """The ``<tool_call>`` blocks of one turn's text that are closed (they run, in this order)."""
    return [c for c in parse_tool_calls(text) if c.raw.endswith(CLOSE)]


def run_calls(tools: dict[str, Tool], calls: list[ToolCall]) -> list[Turn]:
    """One turn's calls, one after the other (a tool may depend on an earlier call's effect)."""
    return [run_call(tools, c) for c in calls]


@dataclass
class _Row:
    tokens: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    turn_start: int = 0  # where the current assistant turn begins in ``tokens``
    calls: int = 0
    finish_reason: str | None = None  # set when the row is done
    ended_on_eos: bool = False  # its last token is the model's end of turn (not in the transcript's text)


class _Picker:
    """Each row's next token from its logits: greedy, keyed (the row's own key and position), or
    mlx-lm's sampler (``mx.random``)."""

    def __init__(self, gen: GenerationConfig, greedy: bool, keys: list[int] | None, host: bool = False) -> None:
        self.greedy = greedy
        self.keyed = KeyedSampler(gen, keys, host=host) if keys is not None and not greedy else None
        self.keys = mx.array(keys if keys is not None else [], dtype=mx.uint32)
        self.sampler = rollout.make_sampling(gen, greedy)[0]
        # top-p and min-p read probabilities off the log-probs; the other draws, and the host draw
        # (plan.host_sampling: it takes any shift per row), ignore a shift
        self.normalize = not greedy and not (host and self.keyed) and (gen.top_p < 1.0 or gen.min_p > 0.0)

    def __call__(self, logits: mx.array, positions: mx.array) -> mx.array:
        """Every row at once (``accel.rowgen``)."""
        return self._draw(logits, self.keys, positions)

    def row(self, logprobs: mx.array, row: int, position: int) -> mx.array:
        """One row (``generator_rows``)."""
        return self._draw(logprobs, self.keys[row : row + 1], mx.array([position], dtype=mx.uint32))

    def _draw(self, logits: mx.array, keys: mx.array, positions: mx.array) -> mx.array:
        if self.greedy:
            return mx.argmax(logits, axis=-1).astype(mx.uint32)
        if self.normalize:
            logits = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        if self.keyed is None:
            return self.sampler(logits)
        return self.keyed.draw(logits, keys, positions)


def decoder(model: Any, prompts: list[list[int]], n: int, gen: GenerationConfig, stop_ids: set[int],
            pick: _Picker, plan: EnginePlan, decode: fastgen.DecodeStep | None) -> Any:
    """The continuous decoder the plan picks (see the module docstring)."""
    if plan.fast_rollout:
        return CompiledRows(model, prompts, n, gen.max_completion_length, pick, decode)
    sampler, processors = rollout.make_sampling(gen, pick.greedy)
    return GeneratorRows(model, prompts, n, gen.max_completion_length, stop_ids, sampler, processors,
                         bool(plan.one_row_rollout), pick.row if pick.keyed is not None else None)


def generate(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    n: int,
    gen: GenerationConfig,
    tools: list[Tool],
    *,
    greedy: bool = False,
    plan: EnginePlan,
    decode: fastgen.DecodeStep | None = None,
    keys: list[int] | None = None,
    rows_decoder: Any = None,
    row_tools: list[RowTools] | None = None,
) -> list[rollout.Completion]:
    """``n`` multi-turn completions per prompt, ordered as ``rollout.generate``'s, each with its
    ``mask`` and ``turns``. ``keys``: one ``sampling.row_key`` per row. ``rows_decoder``: a
    decoder already built (tests count its steps), else ``decoder(...)``. ``row_tools``: each
    row's own tools and ``respond`` (an ``[environment]``'s episode: ``environments.row_tools``), else
    ``tools``; a row whose turn ended on its end-of-turn token without a call and that has a
    ``respond`` pauses while it runs, then reads the reply as a ``user`` message (masked, as tool
    results are) and goes on; ``None`` from it ends the row."""
    by_name = {t.name: t for t in tools}
    stop_ids = set(tokenizer.eos_token_ids)
    rows = [_Row() for _ in range(len(prompts) * n)]
    rules = make_row_stops(len(rows), tokenizer, gen)
    pick = _Picker(gen, greedy, keys, host=plan.host_sampling)
    rows_decoder = rows_decoder or decoder(model, prompts, n, gen, stop_ids, pick, plan, decode)
    running: dict[int, Future[list[Turn]]] = {}
    with ThreadPoolExecutor(max_workers=len(rows), thread_name_prefix="tool") as pool:
        try:
            while True:
                for i in [i for i, f in running.items() if f.done()]:
                    results = running.pop(i).result()
                    if not results:  # the environment ended the episode
                        rows_decoder.end(i)
                        continue
                    rows[i].finish_reason, rows[i].ended_on_eos = None, False
                    _resume(i, rows[i], results, tokenizer, gen, rows_decoder)
                if not rows_decoder.active:
                    if not running:
                        break
                    wait(list(running.values()), return_when=FIRST_COMPLETED)  # every live row waits for a tool
                    continue
                for i, token in rows_decoder.step():
                    calls = _take(i, rows[i], token, tokenizer, gen, stop_ids, rules)
                    reply = row_tools[i].respond if row_tools is not None else None
                    if calls:
                        running[i] = pool.submit(run_calls, row_tools[i].tools if row_tools is not None else by_name, calls)
                        rows_decoder.pause(i)
                    elif (reply is not None and rows[i].finish_reason == "stop" and rows[i].ended_on_eos
                          and not closed_calls(rows[i].turns[-1].content)):  # not a turn past max_tool_calls
                        running[i] = pool.submit(_reply, reply, rows[i].turns[-1].content)
                        rows_decoder.pause(i)
                    elif rows[i].finish_reason is not None:
                        rows_decoder.end(i)
        finally:
            rows_decoder.close()
    return [_completion(i // n, row, tokenizer) for i, row in enumerate(rows)]


def _take(i: int, row: _Row, token: int, tokenizer: Any, gen: GenerationConfig, stop_ids: set[int],
          rules: Any) -> list[ToolCall]:
    """Add one sampled token to ``row``; the calls to run when it ended a turn that called tools."""
    row.tokens.append(token)
    row.mask.append(1)
    stopped = token in stop_ids
    early = rules.push(i, token) if rules is not None and not stopped else None
    full = len(row.tokens) >= gen.max_completion_length
    if not (stopped or early or full):
        return []
    body = row.tokens[row.turn_start : len(row.tokens) - stopped]
    text = tokenizer.decode(body)
    if early == "stop":
        text = cut_at_stop(text, gen.stop)[0]  # vLLM's default: the stop string is not in the text
    row.turns.append(Turn(role="assistant", content=text))
    calls = closed_calls(text) if stopped and not full else []
    if calls and row.calls + len(calls) <= gen.max_tool_calls:
        return calls
    row.finish_reason = early or rollout.finish_reason(body, stopped)
    row.ended_on_eos = stopped
    return []


def _reply(respond: Any, text: str) -> list[Turn]:
    """The environment's reply to a turn without a call: ``[user turn]``, or ``[]`` to end."""
    turn = respond(text)
    return [] if turn is None else [turn]


def _resume(i: int, row: _Row, results: list[Turn], tokenizer: Any, gen: GenerationConfig, rows_decoder: Any) -> None:
    """A paused row's tool results are back: feed them as tool messages, or end the row when they
    leave no room for one more token (the calls ran, but the model never reads their results)."""
    glue = tool_glue(tokenizer, results, gen.enable_thinking, row.tokens[-1])
    if len(row.tokens) + len(glue) >= gen.max_completion_length:
        # the calls ran (their errors belong in the store), but no token of them is in the completion
        row.turns += [msgspec.structs.replace(t, unread=True) for t in results]
        row.calls += sum(t.role == "tool" for t in results)
        row.finish_reason = "length"
        rows_decoder.end(i)
        return
    row.tokens += glue
    row.mask += [0] * len(glue)
    row.turns += results
    row.calls += sum(t.role == "tool" for t in results)  # an environment's replies are no calls
    row.turn_start = len(row.tokens)
    rows_decoder.resume(i, glue)


def _completion(prompt_index: int, row: _Row, tokenizer: Any) -> rollout.Completion:
    model_text = "".join(t.content for t in row.turns if t.role == "assistant")
    return rollout.Completion(
        prompt_index=prompt_index,
        token_ids=row.tokens,
        text=model_text,
        finish_reason=row.finish_reason or "length",
        mask=row.mask,
        turns=row.turns,
        transcript=tokenizer.decode(row.tokens[:-1] if row.ended_on_eos else row.tokens),
    )


def tool_calls(turns: list[Turn]) -> list[ToolCall]:
    """The parsed ``<tool_call>`` blocks of an agent completion's turns, numbered through, each call
    that ran and failed carrying its error (the store's ``tool_calls`` rows, which the Database
    tab's "a failed tool call" filter reads). The tool turns after an assistant turn are its
    closed calls' results, in order."""
    out: list[ToolCall] = []
    for i, turn in enumerate(turns):
        if turn.role != "assistant":
            continue
        calls = parse_tool_calls(turn.content)
        ran = []
        for later in turns[i + 1 :]:
            if later.role != "tool":
                break
            ran.append(later)
        closed = [k for k, c in enumerate(calls) if c.raw.endswith(CLOSE)]
        for k, result in zip(closed, ran):
            if result.error is not None and calls[k].error is None:
                calls[k] = msgspec.structs.replace(calls[k], error=result.error)
        out += [msgspec.structs.replace(c, index=len(out) + k) for k, c in enumerate(calls)]
    return out


def check_template(tokenizer: Any, enable_thinking: bool) -> None:
    """Fail at the start, not mid-rollout, when the chat template cannot render a ``tool`` message
    (some templates only allow alternating user and assistant turns)."""
    try:
        tool_message_ids(tokenizer, [Turn(role="tool", content="0", name="check")], enable_thinking)
    except Exception as exc:  # noqa: BLE001 — a Jinja error raised by the template: say what it means
        raise ToolError(f"tools: the model's chat template cannot render a tool result message ({describe_error(exc)})") from None
