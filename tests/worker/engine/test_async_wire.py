"""[async]'s conversation (engine/asynchronous/wire.py): the learner's socket takes the generator
that brings its token and no one else, and a step's rollouts come back as they went, odd dataset
cells included."""

from __future__ import annotations

import socket
import threading
import time

import msgspec
import pytest

from grpo_tui.worker.engine.asynchronous.wire import Bundle, GeneratorLost, Link, Listener, _ENCODER, connect
from grpo_tui.worker.engine.policy.rollout import Completion
from grpo_tui.worker.engine.prompts.data import Example


def test_only_the_generator_with_the_token_is_taken():
    listener = Listener("127.0.0.1")
    host, port = listener.address.rsplit(":", 1)
    intruder = socket.create_connection((host, int(port)))
    intruder.sendall(b"x" * 32)  # another local user guessing
    taken: list[socket.socket] = []
    thread = threading.Thread(target=lambda: taken.append(listener.accept(time.monotonic() + 10)))
    thread.start()
    time.sleep(0.3)
    generator = connect(listener.secret())
    thread.join()
    assert intruder.recv(1) == b""  # closed unheard
    Link(None, 0, generator).send(Bundle(step=1, policy_step=0, epoch=0, examples=[], completions=[], totals=[],
                                         per_fn={}, logged_metrics={}, logged_extras={}, slots=[], padding=[], rounds=1,
                                         informative=0, generation_s=0.0, scoring_s=0.0))
    assert Link(None, 1, taken[0]).receive(Bundle).step == 1


def test_no_token_no_link():
    listener = Listener("127.0.0.1")
    with pytest.raises(GeneratorLost):
        listener.accept(time.monotonic() + 0.5)


def test_a_bundle_comes_back_as_it_went_odd_cells_as_text():
    import datetime

    example = Example(prompt=[{"role": "user", "content": "2+2?"}], messages=[{"role": "user", "content": "2+2?"}],
                      columns={"answer": "4", "when": datetime.date(2026, 12, 7), "n": 3}, prompt_ids=[1, 2], row=5)
    completion = Completion(prompt_index=0, token_ids=[7, 8], text="4", finish_reason="stop", sampling_logprobs=[-0.1, -0.2])
    bundle = Bundle(step=3, policy_step=1, epoch=0, examples=[example], completions=[completion], totals=[1.0],
                    per_fn={"accuracy": [1.0]}, logged_metrics={}, logged_extras={}, slots=[0], padding=[], rounds=1,
                    informative=1, generation_s=0.1, scoring_s=0.0, metrics={"async/queue_depth": 1.0})
    back = msgspec.msgpack.decode(_ENCODER.encode(bundle), type=Bundle)
    assert back.completions == [completion] and back.examples[0].prompt_ids == [1, 2]
    assert back.examples[0].columns["when"] == "2026-12-07" and back.policy_step == 1
