"""mlx-lm's continuous-batching ``BatchGenerator`` as the agent rollouts' decoder off the compiled path
(architectures other than the llama family, a repetition penalty): the same interface as
``accel.rowgen.CompiledRows``.

A row's turn ends at its end-of-turn token, which is one of the generator's stop tokens, so the
generator has already taken the row out of its batch and handed back its KV cache; ``resume``
inserts the row again with that cache and the tool messages' tokens as its new prompt, and the
generator prefills them while the other rows decode (``BatchGenerator.insert``). A row that
ends otherwise (a stop string, the repetition stop) is removed (``BatchGenerator.remove``).

Keyed sampling: each inserted row gets a sampler of its own that draws at the row's own
positions (``sampling.KeyedSampler.draw``), so its tokens do not depend on the other rows.
"""

from __future__ import annotations

from typing import Any, Callable

import mlx.core as mx
from mlx_lm.generate import BatchGenerator

# (logits (1, vocab), row, position) -> token (1,): one row's draw; None: one batched sampler
RowPicker = Callable[[mx.array, int, int], mx.array]


class GeneratorRows:
    def __init__(self, model: Any, prompts: list[list[int]], n: int, max_tokens: int, stop_ids: set[int],
                 sampler: Any, processors: list[Any], one_row: bool, pick_row: RowPicker | None) -> None:
        rows = len(prompts) * n
        size = 1 if one_row else rows  # a batch of one row never needs a padding mask
        self.generator = BatchGenerator(
            model, max_tokens=max_tokens, stop_tokens=[[t] for t in sorted(stop_ids)], sampler=sampler,
            logits_processors=processors, completion_batch_size=size, prefill_batch_size=size,
        )  # fmt: skip
        self.max_tokens, self.pick_row = max_tokens, pick_row
        self.uid_row: dict[int, int] = {}
        self.used = [0] * rows  # tokens each row holds (sampled and fed)
        # row -> (its KV cache, the tokens in it), from the end of its turn
        self.parked: dict[int, tuple[Any, list[int]]] = {}
        self._insert(list(range(rows)), [p for p in prompts for _ in range(n)], [None] * rows, [[]] * rows)

    @property
    def active(self) -> bool:
        return bool(self.uid_row)

    def step(self) -> list[tuple[int, int]]:
        out = []
        for r in self.generator.next_generated():
            row = self.uid_row.get(r.uid)
            if row is None:
                continue
            out.append((row, r.token))
            self.used[row] += 1
            if r.finish_reason is not None:  # the generator took it out of its batch
                del self.uid_row[r.uid]
                self.parked[row] = (r.prompt_cache, r.all_tokens)
        return out

    def pause(self, row: int) -> None:
        if row not in self.parked:  # only an end-of-turn token pauses a row, and it is a stop token
            raise RuntimeError(f"row {row} paused before the generator ended it")

    def resume(self, row: int, tokens: list[int]) -> None:
        self.used[row] += len(tokens)
        cache, seen = self.parked.pop(row)
        self._insert([row], [tokens], [cache], [list(seen)])  # ``seen``: a repetition penalty's context

    def end(self, row: int) -> None:
        self.parked.pop(row, None)
        uid = next((u for u, r in self.uid_row.items() if r == row), None)
        if uid is not None:
            self.generator.remove([uid])
            del self.uid_row[uid]

    def close(self) -> None:
        self.generator.close()

    def _insert(self, rows: list[int], prompts: list[list[int]], caches: list[Any], seen: list[list[int]]) -> None:
        samplers = None if self.pick_row is None else [self._sampler(r) for r in rows]
        budgets = [self.max_tokens - self.used[r] for r in rows]
        caches_arg = caches if any(c is not None for c in caches) else None
        uids = self.generator.insert(prompts, max_tokens=budgets, caches=caches_arg, all_tokens=seen,
                                     samplers=samplers)
        self.uid_row.update(zip(uids, rows))

    def _sampler(self, row: int) -> Callable[[mx.array], mx.array]:
        """The row's keyed draw, from its current position on (called once per position, in order)."""
        position = [self.used[row]]
        pick_row = self.pick_row
        assert pick_row is not None

        def draw(logprobs: mx.array) -> mx.array:
            token = pick_row(logprobs, row, position[0])
            position[0] += 1
            return token

        return draw
