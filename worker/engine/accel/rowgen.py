"""fastgen's compiled decode loop with one write position per row, for agent rollouts (engine.agent).

``fastgen.generate_tokens`` writes every row at one shared position, so the rows advance together.
Here each row has its own position in the static cache, so a row can

- **pause**: its turn ended on tool calls; it writes nothing new while its tools run;
- **be fed**: the tool messages' tokens go in one per step, through the same compiled step, as
  forced inputs (the row's cache is the same as if they had been sampled);
- **sample again**, from its own position,

while the other rows keep decoding. Every step has the same shapes (tokens (rows, 1), positions
(rows,)), so the step is traced once; the cache write is a scatter at each row's position instead
of one slice, the mask and RoPE take the per-row positions (``fastgen._forward`` does both). A
paused or finished row keeps its slot in the fixed-shape batch: it rewrites its next position
(which it overwrites when it goes on) and its output is dropped.

Pipelined like fastgen: step t+1 is queued before step t's tokens are read, so the host learns one
step late that a row ended its turn. That step's input (the row's end-of-turn token) belongs in the
cache anyway; its output, the row's draw of the following position, is dropped, never part of the
completion (a tag per row and an epoch that every pause / feed / end bumps tell a live draw from a
stale one).
"""

from __future__ import annotations

from collections import deque
from typing import Callable

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from grpo_tui.worker.engine.accel import fastgen

SAMPLE, FEED, WAIT, DONE = range(4)

# (logits (rows, vocab), positions (rows,): the completion index each row draws) -> tokens (rows,)
Picker = Callable[[mx.array, mx.array], mx.array]


class CompiledRows:
    """Rows of ``n`` completions per prompt (row ``i * n + j``), each up to ``max_tokens`` tokens
    (its sampled and fed tokens together); ``step`` returns the rows' new samples."""

    def __init__(self, model: nn.Module, prompts: list[list[int]], n: int, max_tokens: int, pick: Picker,
                 decode: fastgen.DecodeStep | None = None) -> None:
        cache = fastgen.prefill(model, prompts, n, max_tokens)
        logits, self.kv, self.prompt, self.left_pad = cache.logits, cache.kv, cache.prompt, cache.left_pad
        self.width, self.length = cache.width, cache.length
        self.rows = len(prompts) * n
        self.decode = decode if decode is not None and decode.model is model else fastgen.DecodeStep(model)
        self.pick = pick
        self.slot = np.full(self.rows, self.width, dtype=np.int64)  # where each row's next input is written
        self.mode = np.full(self.rows, SAMPLE)
        self.epoch = np.zeros(self.rows, dtype=np.int64)
        self.fed: dict[int, deque[int]] = {}  # the rows being fed, and what is left to feed them
        self.steps = 0  # compiled decode steps run (tests count them)
        self.pending = pick(logits, mx.zeros((self.rows,), dtype=mx.uint32)).astype(mx.uint32)
        self.tags = self.epoch.copy()  # per row: the epoch its pending output is a live draw of, or -1
        mx.async_eval(self.pending)

    @property
    def active(self) -> bool:
        """Whether any row is sampling or being fed."""
        return bool(np.any(self.mode <= FEED))

    def step(self) -> list[tuple[int, int]]:
        """One decode step: (row, token) for every row whose live draw came back."""
        sampling = self.mode == SAMPLE
        tags = np.where(sampling, self.epoch, -1)
        advance = sampling.copy()
        inputs = self.pending  # a paused or finished row's input is never read: any token will do
        if self.fed:
            forced = np.zeros(self.rows, dtype=np.uint32)
            feeding = np.zeros(self.rows, dtype=bool)
            for i, left in list(self.fed.items()):
                forced[i] = left.popleft()
                feeding[i] = advance[i] = True
                if not left:  # the last fed token: this step's output is the row's next draw
                    del self.fed[i]
                    self.mode[i], tags[i] = SAMPLE, self.epoch[i]
            inputs = mx.where(mx.array(feeding), mx.array(forced), inputs)
        positions = np.minimum(self.slot, self.length - 1)  # a finished row may sit past the end
        logits, *self.kv = self.decode(inputs[:, None], mx.array(positions), self.left_pad, *self.kv,
                                       prompt=self.prompt, width=self.width)
        upcoming = self.pick(logits, mx.array(positions + 1 - self.width, dtype=mx.uint32)).astype(mx.uint32)
        mx.async_eval(upcoming)
        ids = self.pending.tolist()
        live = np.flatnonzero((self.tags == self.epoch) & (self.mode == SAMPLE))
        out = [(int(i), ids[i]) for i in live]
        self.slot += advance
        self.pending, self.tags = upcoming, tags
        self.steps += 1
        return out

    def pause(self, row: int) -> None:
        """The row's turn ended (its last token is in the cache); it waits for ``resume``."""
        self._set(row, WAIT)

    def resume(self, row: int, tokens: list[int]) -> None:
        """Feed ``tokens`` (at least one) to a paused row, then let it sample again."""
        if not tokens:
            raise ValueError("a paused row needs at least one token to go on from")
        self._set(row, FEED)
        self.fed[row] = deque(tokens)

    def end(self, row: int) -> None:
        self._set(row, DONE)
        self.fed.pop(row, None)

    def close(self) -> None:
        pass

    def _set(self, row: int, mode: int) -> None:
        self.mode[row] = mode
        self.epoch[row] += 1
