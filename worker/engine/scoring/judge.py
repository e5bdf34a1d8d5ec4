"""A judge model as a reward (``[[rewards]] judge = { model, prompt, score }``; docs/config.md).

The judge is any mlx-lm model, loaded once when the trainer builds its rewards, frozen and never
trained. Each completion becomes one judge input: ``prompt`` with ``{prompt}`` and ``{completion}``
filled in, as a user message through the judge's chat template (raw text for a tokenizer without
one). The step's inputs are scored in batches of ``batch_size``:

- ``score = "yes_probability"``: one forward pass; the score is the probability of the first token
  of ``yes`` (and of its capitalised and space-led spellings when the tokenizer has them as single
  tokens) as the judge's next token, in [0, 1].
- ``score = "number"``: a greedy reply of at most ``max_tokens`` tokens; the score is the first
  number in it, ``None`` (not applicable, with a note) when it holds none.

It runs on the MLX thread (``Reward.inline``), not on a reward thread: MLX's streams belong to the
thread that made them. ``seconds`` adds up its time for the step's ``judge/seconds`` metric.
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable

import mlx.core as mx
from mlx.utils import tree_flatten

from grpo_tui.protocol.config import GenerationConfig, JudgeConfig
from grpo_tui.worker.engine.models import model_io, plan as engine_plan
from grpo_tui.worker.engine.accel.llama_family import head_logits, is_llama_family

NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def _text(prompt: Any) -> str:
    """A prompt as text: a string as is; chat messages as their last user message's content."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if users:
            return str(users[-1])
    return str(prompt)


class Judge:
    """One judge model and its scoring rule; called as a built-in reward is."""

    __name__ = "judge"

    def __init__(self, config: JudgeConfig) -> None:
        self.config = config
        self.model, self.tokenizer = model_io._load(config.model)
        self.plan = engine_plan.for_generation(self.model)  # greedy replies: MLX's own kernels
        self.model.freeze()
        self.model.eval()
        mx.eval(self.model.parameters())
        self.seconds = 0.0
        self.yes_ids = self._answer_ids(config.yes)

    @property
    def nbytes(self) -> int:
        """The judge's weights in bytes (what ``memory_limit_gb`` counts for it)."""
        return sum(v.nbytes for _, v in tree_flatten(self.model.parameters()))

    def _answer_ids(self, word: str) -> list[int]:
        ids = [self.tokenizer.encode(word, add_special_tokens=False)[0]]
        for variant in {word.capitalize(), " " + word, " " + word.capitalize()} - {word}:
            encoded = self.tokenizer.encode(variant, add_special_tokens=False)
            if len(encoded) == 1 and encoded[0] not in ids:
                ids.append(encoded[0])
        return ids

    def _encode(self, prompt: Any, completion: str) -> list[int]:
        text = self.config.prompt.replace("{prompt}", _text(prompt)).replace("{completion}", completion)
        if getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                     tokenize=True, enable_thinking=False)
            return list(ids)
        return list(self.tokenizer.encode(text))

    def __call__(self, prompts: list, completions: list[str], log_extra: Callable | None = None,
                 **_: Any) -> list[float | None]:
        t0 = time.perf_counter()
        inputs = [self._encode(p, c) for p, c in zip(prompts, completions)]
        size = self.config.batch_size
        scores: list[float | None] = []
        replies: list[str | None] = []
        for start in range(0, len(inputs), size):
            part = inputs[start : start + size]
            if self.config.score == "yes_probability":
                scores += self._yes_probability(part)
            else:
                texts = self._replies(part)
                replies += texts
                scores += [_first_number(t) for t in texts]
        if replies and log_extra is not None:
            log_extra("judge", [f"judge replied {t!r}" for t in replies])
        self.seconds += time.perf_counter() - t0
        return scores

    def _last_logits(self, rows: list[list[int]]) -> mx.array:
        """(rows, vocabulary) logits after each row's last token. Rows are right-padded: under
        the causal mask a padding token after a row's end changes nothing before it."""
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id or 0
        tokens = mx.array([r + [pad] * (width - len(r)) for r in rows])
        last = mx.array([len(r) - 1 for r in rows])
        if is_llama_family(self.model):  # the head on the last positions only
            hidden = self.model.model(tokens)
            picked = mx.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0, :]
            return head_logits(self.model, picked).astype(mx.float32)
        logits = self.model(tokens)
        return mx.take_along_axis(logits, last[:, None, None], axis=1)[:, 0, :].astype(mx.float32)

    def _yes_probability(self, rows: list[list[int]]) -> list[float | None]:
        logits = self._last_logits(rows)
        probs = mx.softmax(logits, axis=-1)
        yes = mx.sum(probs[:, mx.array(self.yes_ids)], axis=-1)
        mx.eval(yes)
        return [min(1.0, max(0.0, float(v))) for v in yes.tolist()]

    def _replies(self, rows: list[list[int]]) -> list[str]:
        """Greedy replies of at most ``max_tokens`` tokens (the engine's batched rollout)."""
        from grpo_tui.worker.engine.policy import rollout

        gen = GenerationConfig(max_completion_length=self.config.max_tokens)
        done = rollout.generate(self.model, self.tokenizer, rows, 1, gen, greedy=True, logprobs=False, plan=self.plan)
        return [c.text for c in sorted(done, key=lambda c: c.prompt_index)]


def _first_number(text: str) -> float | None:
    found = NUMBER.search(text.replace(",", ""))
    return float(found.group()) if found else None


def weights_bytes(rewards: list[Any]) -> int:
    """The judges' weights among ``rewards`` (``rewards.Reward``), in bytes."""
    return sum(r.fn.nbytes for r in rewards if isinstance(r.fn, Judge))


def take_seconds(rewards: list[Any]) -> float | None:
    """The judges' time since the last call (None without a judge), and start counting again."""
    judges = [r.fn for r in rewards if isinstance(r.fn, Judge)]
    if not judges:
        return None
    seconds = sum(j.seconds for j in judges)
    for j in judges:
        j.seconds = 0.0
    return seconds


__all__ = ["Judge", "weights_bytes", "take_seconds"]
