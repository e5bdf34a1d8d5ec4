"""What the learner and the generator say to each other, over MLX's own ``mx.distributed`` ring of
two ranks (rank 0 the learner, rank 1 the generator; docs/async.md, "The conversation"): msgpack
bytes for messages, the trainable weights as arrays. The two take turns, so neither ever sends
while the other sends: the generator sends a step's scored rollouts (``Bundle``), the learner
answers (``Reply``, its new weights after it when due), and so on.

Messages are typed structs decoded with their type: bytes from the ring never become code.
"""

from __future__ import annotations

import time
from typing import Any

import mlx.core as mx
import msgspec
from mlx.utils import tree_flatten

from grpo_tui.worker.engine.policy.rollout import Completion
from grpo_tui.worker.engine.prompts.data import Example

CHUNK_BYTES = 64 * 1024 * 1024  # weights travel in buffers of at most this, one per dtype run


class Hello(msgspec.Struct, kw_only=True):
    """The learner's first word: the run's effective config (paths resolved, live changes in)."""

    config: dict[str, Any]


class Start(msgspec.Struct, kw_only=True):
    """The learner's weights follow, as of ``policy_step``: the generator's first step is the next."""

    policy_step: int


class Reply(msgspec.Struct, kw_only=True):
    """The learner's answer to a step's rollouts: its weights follow when ``weights`` (as of
    ``policy_step``), the live changes of the boundary (key -> new value)."""

    policy_step: int
    weights: bool = False
    changes: dict[str, Any] = {}


class Ready(msgspec.Struct, kw_only=True, tag=True):
    """The generator loaded the run: the learner's weights may come."""


class Bundle(msgspec.Struct, kw_only=True, tag=True):
    """One step's scored rollouts (``dynamic_sampling.Selection`` in parts), sampled by the weights
    of ``policy_step``, with the generator's figures and log lines."""

    step: int
    policy_step: int
    epoch: int
    examples: list[Example]
    completions: list[Completion]
    totals: list[float | None]
    per_fn: dict[str, list[float | None]]
    logged_metrics: dict[str, list[float]]
    logged_extras: dict[str, list[str | None]]
    slots: list[int]
    padding: list[int]
    rounds: int
    informative: int
    generation_s: float
    scoring_s: float
    metrics: dict[str, float] = {}
    logs: list[tuple[str, str]] = []


class Failure(msgspec.Struct, kw_only=True, tag=True):
    """What stopped the generator, in place of a step's rollouts: a user's mistake (its kind and
    sentence, exit 2 for the run) or a crash (its traceback, in the learner's log)."""

    message: str
    mistake_kind: str | None = None


def _plain(value: Any) -> Any:
    """A dataset cell msgpack has no type for (a numpy scalar, a date): its text."""
    return str(value)


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_plain)


class GeneratorLost(RuntimeError):
    """The other side of the link stopped (a crash of the generator is a crash of the run)."""


class Link:
    """This side of the ring; ``peer`` is the other rank. ``sent_bytes`` counts what went out."""

    def __init__(self, group: Any, peer: int) -> None:
        self.group = group
        self.peer = peer
        self.sent_bytes = 0

    def _eval(self, *arrays: Any) -> None:
        try:
            mx.eval(*arrays)
        except RuntimeError as exc:  # the ring: "connection to a peer was lost"
            raise GeneratorLost(f"the {'generator' if self.peer else 'learner'} stopped ({exc})") from exc

    def send(self, message: msgspec.Struct) -> None:
        payload = _ENCODER.encode(message)
        self._eval(mx.distributed.send(mx.array([len(payload)], dtype=mx.int64), self.peer, group=self.group))
        self._eval(mx.distributed.send(mx.array(memoryview(payload), dtype=mx.uint8), self.peer, group=self.group))
        self.sent_bytes += 8 + len(payload)

    def receive(self, kind: type[Any]) -> Any:
        size = mx.distributed.recv((1,), mx.int64, self.peer, group=self.group)
        self._eval(size)
        data = mx.distributed.recv((int(size.item()),), mx.uint8, self.peer, group=self.group)
        self._eval(data)
        return msgspec.msgpack.decode(bytes(memoryview(data)), type=kind)

    def send_weights(self, model: Any) -> None:
        """The model's trainable weights (LoRA: the adapters), by name, in runs of one dtype."""
        for chunk in _chunks(model):
            flat = mx.concatenate([v.reshape(-1) for _, v in chunk])
            self._eval(mx.distributed.send(flat, self.peer, group=self.group))
            self.sent_bytes += flat.nbytes

    def receive_weights(self, model: Any) -> None:
        """The peer's trainable weights into ``model`` (the same model: the same names and shapes)."""
        received = []
        for chunk in _chunks(model):
            size = sum(v.size for _, v in chunk)
            flat = mx.distributed.recv((size,), chunk[0][1].dtype, self.peer, group=self.group)
            self._eval(flat)
            offset = 0
            for name, v in chunk:
                received.append((name, flat[offset : offset + v.size].reshape(v.shape)))
                offset += v.size
        model.load_weights(received, strict=False)
        mx.eval(model.trainable_parameters())


def _chunks(model: Any) -> list[list[tuple[str, mx.array]]]:
    items = sorted(tree_flatten(model.trainable_parameters()), key=lambda kv: kv[0])
    chunks: list[list[tuple[str, mx.array]]] = []
    size = 0
    for name, v in items:
        if not chunks or v.dtype != chunks[-1][0][1].dtype or size >= CHUNK_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append((name, v))
        size += v.nbytes
    return chunks


class Clock:
    """Busy and waiting seconds since the last ``take`` (each side's busy share of a step)."""

    def __init__(self) -> None:
        self.busy = 0.0
        self.waiting = 0.0
        self._since = time.perf_counter()

    def waited(self, seconds: float) -> None:
        self.waiting += seconds

    def take(self) -> tuple[float, float]:
        now = time.perf_counter()
        total = now - self._since
        busy = max(total - self.waiting, 0.0)
        waiting = self.waiting
        self.waiting, self._since = 0.0, now
        return busy, waiting
