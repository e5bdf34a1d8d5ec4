"""The policy as an OpenAI/vLLM-style endpoint on 127.0.0.1 (docs/environments.md, "The policy's
endpoint"): any agent harness that speaks OpenAI's API can drive the policy being trained during a
rollout. Standard library only (``http.server``); every request goes through the run's
``rollout_func.PolicyService``, so requests made at the same time are generated as one batch by the
rollout engine, on the MLX thread, and only while a rollout runs (else 503).

- ``POST /inference/v1/generate``: token ids in, token ids and log-probs out (vLLM's token-in
  route, as verifiers' train client and the ``renderers`` package call it): ``{"token_ids": [...],
  "sampling_params": {"max_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
  "n"}}`` (other vLLM fields are accepted and ignored; the model's own end-of-turn tokens stop it)
  -> ``{"prompt_token_ids": [...], "choices": [{"index", "token_ids", "logprobs": {"content":
  [{"token": "token_id:<id>", "logprob"}]}, "finish_reason"}]}``.
- ``POST /v1/chat/completions``: OpenAI's chat completions (``messages``, ``max_tokens`` or
  ``max_completion_tokens``, ``temperature``, ``top_p``, ``n``; vLLM's extras ``top_k``, ``min_p``,
  ``repetition_penalty``), rendered with the model's chat template; each choice also carries vLLM's
  ``token_ids`` and ``logprobs.content`` (one ``{"token", "logprob"}`` per token), the response
  ``prompt_token_ids``.
- ``POST /v1/completions``: a text prompt taken as it is, the same extras.
- ``GET /v1/models``: the one model.

Every request needs ``Authorization: Bearer <the run's secret>`` (a fresh random one per run,
given to the rollout function as ``trainer.api_key``); anything else is 401. What any local user can
send is bounded (docs/security.md, "The policy's endpoint"): one thread reads every connection's
request line and headers without blocking and checks the secret there, so a connection that never
finishes, or has no secret, holds no worker thread and is closed after ``HEAD_TIMEOUT_S``; an
authenticated request goes to a pool of ``POOL`` threads (``QUEUE`` more wait; beyond, 503), has
``BODY_TIMEOUT_S`` to send its body of at most ``MAX_BODY`` bytes, and is answered with
``Connection: close``. A bad ``Content-Length``, a sampling value out of range or more tokens than
the run's ``generation.max_completion_length`` or the model's context allow is a 400 in one line.
"""

from __future__ import annotations

import json
import re
import secrets
import selectors
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from grpo_tui.worker.engine.policy.request_limits import overrides_problem

SAMPLING = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
MAX_BODY = 16 * 2**20
HEAD_BYTES = 16 * 2**10  # request line and headers
HEAD_TIMEOUT_S = 10.0  # to send them
BODY_TIMEOUT_S = 30.0  # to send the body, once the secret was right
PENDING = 512  # connections still sending their headers; past this the oldest is closed
POOL = 8  # requests served at once (each waits for the rollout engine's next batch)
QUEUE = 64  # authenticated requests waiting for the pool; past this, 503
BACKLOG = 256  # connections the kernel holds before they are accepted
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 408: "Request Timeout",
           411: "Length Required", 413: "Payload Too Large", 431: "Request Header Fields Too Large",
           500: "Internal Server Error", 503: "Service Unavailable"}


class EndpointError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def sampling_overrides(body: dict[str, Any], params: dict[str, Any] | None = None) -> tuple[dict[str, Any], int]:
    """(the rollout engine's overrides, n) of a request's sampling settings (checked with its prompt
    by ``PolicyEndpoint.check``)."""
    params = body if params is None else params
    if not isinstance(params, dict):
        raise EndpointError(400, "sampling_params must be a JSON object")
    overrides = {k: params[k] for k in SAMPLING if params.get(k) is not None}
    limit = params.get("max_tokens", params.get("max_completion_tokens"))
    if limit is not None:
        overrides["max_tokens"] = limit
    n = params.get("n") or 1
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 64:
        raise EndpointError(400, "n must be an integer from 1 to 64")
    return overrides, n


class _Head:
    """A connection whose request line and headers are still coming (read by the gate thread)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.data, self.deadline = sock, b"", time.monotonic() + HEAD_TIMEOUT_S


def _reply(sock: socket.socket, status: int, payload: dict[str, Any]) -> None:
    """Answer and close; a client that does not read its answer loses it (never blocks for long)."""
    data = json.dumps(payload).encode()
    head = (f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()
    try:
        sock.settimeout(5.0)
        sock.sendall(head + data)
    except OSError:
        pass
    finally:
        sock.close()


def _error(status: int, message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind}}


class PolicyEndpoint:
    """The HTTP server over ``generate(prompt_ids list, overrides) -> answers`` (one per prompt, as
    ``rollout_func.generation_answers`` gives them) and ``encode_chat(messages) -> ids``;
    ``limits() -> (generation.max_completion_length, the model's context or None)``."""

    def __init__(self, generate: Callable[[list[list[int]], dict[str, Any]], list[dict[str, Any]]],
                 encode_chat: Callable[[list[dict[str, Any]]], list[int]], encode_text: Callable[[str], list[int]],
                 decode_token: Callable[[int], str], model_name: str, vocab_size: int,
                 limits: Callable[[], tuple[int, int | None]] = lambda: (2**31, None)) -> None:
        self.generate, self.encode_chat, self.encode_text = generate, encode_chat, encode_text
        self.decode_token, self.model_name, self.vocab_size, self.limits = decode_token, model_name, vocab_size, limits
        self.api_key = secrets.token_urlsafe(24)
        self._expected = f"Bearer {self.api_key}".encode()
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=BACKLOG)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.pool = ThreadPoolExecutor(POOL, thread_name_prefix="grpo-tui-endpoint")
        self._busy = threading.BoundedSemaphore(POOL + QUEUE)
        self._closed = threading.Event()
        self._gate = threading.Thread(target=self._gate_loop, name="grpo-tui-endpoint-gate", daemon=True)
        self._gate.start()

    def close(self) -> None:
        self._closed.set()
        self._gate.join(timeout=5)
        self.pool.shutdown(wait=False, cancel_futures=True)

    def check(self, ids: list[int], overrides: dict[str, Any]) -> None:
        limit, context = self.limits()
        if (problem := overrides_problem(overrides, len(ids), limit, context)) is not None:
            raise EndpointError(400, problem)

    # ------------------------------------------------------------ connections

    def _gate_loop(self) -> None:
        """Accept connections and read their heads, all on this one thread, without blocking."""
        selector = selectors.DefaultSelector()
        selector.register(self.listener, selectors.EVENT_READ, None)
        heads: dict[socket.socket, _Head] = {}  # insertion order: the oldest first
        try:
            while not self._closed.is_set():
                for key, _ in selector.select(timeout=0.2):
                    if key.data is None:
                        self._accept(selector, heads)
                    else:
                        self._read_head(selector, heads, key.data)
                now = time.monotonic()
                for head in [h for h in heads.values() if h.deadline < now]:  # too slow: closed, no answer owed
                    self._drop(selector, heads, head)
        finally:
            for head in list(heads.values()):
                self._drop(selector, heads, head)
            selector.close()
            self.listener.close()

    def _accept(self, selector: selectors.BaseSelector, heads: dict[socket.socket, _Head]) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors: the kernel keeps the rest in the backlog (no busy loop meanwhile)
                time.sleep(0.05)
                return
            sock.setblocking(False)
            head = heads[sock] = _Head(sock)
            selector.register(sock, selectors.EVENT_READ, head)
            if len(heads) > PENDING:
                self._drop(selector, heads, next(iter(heads.values())))

    def _drop(self, selector: selectors.BaseSelector, heads: dict[socket.socket, _Head], head: _Head) -> None:
        heads.pop(head.sock, None)
        try:
            selector.unregister(head.sock)
        except (KeyError, ValueError):
            pass
        head.sock.close()

    def _read_head(self, selector: selectors.BaseSelector, heads: dict[socket.socket, _Head], head: _Head) -> None:
        try:
            chunk = head.sock.recv(8192)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            return self._drop(selector, heads, head)
        head.data += chunk
        end = head.data.find(b"\r\n\r\n")
        if end < 0 and len(head.data) <= HEAD_BYTES:
            return
        heads.pop(head.sock, None)
        selector.unregister(head.sock)
        head.sock.setblocking(True)
        if end < 0 or end > HEAD_BYTES:
            return _reply(head.sock, 431, _error(431, f"the request line and headers pass {HEAD_BYTES} bytes"))
        lines = head.data[:end].decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if not secrets.compare_digest(headers.get("authorization", "").encode("latin-1"), self._expected):
            return _reply(head.sock, 401, _error(401, "a Bearer token with the run's secret is needed", "auth"))
        if not self._busy.acquire(blocking=False):
            return _reply(head.sock, 503, _error(503, f"{POOL + QUEUE} requests are already waiting; try again",
                                                 "unavailable"))
        self.pool.submit(self._serve, head.sock, lines[0], headers, head.data[end + 4:])

    def _serve(self, sock: socket.socket, request_line: str, headers: dict[str, str], start: bytes) -> None:
        """One authenticated request, on a pool thread."""
        try:
            status, payload = self._answer(sock, request_line, headers, start)
        except EndpointError as exc:
            status, payload = exc.status, _error(exc.status, str(exc))
        except RuntimeError as exc:  # outside of a rollout
            status, payload = 503, _error(503, str(exc), "unavailable")
        except Exception as exc:  # noqa: BLE001 — said to the client; the run goes on
            status, payload = 500, _error(500, f"{type(exc).__name__}: {exc}", "internal")
        finally:
            self._busy.release()
        _reply(sock, status, payload)

    def _answer(self, sock: socket.socket, request_line: str, headers: dict[str, str], start: bytes,
                ) -> tuple[int, dict[str, Any]]:
        method, _, rest = request_line.partition(" ")
        path = rest.rpartition(" ")[0].split("?", 1)[0].rstrip("/") if " " in rest else rest.rstrip("/")
        if method == "GET":
            if path == "/v1/models":
                return 200, {"object": "list", "data": [{"id": self.model_name, "object": "model"}]}
            raise EndpointError(404, f"no route {path}")
        if method != "POST":
            raise EndpointError(404, f"no route {method} {path}")
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise EndpointError(411, "send the body with a Content-Length, not chunked")
        given = headers.get("content-length", "0") or "0"
        if not re.fullmatch(r"[0-9]{1,12}", given):
            raise EndpointError(400, f"Content-Length must be a whole number of bytes (got {given[:20]!r})")
        length = int(given)
        if length > MAX_BODY:
            raise EndpointError(413, f"the body passes {MAX_BODY:,} bytes")
        body = self._read_body(sock, start, length)
        try:
            parsed = json.loads(body or b"{}")
        except (ValueError, RecursionError):
            raise EndpointError(400, "the body is not JSON") from None
        if not isinstance(parsed, dict):
            raise EndpointError(400, "the body is not a JSON object")
        return 200, self.route(path, parsed)

    @staticmethod
    def _read_body(sock: socket.socket, start: bytes, length: int) -> bytes:
        data, deadline = bytearray(start[:length]), time.monotonic() + BODY_TIMEOUT_S
        while len(data) < length:
            left = deadline - time.monotonic()
            if left <= 0:
                raise EndpointError(408, f"the body did not come within {BODY_TIMEOUT_S:g} s")
            sock.settimeout(left)
            try:
                chunk = sock.recv(min(length - len(data), 2**20))
            except TimeoutError:
                continue
            if not chunk:
                raise EndpointError(400, "the connection closed before the body's Content-Length bytes came")
            data += chunk
        return bytes(data)

    # ------------------------------------------------------------ routes

    def route(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path == "/inference/v1/generate":
            return self._generate(body)
        if path == "/v1/chat/completions":
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise EndpointError(400, "messages must be a non-empty list")
            return self._completion(self.encode_chat(messages), body, chat=True)
        if path == "/v1/completions":
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                raise EndpointError(400, "prompt must be a string")
            return self._completion(self.encode_text(prompt), body, chat=False)
        raise EndpointError(404, f"no route {path}")

    def _ids(self, ids: Any) -> list[int]:
        if not isinstance(ids, list) or not ids or not all(isinstance(t, int) and 0 <= t < self.vocab_size for t in ids):
            raise EndpointError(400, "token_ids must be a non-empty list of the model's token ids")
        return ids

    def _generate(self, body: dict[str, Any]) -> dict[str, Any]:
        ids = self._ids(body.get("token_ids", body.get("prompt_token_ids")))
        overrides, n = sampling_overrides(body, body.get("sampling_params") or {})
        self.check(ids, overrides)
        answers = self.generate([ids] * n, overrides)
        return {"request_id": f"grpo-tui-{secrets.token_hex(6)}", "prompt_token_ids": ids, "choices": [
            {"index": i, "token_ids": a["completion_ids"], "finish_reason": "stop" if a["finish_reason"] == "stop" else "length",
             "logprobs": {"content": [{"token": f"token_id:{t}", "logprob": lp}  # vLLM's wire form
                                      for t, lp in zip(a["completion_ids"], a["logprobs"])]}}
            for i, a in enumerate(answers)]}

    def _completion(self, ids: list[int], body: dict[str, Any], *, chat: bool) -> dict[str, Any]:
        overrides, n = sampling_overrides(body)
        self.check(ids, overrides)
        answers = self.generate([ids] * n, overrides)
        choices = []
        for i, a in enumerate(answers):
            logprobs = {"content": [{"token": self.decode_token(t), "logprob": lp}
                                    for t, lp in zip(a["completion_ids"], a["logprobs"])]}
            finish = "stop" if a["finish_reason"] == "stop" else "length"
            content = {"message": {"role": "assistant", "content": a["text"]}} if chat else {"text": a["text"]}
            choices.append({"index": i, **content, "finish_reason": finish, "logprobs": logprobs,
                            "token_ids": a["completion_ids"]})
        tokens = sum(len(a["completion_ids"]) for a in answers)
        return {"id": f"grpo-tui-{secrets.token_hex(6)}", "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()), "model": self.model_name, "choices": choices, "prompt_token_ids": ids,
                "usage": {"prompt_tokens": len(ids), "completion_tokens": tokens, "total_tokens": len(ids) + tokens}}
