"""The policy's OpenAI/vLLM-style endpoint on 127.0.0.1 (docs/environments.md, "The policy's
endpoint"), driven by a plain HTTP client from a rollout function through the real worker: token
ids in, token ids and log-probs out, chat completions, the run's secret; concurrent requests are
generated as one batch (``PolicyService``, without a model)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers.api_runs import TINY_MODEL, quick_args


def _post(url: str, body: dict, key: str | None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_an_openai_style_client_drives_the_policy_through_the_endpoint_and_its_tokens_are_the_batch(tmp_path):
    from grpo_tui import GRPOTrainer

    log = tmp_path / "calls.jsonl"

    def rollout_func(prompts, trainer):
        root = trainer.base_url.removesuffix("/v1")
        tok = trainer.processing_class
        seen = {"no_key": _post(f"{root}/inference/v1/generate", {"token_ids": [1, 2]}, None)[0],
                "wrong_key": _post(f"{root}/inference/v1/generate", {"token_ids": [1, 2]}, "guess")[0]}

        def one(prompt):  # a harness's token-in call, several at once
            ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True)
            ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
            status, out = _post(f"{root}/inference/v1/generate",
                                {"token_ids": ids, "sampling_params": {"max_tokens": 8, "n": 1}}, trainer.api_key)
            assert status == 200, out
            return ids, out["choices"][0]

        with ThreadPoolExecutor(len(prompts)) as pool:
            results = list(pool.map(one, prompts))
        status, chat = _post(f"{trainer.base_url}/chat/completions",
                             {"model": "policy", "messages": [{"role": "user", "content": "1+1="}], "max_tokens": 4, "n": 2},
                             trainer.api_key)
        seen.update(chat_status=status, chat_choices=len(chat["choices"]),
                    chat_text_is_tokens=all(tok.decode(c["token_ids"], skip_special_tokens=True) == c["message"]["content"]
                                            for c in chat["choices"]),
                    chat_logprobs=all(len(c["logprobs"]["content"]) == len(c["token_ids"]) for c in chat["choices"]),
                    lengths=[len(c["token_ids"]) for _, c in results],
                    logprobs_fit=all([e["token"] for e in c["logprobs"]["content"]] == [f"token_id:{t}" for t in c["token_ids"]]
                                     for _, c in results))
        with open(log, "a") as f:
            f.write(json.dumps(seen) + "\n")
        return {"prompt_ids": [ids for ids, _ in results], "completion_ids": [c["token_ids"] for _, c in results],
                "logprobs": [[e["logprob"] for e in c["logprobs"]["content"]] for _, c in results]}

    rows = [{"prompt": [{"role": "user", "content": f"{i}+{i}="}]} for i in range(1, 3)]
    trainer = GRPOTrainer(model=str(TINY_MODEL), reward_funcs=[lambda completions, **kw: [float(len(c)) for c in completions]],
                          args=quick_args(tmp_path, max_steps=1), train_dataset=rows, rollout_func=rollout_func)
    trainer.train()
    [seen] = [json.loads(line) for line in log.read_text().splitlines()]
    assert seen["no_key"] == 401 and seen["wrong_key"] == 401  # the run's secret only
    assert seen["chat_status"] == 200 and seen["chat_choices"] == 2 and seen["chat_text_is_tokens"] and seen["chat_logprobs"]
    assert seen["logprobs_fit"] and all(1 <= n <= 8 for n in seen["lengths"])  # max_tokens held
    logged = trainer.state.log_history[0]
    assert logged["completions/mean_length"] == sum(seen["lengths"]) / 4  # the endpoint's tokens were trained on


def test_requests_made_at_the_same_time_are_generated_as_one_batch():
    from grpo_tui.worker.engine.policy.rollout_func import PolicyService, Request

    batches: list[int] = []

    def generate(requests):
        batches.append(len(requests))
        time.sleep(0.3 if len(batches) == 1 else 0)
        return [{"n": r.prompt_ids[0]} for r in requests]

    service = PolicyService(generate)

    def driver():
        def later(i):
            time.sleep(0.05)  # while the first request is being generated
            return service.generate([Request([i])])[0]["n"]

        threads = ThreadPoolExecutor(4)
        futures = [threads.submit(later, i) for i in range(4)]
        first = service.generate([Request([9])])[0]["n"]
        return first, [f.result() for f in futures]

    assert service.serve(driver) == (9, [0, 1, 2, 3])  # each answer to its own request
    assert batches == [1, 4]


def test_verifiers_train_client_stack_generates_through_the_endpoint(tmp_path):
    """verifiers' train client renders with the ``renderers`` package and calls
    ``renderers.client.generate`` against ``/inference/v1/generate``: the same call, offline, on the
    policy being trained; its tokens and log-probs are the batch."""
    pytest.importorskip("renderers")
    pytest.importorskip("openai")
    from grpo_tui import GRPOTrainer

    log = tmp_path / "calls.jsonl"

    def rollout_func(prompts, trainer):
        import asyncio

        import renderers
        from openai import AsyncOpenAI
        from renderers.client import generate

        renderer = renderers.create_renderer(trainer.processing_class, renderers.DefaultRendererConfig())

        async def episodes():
            client = AsyncOpenAI(base_url=trainer.base_url, api_key=trainer.api_key)
            return await asyncio.gather(*(generate(client=client, renderer=renderer, messages=p, model="policy",
                                                   sampling_params={"max_tokens": 8}, max_prompt_len=512) for p in prompts))

        outs = asyncio.run(episodes())
        with open(log, "a") as f:
            f.write(json.dumps({"lengths": [len(o["completion_ids"]) for o in outs],
                                "content": [o["content"] for o in outs],
                                "decoded": [trainer.processing_class.decode(o["completion_ids"], skip_special_tokens=True)
                                            for o in outs]}) + "\n")
        return {"prompt_ids": [o["prompt_ids"] for o in outs], "completion_ids": [o["completion_ids"] for o in outs],
                "logprobs": [o["completion_logprobs"] for o in outs]}

    rows = [{"prompt": [{"role": "user", "content": "3+4="}]}]
    trainer = GRPOTrainer(model=str(TINY_MODEL), reward_funcs=[lambda completions, **kw: [float(len(c)) for c in completions]],
                          args=quick_args(tmp_path, max_steps=1), train_dataset=rows, rollout_func=rollout_func)
    trainer.train()
    [seen] = [json.loads(line) for line in log.read_text().splitlines()]
    assert all(1 <= n <= 8 for n in seen["lengths"]) and len(seen["lengths"]) == 4
    assert [(c or "").strip() for c in seen["content"]] == [d.strip() for d in seen["decoded"]]  # parsed from our tokens
    assert trainer.state.log_history[0]["completions/mean_length"] == sum(seen["lengths"]) / 4


def test_a_verifiers_environment_is_refused_in_one_sentence_naming_what_it_needs_at_run_time(tmp_path):
    """verifiers v1 harnesses install their program with ``uv sync --script`` from PyPI when a run
    starts (measured with verifiers 0.4's NullHarness), so the TOML key and the API argument are
    refused in one sentence, exit 2, pointing at the rollout function and the endpoint."""
    import subprocess
    import sys

    from grpo_tui import GRPOTrainer, TrainingError
    from grpo_tui.protocol.outcome import Exit

    with pytest.raises(TrainingError) as err:
        GRPOTrainer(model=str(TINY_MODEL), reward_funcs=["length"], environment=object())
    assert err.value.exit_code == Exit.MISTAKE
    said = str(err.value)
    assert said.startswith("environment: verifiers environments do not run offline")
    for needed in ("`uv sync --script`", "astral.sh", "PyPI", "openai, mcp", "rollout_func",
                   "policy's endpoint"):
        assert needed in said, needed
    config = tmp_path / "config.toml"
    config.write_text(f'[model]\npath = "{TINY_MODEL}"\n\n[environment]\nverifiers = "my_env:load_environment"\n'
                      'args = { size = 3 }\n')
    out = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "check", str(config)], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == Exit.MISTAKE and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "environment.verifiers: 'my_env:load_environment' — verifiers environments do not run offline" in out.stderr
    assert said.removeprefix("environment: ") in out.stderr


FLOOD = """
import socket, sys, time
held = []
for _ in range(int(sys.argv[2])):
    try:
        held.append(socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5))
    except OSError:
        break
held[0].sendall(b"POST /v1/completions HTTP/1.1\\r\\nHost: x\\r\\n")  # a head that never ends
print(len(held), flush=True)
time.sleep(float(sys.argv[3]))
"""


def _raw(port: int, data: bytes) -> int:
    """The status a raw request gets (its answer read to the end)."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return int(answer.split(b" ", 2)[1])


def test_what_any_local_user_sends_the_endpoint_is_bounded_and_bad_input_is_a_400(tmp_path):
    """Issue 57.4 and 57.5: another local user's connections that never finish hold no thread and
    do not starve the run's own requests; 64 requests at once are all answered; a bad sampling value,
    Content-Length or a max_tokens past the run's limit is a 400 in one line, never a 500 or a crash."""
    import os
    import shutil
    import subprocess
    import sys
    import threading

    from grpo_tui import GRPOTrainer

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root (and setpriv) to act as another local user")
    log = tmp_path / "calls.jsonl"

    def rollout_func(prompts, trainer):
        root = trainer.base_url.removesuffix("/v1")
        port = int(root.rsplit(":", 1)[1])
        key = trainer.api_key
        threads_before = threading.active_count()
        flood = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                                  FLOOD, str(port), "300", "6"], stdout=subprocess.PIPE, text=True)
        held = int(flood.stdout.readline())
        seen = {"held": held, "threads_grew": threading.active_count() - threads_before}
        started = time.monotonic()
        ids = [1, 2, 3]
        seen["during_flood"] = _post(f"{root}/inference/v1/generate", {"token_ids": ids, "sampling_params": {"max_tokens": 2}}, key)[0]
        seen["during_flood_s"] = time.monotonic() - started
        with ThreadPoolExecutor(64) as pool:
            seen["concurrent"] = sorted(set(pool.map(lambda _: _post(
                f"{root}/inference/v1/generate", {"token_ids": ids, "sampling_params": {"max_tokens": 1}}, key)[0], range(64))))
        bad = {}
        for name, params in [("temperature", {"temperature": "hot"}), ("top_p", {"top_p": 5}),
                             ("max_tokens", {"max_tokens": 10**9}), ("top_k", {"top_k": 1.5})]:
            status, out = _post(f"{root}/inference/v1/generate", {"token_ids": ids, "sampling_params": params}, key)
            bad[name] = [status, out["error"]["message"]]
        auth = f"Authorization: Bearer {key}\r\n".encode()
        for name, length in [("abc", b"abc"), ("negative", b"-5"), ("huge", b"99999999999")]:
            bad[name] = [_raw(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: " + length
                              + b"\r\n\r\n{}"), ""]
        bad["no_key_huge"] = [_raw(port, b"POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n"), ""]
        seen["bad"] = bad
        flood.wait(timeout=30)
        with open(log, "a") as f:
            f.write(json.dumps(seen) + "\n")
        outs = [_post(f"{root}/inference/v1/generate", {"token_ids": ids, "sampling_params": {"max_tokens": 2}}, key)[1]
                for _ in prompts]
        return {"prompt_ids": [ids for _ in prompts], "completion_ids": [o["choices"][0]["token_ids"] for o in outs],
                "logprobs": [[e["logprob"] for e in o["choices"][0]["logprobs"]["content"]] for o in outs]}

    rows = [{"prompt": "1+1="}]
    trainer = GRPOTrainer(model=str(TINY_MODEL), reward_funcs=[lambda completions, **kw: [float(len(c)) for c in completions]],
                          args=quick_args(tmp_path, max_steps=1), train_dataset=rows, rollout_func=rollout_func)
    trainer.train()
    [seen] = [json.loads(line) for line in log.read_text().splitlines()]
    assert seen["held"] == 300 and seen["threads_grew"] <= 1  # held connections cost no thread
    assert seen["during_flood"] == 200 and seen["during_flood_s"] < 10
    assert seen["concurrent"] == [200]  # none reset by the backlog
    bad = seen["bad"]
    assert bad["temperature"] == [400, "temperature must be a number >= 0.001 and <= 100 (got 'hot')"]
    assert bad["top_p"] == [400, "top_p must be a number > 0 and <= 1 (got 5)"]
    assert bad["top_k"][0] == 400 and bad["top_k"][1].startswith("top_k must be a whole number")
    assert bad["max_tokens"][0] == 400 and bad["max_tokens"][1].startswith(
        "max_tokens 1,000,000,000 is over this run's generation.max_completion_length (")
    assert [bad[k][0] for k in ("abc", "negative", "huge", "no_key_huge")] == [400, 400, 413, 401]


def test_generation_overrides_past_the_run_s_limit_are_one_sentence(tmp_path):
    """Issue 57.5: generate_rollout_completions(..., generation_overrides={"max_tokens": 10**9}) is a
    mistake in one sentence, not 20 GB of MLX memory."""
    from grpo_tui import GRPOTrainer, TrainingError
    from grpo_tui.protocol.outcome import Exit

    def rollout_func(prompts, trainer):
        return trainer.generate_rollout_completions(prompts, generation_overrides={"max_tokens": 10**9})

    trainer = GRPOTrainer(model=str(TINY_MODEL), reward_funcs=[lambda completions, **kw: [1.0 for c in completions]],
                          args=quick_args(tmp_path, max_steps=1), train_dataset=[{"prompt": "1+1="}], rollout_func=rollout_func)
    with pytest.raises(TrainingError) as err:
        trainer.train()
    assert err.value.exit_code == Exit.MISTAKE
    assert "generation_overrides: max_tokens 1,000,000,000 is over this run's generation.max_completion_length" in str(err.value)
