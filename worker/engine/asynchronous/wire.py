"""What the learner and the generator say to each other (docs/async.md, "The conversation"): typed
msgpack messages over a TCP socket the learner listens on (a secret token first), the trainable
weights over MLX's own ``mx.distributed`` ring of two ranks (rank 0 the learner, rank 1 the
generator). The two take turns: the generator sends a step's scored rollouts (``Bundle``), the
learner answers (``Reply``); when the answer announces weights, the generator says ``Go`` once it
waits for them on the ring, and the learner sends them.

Messages are typed structs decoded with their type: bytes from the ring never become code.
"""

from __future__ import annotations

import hmac
import os
import secrets
import socket
import time
from typing import Any

import mlx.core as mx
import msgspec
from mlx.utils import tree_flatten

from grpo_tui.worker.engine.policy.rollout import Completion
from grpo_tui.worker.engine.prompts.data import Example

CHUNK_BYTES = 64 * 1024 * 1024  # weights travel in buffers of at most this, one per dtype run
MAX_MESSAGE_BYTES = 1 << 30  # a step's rollouts are far less; more is not the peer speaking


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


class Go(msgspec.Struct, kw_only=True, tag=True):
    """The generator waits on the ring for the weights the last ``Reply`` announced."""


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
    """This side of the conversation: messages over a TCP socket (a blocked read costs no CPU, where
    a rank waiting inside MLX's ring polls), the weights over the ring, sent only when the peer waits
    for them (``Go``)."""

    def __init__(self, group: Any, peer: int, sock: socket.socket) -> None:
        self.group = group
        self.peer = peer
        self.sock = sock

    def _lost(self, exc: BaseException | None = None) -> GeneratorLost:
        side = "generator" if self.peer else "learner"
        return GeneratorLost(f"the {side} stopped" + (f" ({exc})" if exc else ""))

    def _eval(self, *arrays: Any) -> None:
        try:
            mx.eval(*arrays)
        except RuntimeError as exc:  # the ring: "connection to a peer was lost"
            raise self._lost(exc) from exc

    def send(self, message: msgspec.Struct) -> None:
        payload = _ENCODER.encode(message)
        try:
            self.sock.sendall(len(payload).to_bytes(8, "little") + payload)
        except OSError as exc:
            raise self._lost(exc) from exc

    def _read(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            try:
                chunk = self.sock.recv(min(left, 1 << 20))
            except OSError as exc:
                raise self._lost(exc) from exc
            if not chunk:
                raise self._lost()
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def receive(self, kind: Any) -> Any:
        size = int.from_bytes(self._read(8), "little")
        if size > MAX_MESSAGE_BYTES:
            raise self._lost(ValueError(f"a message of {size} bytes"))
        return msgspec.msgpack.decode(self._read(size), type=kind)

    def send_weights(self, model: Any) -> None:
        """The model's trainable weights (LoRA: the adapters), by name, in runs of one dtype."""
        for chunk in _chunks(model):
            flat = mx.concatenate([v.reshape(-1) for _, v in chunk])
            self._eval(mx.distributed.send(flat, self.peer, group=self.group))

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


# ------------------------------------------------------------ the socket's setup

TOKEN_BYTES = 32


def ring_bytes(group: Any, peer: int, payload: bytes | None = None) -> bytes:
    """Send ``payload`` to ``peer`` over the ring, or receive one (``payload`` None): once, at start,
    for the socket's address and token where the generator has no other way to learn them."""
    if payload is not None:
        mx.eval(mx.distributed.send(mx.array([len(payload)], dtype=mx.int64), peer, group=group))
        mx.eval(mx.distributed.send(mx.array(memoryview(payload), dtype=mx.uint8), peer, group=group))
        return payload
    size = mx.distributed.recv((1,), mx.int64, peer, group=group)
    mx.eval(size)
    data = mx.distributed.recv((int(size.item()),), mx.uint8, peer, group=group)
    mx.eval(data)
    return bytes(memoryview(data))


class Listener:
    """The learner's end: a socket on ``host``, and the token only the generator is told."""

    def __init__(self, host: str) -> None:
        self.server = socket.create_server((host, 0))
        self.token = secrets.token_bytes(TOKEN_BYTES)
        self.address = f"{host}:{self.server.getsockname()[1]}"

    def secret(self) -> str:
        return f"{self.address}/{self.token.hex()}"

    def accept(self, deadline: float, alive: Any = lambda: True) -> socket.socket:
        """The generator's connection: the first one to bring the token before ``deadline`` (others
        are closed unheard); ``alive()`` False gives up at once."""
        self.server.settimeout(0.2)
        while time.monotonic() < deadline and alive():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            conn.settimeout(5.0)
            try:
                brought = b""
                while len(brought) < TOKEN_BYTES and (chunk := conn.recv(TOKEN_BYTES - len(brought))):
                    brought += chunk
            except OSError:
                brought = b""
            if hmac.compare_digest(brought, self.token):
                conn.settimeout(None)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.server.close()
                return conn
            conn.close()
        self.server.close()
        raise GeneratorLost("the generator did not connect")


def connect(secret: str) -> socket.socket:
    """The generator's end, from the learner's ``Listener.secret()``."""
    address, token = secret.rsplit("/", 1)
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(bytes.fromhex(token))
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


SECRET_ENV = "GRPO_TUI_GENERATOR_LINK"  # a local generator's secret (its environment, readable by its user alone)


def secret_from_env() -> str | None:
    return os.environ.pop(SECRET_ENV, None)
