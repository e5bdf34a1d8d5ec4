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
given to the rollout function as ``trainer.api_key``); anything else is 401.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

SAMPLING = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
MAX_BODY = 16 * 2**20


class EndpointError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def sampling_overrides(body: dict[str, Any], params: dict[str, Any] | None = None) -> tuple[dict[str, Any], int]:
    """(the rollout engine's overrides, n) of a request's sampling settings."""
    params = body if params is None else params
    overrides = {k: params[k] for k in SAMPLING if params.get(k) is not None}
    limit = params.get("max_tokens", params.get("max_completion_tokens"))
    if limit is not None:
        if not isinstance(limit, int) or limit < 1:
            raise EndpointError(400, "max_tokens must be a positive integer")
        overrides["max_tokens"] = limit
    n = params.get("n") or 1
    if not isinstance(n, int) or not 1 <= n <= 64:
        raise EndpointError(400, "n must be an integer from 1 to 64")
    return overrides, n


class PolicyEndpoint:
    """The HTTP server over ``generate(prompt_ids list, overrides) -> answers`` (one per prompt, as
    ``rollout_func.generation_answers`` gives them) and ``encode_chat(messages) -> ids``."""

    def __init__(self, generate: Callable[[list[list[int]], dict[str, Any]], list[dict[str, Any]]],
                 encode_chat: Callable[[list[dict[str, Any]]], list[int]], encode_text: Callable[[str], list[int]],
                 decode_token: Callable[[int], str], model_name: str, vocab_size: int) -> None:
        self.generate, self.encode_chat, self.encode_text = generate, encode_chat, encode_text
        self.decode_token, self.model_name, self.vocab_size = decode_token, model_name, vocab_size
        self.api_key = secrets.token_urlsafe(24)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self.server.serve_forever, name="grpo-tui-endpoint", daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

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
        answers = self.generate([ids] * n, overrides)
        return {"request_id": f"grpo-tui-{secrets.token_hex(6)}", "prompt_token_ids": ids, "choices": [
            {"index": i, "token_ids": a["completion_ids"], "finish_reason": "stop" if a["finish_reason"] == "stop" else "length",
             "logprobs": {"content": [{"token": f"token_id:{t}", "logprob": lp}  # vLLM's wire form
                                      for t, lp in zip(a["completion_ids"], a["logprobs"])]}}
            for i, a in enumerate(answers)]}

    def _completion(self, ids: list[int], body: dict[str, Any], *, chat: bool) -> dict[str, Any]:
        overrides, n = sampling_overrides(body)
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


def _handler(endpoint: PolicyEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — stderr stays the run's
            pass

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self) -> bool:
            given = self.headers.get("Authorization", "")
            if secrets.compare_digest(given.encode(), f"Bearer {endpoint.api_key}".encode()):
                return True
            self._send(401, {"error": {"message": "a Bearer token with the run's secret is needed", "type": "auth"}})
            return False

        def do_GET(self) -> None:  # noqa: N802
            if not self._authorized():
                return
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": endpoint.model_name, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:  # noqa: N802
            if not self._authorized():
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY:
                    raise EndpointError(413, "request too large")
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    raise EndpointError(400, "the body is not JSON") from None
                if not isinstance(body, dict):
                    raise EndpointError(400, "the body is not a JSON object")
                self._send(200, endpoint.route(self.path.rstrip("/"), body))
            except EndpointError as exc:
                self._send(exc.status, {"error": {"message": str(exc), "type": "invalid_request_error"}})
            except RuntimeError as exc:  # outside of a rollout
                self._send(503, {"error": {"message": str(exc), "type": "unavailable"}})
            except Exception as exc:  # noqa: BLE001 — said to the client; the run goes on
                self._send(500, {"error": {"message": f"{type(exc).__name__}: {exc}", "type": "internal"}})

    return Handler
