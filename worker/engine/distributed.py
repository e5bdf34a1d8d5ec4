"""Data parallelism over ``mx.distributed`` (docs/architecture.md, "Several ranks").

The unit of distribution is the micro-batch: a step's ``gradient_accumulation_steps`` micro-batches
(whole prompt groups) are dealt out in contiguous runs, rank r taking micro-batches
``[r·S/N, (r+1)·S/N)`` and the prompts in them. Each micro-batch's loss is computed exactly as on one
rank (its own normalisation: ``grpo`` rows, ``bnpo`` tokens, ``dr_grpo`` rows × length), so summing
the ranks' accumulated gradients (``all_sum``) gives the one-rank gradient, up to float summation
order. What needs the whole batch is reduced, never approximated: ``dapo``'s active-token count and
the token-weighted statistics are summed, and every rank's scored completions are gathered
(``all_gather`` of encoded bytes) so the advantages (``scale_rewards = "batch"`` included) and the
metrics are computed from the whole batch, identically on every rank.

Without ``mlx.launch`` (no ``MLX_RANK`` in the environment) the group has one rank and every
collective here is the identity, so the one-rank path does not change.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import msgspec
from mlx.utils import tree_flatten, tree_unflatten

from grpo_tui.common.distributed import undealt
from grpo_tui.protocol.messages import RankTiming
from grpo_tui.worker.engine.scoring.reward_call import StepLog
from grpo_tui.worker.engine.policy.rollout import Completion
from grpo_tui.worker.ranks import launched
from grpo_tui.worker.trainer_contract import RankLost

ALL_REDUCE_CHUNK = 32 * 1024 * 1024  # bytes per all_sum call, as mlx.nn.average_gradients groups them


@dataclass
class Ranks:
    """This process's place in the group, and the collectives the step uses. ``comm_s`` and
    ``comm_bytes`` count the time spent in, and the bytes sent by, this step's collectives."""

    group: Any = None
    rank: int = 0
    size: int = 1
    comm_s: float = 0.0
    comm_bytes: int = 0
    backend: str = ""

    @classmethod
    def join(cls, backend: str = "any") -> "Ranks":
        if not launched():
            return cls()
        group = mx.distributed.init(strict=True, backend=backend)
        return cls(group=group, rank=group.rank(), size=group.size(), backend=backend)

    # ------------------------------------------------------------ the split

    def check(self, batch_size: int, accumulation: int) -> None:
        if (error := undealt(accumulation, self.size)) is not None:
            raise error

    def micro_batches(self, accumulation: int) -> range:
        """The micro-batches this rank computes."""
        per = accumulation // self.size
        return range(self.rank * per, (self.rank + 1) * per)

    def prompts(self, batch_size: int, accumulation: int) -> range:
        """Positions, in the step's global batch, of the prompts this rank generates."""
        per_micro = batch_size // accumulation
        mine = self.micro_batches(accumulation)
        return range(mine.start * per_micro, mine.stop * per_micro)

    # ------------------------------------------------------------ collectives

    def _timed(self, fn: Any, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            out = fn(*args)
        except RuntimeError as exc:  # the ring backend: "[ring] connection to a peer was lost"
            raise RankLost(lost_message(self, exc)) from exc
        self.comm_s += time.perf_counter() - t0
        return out

    def sum_floats(self, values: list[float]) -> list[float]:
        """Element-wise sum over ranks (float64 on the host, float32 on the wire)."""
        if self.size == 1:
            return values

        def reduce() -> list[float]:
            out = mx.distributed.all_sum(mx.array(values, dtype=mx.float32), group=self.group)
            mx.eval(out)
            return [float(v) for v in out.tolist()]

        self.comm_bytes += 4 * len(values)
        return self._timed(reduce)

    def sum_tree(self, tree: Any) -> Any:
        """All-sum a gradient tree: concatenated into chunks of ``ALL_REDUCE_CHUNK`` bytes per call
        (one ring pass per chunk instead of one per parameter), split back, evaluated."""
        if self.size == 1 or tree is None:
            return tree

        def reduce() -> Any:
            flat = tree_flatten(tree)
            out: list[tuple[str, mx.array]] = []
            chunk: list[tuple[str, mx.array]] = []
            size = 0

            def flush() -> None:
                if not chunk:
                    return
                dtype = chunk[0][1].dtype
                big = mx.concatenate([g.astype(dtype).reshape(-1) for _, g in chunk])
                self.comm_bytes += big.nbytes
                summed = mx.distributed.all_sum(big, group=self.group)
                offsets = [0]
                for _, g in chunk:
                    offsets.append(offsets[-1] + g.size)
                parts = mx.split(summed, offsets[1:-1]) if len(chunk) > 1 else [summed]
                out.extend((k, p.reshape(g.shape).astype(g.dtype)) for (k, g), p in zip(chunk, parts))
                chunk.clear()

            for key, g in flat:
                if chunk and (g.dtype != chunk[0][1].dtype or size >= ALL_REDUCE_CHUNK):
                    flush()
                    size = 0
                chunk.append((key, g))
                size += g.nbytes
            flush()
            result = tree_unflatten(out)
            mx.eval(result)
            return result

        return self._timed(reduce)

    def gather_bytes(self, payload: bytes) -> list[bytes]:
        """Every rank's ``payload``, in rank order (an all_gather of lengths, then of padded bytes:
        no shared filesystem needed)."""
        if self.size == 1:
            return [payload]

        def gather() -> list[bytes]:
            lengths = mx.distributed.all_gather(mx.array([len(payload)], dtype=mx.int64), group=self.group).tolist()
            width = max(max(lengths), 1)
            padded = bytearray(payload) + bytes(width - len(payload))
            data = mx.distributed.all_gather(mx.array(memoryview(padded), dtype=mx.uint8), group=self.group)
            raw = bytes(memoryview(data.reshape(self.size, width)))
            self.comm_bytes += 8 + width
            return [raw[r * width : r * width + n] for r, n in enumerate(lengths)]

        return self._timed(gather)

    def gather_floats(self, values: list[float]) -> list[list[float]]:
        """Each rank's ``values`` (the same length on every rank), in rank order."""
        if self.size == 1:
            return [values]
        flat = self.sum_floats([v if r == self.rank else 0.0 for r in range(self.size) for v in values])
        n = len(values)
        return [flat[r * n : (r + 1) * n] for r in range(self.size)]

    def start_step(self) -> None:
        self.comm_s, self.comm_bytes = 0.0, 0


def timings(ranks: Ranks, generation_s: float, training_s: float) -> tuple[list[RankTiming], int | None]:
    """Every rank's (generation, training, collective) times, and the slowest rank; one small
    gather at the end of the step (its own time is not counted)."""
    if ranks.size == 1:
        return [], None
    comm_s = ranks.comm_s
    rows = ranks.gather_floats([generation_s, training_s, comm_s])
    out = [RankTiming(rank=r, generation_ms=g * 1000, training_ms=t * 1000, all_reduce_ms=c * 1000)
           for r, (g, t, c) in enumerate(rows)]
    slowest = max(range(ranks.size), key=lambda r: rows[r][0] + rows[r][1])
    return out, slowest


# ------------------------------------------------------------ the scored rollout of a rank

Scored = tuple[list[Completion], list[float | None], dict[str, list[float | None]], StepLog]


class _Part(msgspec.Struct, array_like=True):
    completions: list[Completion]  # with an agent rollout's mask, turns and transcript
    totals: list[float | None]
    per_fn: dict[str, list[float | None]]
    metrics: dict[str, list[float]]  # StepLog.metrics: the reward functions' log_metric values
    extras: dict[str, list[str | None]]  # StepLog.extras: their log_extra notes, one per completion


def gather_scored(ranks: Ranks, completions: list[Completion], totals: list[float | None],
                  per_fn: dict[str, list[float | None]], logged: StepLog, offset: int) -> Scored:
    """Every rank's scored completions and what their reward functions logged, in global batch
    order; ``offset`` turns this rank's prompt indices into global ones."""
    for c in completions:
        c.prompt_index += offset
    if ranks.size == 1:
        return completions, totals, per_fn, logged
    part = _Part(completions, totals, per_fn, logged.metrics, logged.extras)
    parts = [msgspec.msgpack.decode(raw, type=_Part) for raw in ranks.gather_bytes(msgspec.msgpack.encode(part))]
    all_completions = [c for p in parts for c in p.completions]
    all_totals = [t for p in parts for t in p.totals]
    all_per_fn = {label: [v for p in parts for v in p.per_fn[label]] for label in per_fn}
    merged = StepLog(len(all_completions), logged.warn)
    for name in dict.fromkeys(n for p in parts for n in p.metrics):
        merged.metrics[name] = [v for p in parts for v in p.metrics.get(name, [])]
    for name in dict.fromkeys(n for p in parts for n in p.extras):  # a rank that did not log: no notes
        merged.extras[name] = [v for p in parts for v in p.extras.get(name, [None] * len(p.completions))]
    return all_completions, all_totals, all_per_fn, merged


# ------------------------------------------------------------ rank 0 leads

def lost_message(ranks: Ranks, exc: Exception) -> str:
    peer = "rank 1" if ranks.size == 2 else f"one of ranks 0..{ranks.size - 1} other than {ranks.rank}"
    return f"{peer} stopped (seen by rank {ranks.rank}: {exc}); the run cannot go on with fewer ranks"


def leader_value(ranks: Ranks, value: int) -> int:
    """Rank 0's ``value`` on every rank: an all_sum where the other ranks add 0. The ranks call it
    at every step boundary, so a pause on rank 0 holds the others in this collective."""
    if ranks.size == 1:
        return value
    return int(round(ranks.sum_floats([float(value) if ranks.rank == 0 else 0.0])[0]))


def broadcast_weights(ranks: Ranks, model: Any) -> None:
    """Rank 0's weights of ``model`` (all of them, frozen ones too) on every rank: a sum where the
    other ranks send zeros. The shapes are the same on every rank (the same model)."""
    if ranks.size == 1:
        return
    items = sorted(tree_flatten(model.parameters()), key=lambda kv: kv[0])
    outgoing = [v if ranks.rank == 0 else mx.zeros_like(v) for _, v in items]
    model.update(tree_unflatten(list(zip([k for k, _ in items], ranks.sum_tree(outgoing)))))
    mx.eval(model.parameters())


def broadcast_state(ranks: Ranks, model: Any, optimizer: Any) -> None:
    """Rank 0's trainable weights and optimizer state on every rank (after rank 0 alone read a
    checkpoint; also makes a random LoRA initialisation identical). The names and shapes go first,
    as bytes, so a rank whose optimizer state is still empty allocates what it receives."""
    if ranks.size == 1:
        return
    params = dict(tree_flatten(model.trainable_parameters()))
    state = dict(tree_flatten(optimizer.state))
    spec = {f"p:{k}": (list(v.shape), str(v.dtype)) for k, v in params.items()}
    spec |= {f"o:{k}": (list(v.shape), str(v.dtype)) for k, v in state.items() if isinstance(v, mx.array)}
    leader = msgspec.json.decode(ranks.gather_bytes(msgspec.json.encode(spec))[0])
    mine = {f"p:{k}": v for k, v in params.items()} | {f"o:{k}": v for k, v in state.items()}
    zeros = {key: mx.zeros(shape, dtype=getattr(mx, name.removeprefix("mlx.core."))) for key, (shape, name) in leader.items()}
    # Keys, not a nested tree: the leader's key order, the same on every rank.
    outgoing = {key: (mine[key] if ranks.rank == 0 else zeros[key]) for key in sorted(leader)}
    received = dict(zip(outgoing, ranks.sum_tree(list(outgoing.values()))))
    model.update(tree_unflatten([(k[2:], v) for k, v in received.items() if k.startswith("p:")]), strict=False)
    opt = [(k[2:], v) for k, v in received.items() if k.startswith("o:")]
    if opt:
        optimizer.state = tree_unflatten(opt)
    mx.eval(model.trainable_parameters(), optimizer.state)
