"""Early stops in both rollout paths on the tiny random model: its greedy text loops, so the
repetition rule ends rows early, and a stop string cuts text and tokens where vLLM would."""

import pytest
from mlx_lm import load

from grpo_tui.protocol.config import GenerationConfig
from grpo_tui.worker.engine.policy import rollout
from grpo_tui.worker.engine.accel import fastgen
from tests.helpers.tiny_model import build_tiny_model
from tests.helpers.plans import stock_plan

MAX = 48


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model, tokenizer = load(str(build_tiny_model(tmp_path_factory.mktemp("tiny"))))
    prompts = [tokenizer.encode(text) for text in ("2+3=", "a much longer prompt", "zzz")]
    return model, tokenizer, prompts


@pytest.fixture(params=["compiled loop", "BatchGenerator"])
def path(request, monkeypatch):
    if request.param == "BatchGenerator":
        monkeypatch.setattr(fastgen, "supports", lambda *a, **k: False)
    return request.param


def greedy(tiny, **gen):
    model, tokenizer, prompts = tiny
    config = GenerationConfig(max_completion_length=MAX, **gen)
    return rollout.generate(model, tokenizer, prompts, 2, config, greedy=True, logprobs=False, plan=stock_plan(model, config))


def test_repetition_stop_ends_looping_rows_early(tiny, path):
    full = greedy(tiny)
    cut = greedy(tiny, repetition_stop_ngram=2, repetition_stop_count=3)
    assert any(c.finish_reason == "repetition" for c in cut)
    for a, b in zip(full, cut):
        assert a.token_ids[: len(b.token_ids)] == b.token_ids  # the same greedy text, ended sooner
        if b.finish_reason == "repetition":
            tail = b.token_ids[-6:]
            assert tail[:2] * 3 == tail  # one 2-gram three times
            assert len(b.token_ids) < len(a.token_ids)
    assert sum(len(c.token_ids) for c in cut) < sum(len(c.token_ids) for c in full)


def test_stop_string_cuts_the_text_and_keeps_the_completing_token(tiny, path):
    full = greedy(tiny)
    text = full[0].text
    stop = text[5:7]
    assert stop and "\ufffd" not in stop
    cut = greedy(tiny, stop=[stop])
    first = cut[0]
    assert first.finish_reason == "stop"
    assert first.text == text[: text.index(stop)]  # the stop string is not in the text
    _, tokenizer, _ = tiny
    assert stop in tokenizer.decode(first.token_ids)  # ... but its tokens were sampled and are kept
    assert stop not in tokenizer.decode(first.token_ids[:-1])
    assert full[0].token_ids[: len(first.token_ids)] == first.token_ids


def test_which_completions_leave_the_loss():
    from grpo_tui.protocol.config import GrpoConfig
    from grpo_tui.worker.engine.learning.update import masked_out

    kept = GrpoConfig()
    assert not any(masked_out(kept, f) for f in ("stop", "length", "repetition"))  # TRL's default: all train
    repetition_only = GrpoConfig(mask_repetition_completions=True)
    assert [masked_out(repetition_only, f) for f in ("stop", "length", "repetition")] == [False, False, True]
    truncated = GrpoConfig(mask_truncated_completions=True)
    assert [masked_out(truncated, f) for f in ("stop", "length", "repetition")] == [False, True, True]
