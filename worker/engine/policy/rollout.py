"""Rollouts: ``n`` sampled completions per prompt.

When the plan says ``fast_rollout`` (llama-family models without a repetition penalty), rollouts go
through ``accel.fastgen``: one prefill per prompt and a compiled fixed-shape decode step. Everything else drives mlx-lm's continuous-batching
``BatchGenerator`` directly (not ``batch_generate``: we need each completion's finish reason and
its stop token, which is part of what the policy chose and is trained on). Either way token ids come
straight from the sampler, never from re-tokenizing text.

Log-probs: both report the log-prob of each sampled token under the *processed* distribution
(after any repetition penalty, before temperature / top-p / top-k / min-p), which is not the
distribution the loss uses (logits / temperature; docs/architecture.md, "Step data path"). They are kept on the completion for
inspection only; the trainer takes its "old" log-probs from its own first forward pass on the
rollout, before any update (see ``logps``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
from mlx_lm.generate import BatchGenerator
from mlx_lm.sample_utils import make_logits_processors, make_sampler

from grpo_tui.protocol.config import GenerationConfig
from grpo_tui.protocol.messages import Turn
from grpo_tui.worker.engine.accel import fastgen
from grpo_tui.worker.engine.models.plan import EnginePlan
from grpo_tui.worker.engine.policy.sampling import KeyedSampler
from grpo_tui.worker.engine.policy.stopping import cut_at_stop, make_row_stops

# A length-limited completion whose tail is one block of 1..MAX_PERIOD tokens repeated at least
# MIN_REPEATS times (and covering at least MIN_SPAN tokens) finished by "repetition".
MAX_PERIOD = 32
MIN_REPEATS = 3
MIN_SPAN = 8


@dataclass
class Completion:
    prompt_index: int
    token_ids: list[int]  # generated ids, the stop token included when finish_reason == "stop"
    text: str  # decoded ids without the stop token
    finish_reason: str  # stop | length | repetition
    sampling_logprobs: list[float] = field(default_factory=list)
    # Agent rollouts (engine.agent) only: 1 on the tokens the model sampled, 0 on tool-result and
    # template tokens; the conversation turn by turn; every token decoded, tool results included.
    mask: list[int] | None = None
    turns: list[Turn] = field(default_factory=list)
    transcript: str | None = None

    @property
    def model_tokens(self) -> int:
        """How many of ``token_ids`` the model sampled (what length metrics count)."""
        return len(self.token_ids) if self.mask is None else sum(self.mask)


def repetition_period(tokens: list[int], max_period: int = MAX_PERIOD, min_repeats: int = MIN_REPEATS,
                      min_span: int = MIN_SPAN) -> int | None:
    """The smallest period p such that the last ``max(min_repeats·p, min_span)`` tokens repeat with
    period p (``tokens[-i] == tokens[-i-p]``), or ``None``: the signature of a model looping."""
    n = len(tokens)
    for p in range(1, max_period + 1):
        span = max(min_repeats * p, min_span)
        if span > n:
            break
        tail = tokens[n - span :]
        if all(tail[i] == tail[i - p] for i in range(p, span)):
            return p
    return None


def finish_reason(tokens: list[int], stopped: bool) -> str:
    if stopped:
        return "stop"
    return "repetition" if repetition_period(tokens) is not None else "length"


def make_sampling(gen: GenerationConfig, greedy: bool = False) -> tuple[Any, list[Any]]:
    """(sampler, logits processors) for the generation config; greedy decoding when ``greedy``."""
    sampler = make_sampler(
        temp=0.0 if greedy else gen.temperature,
        top_p=gen.top_p if gen.top_p < 1.0 else 0.0,
        min_p=gen.min_p,
        top_k=gen.top_k,
    )
    processors = make_logits_processors(
        repetition_penalty=gen.repetition_penalty if gen.repetition_penalty != 1.0 else None
    )
    return sampler, processors


def generate(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    n: int,
    gen: GenerationConfig,
    *,
    greedy: bool = False,
    logprobs: bool = True,
    plan: EnginePlan,
    decode: fastgen.DecodeStep | None = None,
    keys: list[int] | None = None,
) -> list[Completion]:
    """``n`` completions for each prompt (token ids), ordered prompt by prompt: result[i * n + j].
    ``logprobs=False`` leaves ``sampling_logprobs`` empty (the trainer does not need them). The
    ``plan`` picks the path (the compiled loop, mlx-lm's BatchGenerator, one row at a time) and
    the sampler; ``decode`` is the trainer's compiled decode step (built here without it). ``keys`` (one
    ``sampling.row_key`` per row): the compiled loop draws each row from its own keyed stream, so
    the tokens do not depend on the batch a row is in (ranks, resume). mlx-lm's BatchGenerator
    drops finished rows from its batch, so its sampler cannot tell the rows apart: it ignores
    ``keys`` and draws from ``mx.random`` (not rank-invariant; the trainer logs it). On the plan's
    ``host_sampling`` the compiled loop always draws keyed (without ``keys``, from keys taken off
    ``mx.random``), since that draw is the fast one there."""
    sampler, processors = make_sampling(gen, greedy)
    stop_ids = set(tokenizer.eos_token_ids)
    rules = make_row_stops(len(prompts) * n, tokenizer, gen)
    if plan.fast_rollout:
        # top-p and min-p read probabilities off the log-probs; greedy, top-k and temperature
        # sampling do not care about a constant shift of the logits.
        normalized = not greedy and (gen.top_p < 1.0 or gen.min_p > 0.0)
        host = plan.host_sampling
        if keys is None and host and not greedy:  # no rank to agree with: keys from mx.random's stream
            keys = mx.random.randint(0, 2**31, (len(prompts) * n,)).tolist()
        if keys is not None and not greedy:
            sampler = KeyedSampler(gen, keys, host=host)
        tokens, stopped, sampled = fastgen.generate_tokens(
            model, prompts, n, gen.max_completion_length, stop_ids, sampler, logprobs=logprobs, normalized=normalized,
            fast_exp=plan.cpu_kernels, decode=decode, row_stops=rules,
        )
    elif plan.one_row_rollout:
        tokens, stopped, sampled = [], [], []
        for prompt in (p for p in prompts for _ in range(n)):  # one row per BatchGenerator: no padding mask
            t, s, lp = _batch_generator(model, [prompt], 1, gen, stop_ids, sampler, processors, logprobs)
            tokens += t
            stopped += s
            sampled += lp
    else:
        tokens, stopped, sampled = _batch_generator(
            model, prompts, n, gen, stop_ids, sampler, processors, logprobs, rules
        )
    out = []
    for i, ids in enumerate(tokens):
        body = ids[:-1] if stopped[i] else ids
        text, early = tokenizer.decode(body), rules.reasons[i] if rules is not None else None
        if early == "stop":
            text = cut_at_stop(text, gen.stop)[0]  # vLLM's default: the stop string is not in the text
        out.append(
            Completion(
                prompt_index=i // n,
                token_ids=ids,
                text=text,
                finish_reason=early or finish_reason(body, stopped[i]),
                sampling_logprobs=sampled[i],
            )
        )
    return out


def _batch_generator(model, prompts, n, gen, stop_ids, sampler, processors, logprobs, rules=None):
    """mlx-lm's continuous batching: any architecture, any logits processor. A row that ``rules``
    end is removed from the batch (the rest keep going)."""
    total = len(prompts) * n
    generator = BatchGenerator(
        model,
        max_tokens=gen.max_completion_length,
        stop_tokens=[[t] for t in sorted(stop_ids)],
        sampler=sampler,
        logits_processors=processors,
        completion_batch_size=total,
        prefill_batch_size=total,
    )
    flat = [p for p in prompts for _ in range(n)]
    uids = generator.insert(flat)
    slot = {uid: i for i, uid in enumerate(uids)}
    tokens: list[list[int]] = [[] for _ in flat]
    picked: list[tuple[list[int], mx.array]] = []  # (rows, their sampled tokens' log-probs) per decode step
    stopped = [False] * total
    ended: set[int] = set()
    try:
        while responses := generator.next_generated():
            responses = [r for r in responses if slot[r.uid] not in ended]
            if not responses:
                continue
            rows = [slot[r.uid] for r in responses]
            if logprobs:
                # One small array per decode step, evaluated right away: holding every token's
                # (vocabulary-sized) log-prob row until the end cost memory and one eval per completion.
                step_lps = mx.stack([r.logprobs[r.token] for r in responses])
                mx.async_eval(step_lps)
                picked.append((rows, step_lps))
            for i, r in zip(rows, responses):
                tokens[i].append(r.token)
                if r.finish_reason == "stop":
                    stopped[i] = True
                elif r.finish_reason is None and rules is not None and rules.push(i, r.token):
                    ended.add(i)
                    generator.remove([r.uid])
    finally:
        generator.close()

    sampled: list[list[float]] = [[] for _ in flat]
    for rows, step_lps in picked:
        for i, value in zip(rows, step_lps.tolist()):
            sampled[i].append(value)
    return tokens, stopped, sampled
