"""fastgen: the compiled fixed-shape rollout loop gives the same completions as mlx-lm's
BatchGenerator and as a plain full-recompute greedy decode, stops where it should, reads the
current weights, and reports the sampled tokens' log-probs."""


import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm import load as mlx_load
from mlx_lm.models import llama
from mlx_lm.sample_utils import make_sampler

from grpo_tui.protocol.config import GenerationConfig, ModelConfig
from grpo_tui.worker.engine.policy import rollout
from grpo_tui.worker.engine.accel import cpu_fast, fastgen, patches
from grpo_tui.worker.engine.models.model_io import load as policy_load
from tests.conftest import EXAMPLES
from tests.helpers.tiny_model import build_tiny_model
from tests.helpers.plans import stock_plan

TINY = str(EXAMPLES / "models" / "tiny-arith")
GREEDY = make_sampler(temp=0.0)


@pytest.fixture(scope="module")
def arith():
    """The trained tiny model (patched as the worker loads it) and chat prompts of two lengths."""
    model, tok = policy_load(ModelConfig(path=TINY))
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
               for q in ("What is 82+57?", "What is 3+4?", "What is 100+9?")]
    assert len({len(p) for p in prompts}) > 1  # left padding is exercised
    return model, tok, prompts


@pytest.fixture(scope="module")
def random_qwen3(tmp_path_factory):
    """An untrained model: long, varied greedy completions (no early stop)."""
    model, tok = mlx_load(str(build_tiny_model(tmp_path_factory.mktemp("tiny"), seed=3)))
    prompts = [tok.encode("hi"), tok.encode("a much longer prompt than the first"), tok.encode("1+1=")]
    return model, prompts


def random_llama(patched: bool):
    cfg = dict(model_type="llama", hidden_size=32, num_hidden_layers=2, intermediate_size=64,
               num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, vocab_size=97,
               max_position_embeddings=256, tie_word_embeddings=False)
    mx.random.seed(21)
    model = llama.Model(llama.ModelArgs.from_dict(cfg))
    mx.eval(model.parameters())
    if patched:
        assert patches.patch_model(model)
    return model


def naive_greedy(model, prompt, max_tokens, stop_ids=()):
    """Full recompute, no cache, no padding, no compile: (tokens, log-probs)."""
    out, lps = [], []
    for _ in range(max_tokens):
        logits = model(mx.array([prompt + out]))[0, -1].astype(mx.float32)
        logp = logits - mx.logsumexp(logits)
        tok = int(mx.argmax(logp).item())
        out.append(tok)
        lps.append(float(logp[tok].item()))
        if tok in stop_ids:
            break
    return out, lps


def batch_generator(model, prompts, n, max_tokens, stop_ids, sampler=GREEDY, logprobs=False):
    gen = GenerationConfig(max_completion_length=max_tokens)
    return rollout._batch_generator(model, prompts, n, gen, set(stop_ids), sampler, [], logprobs)


# ----------------------------------------------------------------------------- greedy equality


def test_greedy_equals_batch_generator_trained_model(arith):
    model, tok, prompts = arith
    stop = set(tok.eos_token_ids)
    fast = fastgen.generate_tokens(model, prompts, 2, 10, stop, GREEDY)
    ref = batch_generator(model, prompts, 2, 10, stop)
    assert fast[0] == ref[0]
    assert fast[1] == ref[1]
    assert all(fast[1]) and all(t[-1] in stop for t in fast[0])  # this model answers and stops
    assert [len(t) for t in fast[0]] == [len(t) for t in ref[0]]
    assert fast[0][0] == fast[0][1] and fast[0][2] == fast[0][3]  # greedy: a group's rows agree
    assert fast[2] == [[]] * 6  # no log-probs unless asked


@pytest.mark.parametrize("which", ["qwen3_stock", "llama_stock", "llama_patched"])
def test_greedy_equals_batch_generator_and_unpadded_reference(which, random_qwen3):
    if which == "qwen3_stock":
        model, prompts = random_qwen3
    else:
        model = random_llama(patched=which == "llama_patched")
        prompts = [[5, 6, 7], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [42]]
    fast, stopped, _ = fastgen.generate_tokens(model, prompts, 2, 12, set(), GREEDY)
    ref, ref_stopped, _ = batch_generator(model, prompts, 2, 12, set())
    assert fast == ref and stopped == ref_stopped == [False] * 6
    for i, p in enumerate(prompts):  # the padding never leaks into a row
        assert fast[2 * i] == naive_greedy(model, p, 12)[0]


def test_single_prompt_n1_equals_reference(arith):
    model, tok, prompts = arith
    for p in prompts:
        got, stopped, _ = fastgen.generate_tokens(model, [p], 1, 8, {2}, GREEDY)
        assert got[0] == naive_greedy(model, p, 8, {2})[0]


# ----------------------------------------------------------------------------- lengths and stops


def test_fixed_length_without_stop_ids(random_qwen3, arith):
    for model, prompts in (random_qwen3, arith[::2]):
        for max_tokens in (1, 7, 33):  # 33 crosses a cache bucket
            tokens, stopped, lps = fastgen.generate_tokens(model, prompts, 3, max_tokens, set(), GREEDY)
            assert len(tokens) == 3 * len(prompts)
            assert all(len(t) == max_tokens for t in tokens)
            assert stopped == [False] * len(tokens)


def test_stop_tokens_end_a_row_with_the_stop_token_and_nothing_after(random_qwen3):
    model, prompts = random_qwen3
    free, _, _ = fastgen.generate_tokens(model, prompts, 2, 16, set(), GREEDY)
    # stop on a token that one completion emits part-way, and that another never emits
    first = free[0]
    stop_id = next(t for t in first[2:] if t not in first[:2])
    tokens, stopped, _ = fastgen.generate_tokens(model, prompts, 2, 16, {stop_id}, GREEDY)
    assert stopped[0] and tokens[0][-1] == stop_id and len(tokens[0]) < 16
    for row, full in enumerate(free):
        if stop_id in full:
            cut = full.index(stop_id) + 1
            assert tokens[row] == full[:cut] and stopped[row], row
        else:
            assert tokens[row] == full and not stopped[row], row
    assert tokens == batch_generator(model, prompts, 2, 16, {stop_id})[0]


def test_all_rows_stop_before_max_tokens(arith):
    model, tok, prompts = arith
    tokens, stopped, _ = fastgen.generate_tokens(model, prompts, 2, 200, set(tok.eos_token_ids), GREEDY)
    assert all(stopped)
    assert all(t.count(2) == 1 and t[-1] == 2 and len(t) < 20 for t in tokens)


# ----------------------------------------------------------------------------- sampling


def test_sampling_is_reproducible_with_a_seed_and_varied_across_rows(random_qwen3):
    model, prompts = random_qwen3
    hot = make_sampler(temp=1.5)
    runs = []
    for seed in (5, 5, 6):
        mx.random.seed(seed)
        runs.append(fastgen.generate_tokens(model, prompts, 4, 10, set(), hot)[0])
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    for i in range(len(prompts)):  # a group's n completions are sampled independently
        group = runs[0][4 * i : 4 * i + 4]
        assert len({tuple(t) for t in group}) > 1


def test_unnormalized_logits_sample_the_same_tokens(random_qwen3):
    """Temperature and greedy sampling ignore a constant shift, so skipping the logsumexp
    (``normalized=False``) must not change a single sampled token."""
    model, prompts = random_qwen3
    for sampler in (make_sampler(temp=1.3), make_sampler(temp=0.0), make_sampler(temp=1.0, top_k=5)):
        runs = []
        for normalized in (True, False):
            mx.random.seed(11)
            runs.append(fastgen.generate_tokens(model, prompts, 3, 9, set(), sampler, normalized=normalized)[0])
        assert runs[0] == runs[1]


# ----------------------------------------------------------------------------- weights


def test_an_update_between_calls_is_seen():
    model = random_llama(patched=cpu_fast.enabled())
    prompts = [[5, 6, 7], [1, 2, 3, 4, 5, 6, 7, 8]]
    before, _, _ = fastgen.generate_tokens(model, prompts, 1, 10, set(), GREEDY)
    assert before[0] == naive_greedy(model, prompts[0], 10)[0]
    # An optimizer-style update: new arrays put into the same module tree.
    params = dict(tree_flatten(model.parameters()))
    rng = np.random.default_rng(9)
    new = {k: v + mx.array(rng.normal(scale=0.5, size=v.shape).astype(np.float32)) for k, v in params.items()}
    model.update(tree_unflatten(list(new.items())))
    mx.eval(model.parameters())
    after, _, _ = fastgen.generate_tokens(model, prompts, 1, 10, set(), GREEDY)
    assert after != before
    for i, p in enumerate(prompts):
        assert after[i] == naive_greedy(model, p, 10)[0]
    # and an attribute assignment (e.g. load_weights) too
    model.lm_head.weight = -model.lm_head.weight
    flipped, _, _ = fastgen.generate_tokens(model, prompts, 1, 10, set(), GREEDY)
    assert flipped != after
    for i, p in enumerate(prompts):
        assert flipped[i] == naive_greedy(model, p, 10)[0]


# ----------------------------------------------------------------------------- the shared prompt cache


@pytest.mark.parametrize("patched", [True, False])
def test_the_prompt_cache_is_kept_once_per_group_and_decodes_what_the_repeated_one_does(patched, monkeypatch):
    model = random_llama(patched=patched)
    prompts = [[5, 6, 7], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [42]]
    monkeypatch.setattr(fastgen.patches, "is_patched", lambda m: False)
    repeated = fastgen.generate_tokens(model, prompts, 3, 12, set(), GREEDY, logprobs=True)
    assert not fastgen.prefill(model, prompts, 3, 12).prompt
    # The x86 attention reads a shared prompt cache (patched); mlx-lm's attention is handed the
    # prompt repeated in front (unpatched): both must decode the same tokens.
    monkeypatch.setattr(fastgen.patches, "is_patched", lambda m: True)
    cache = fastgen.prefill(model, prompts, 3, 12)
    assert cache.prompt[0].shape[0] == 3 and cache.kv[0].shape[0] == 9  # one prompt row, n completion rows
    assert cache.kv[0].shape[2] == fastgen.BUCKET and cache.length == 11 + fastgen.BUCKET  # completion slots only
    shared = fastgen.generate_tokens(model, prompts, 3, 12, set(), GREEDY, logprobs=True)
    assert shared[0] == repeated[0] and shared[1] == repeated[1]
    np.testing.assert_allclose(np.array(shared[2]), np.array(repeated[2]), atol=1e-5)
    for i, p in enumerate(prompts):
        assert shared[0][3 * i] == naive_greedy(model, p, 12)[0]


def test_prefix_attention_equals_attention_over_the_repeated_prompt():
    mx.random.seed(4)
    prompts, n, heads, kv_heads, width, slots, d = 2, 3, 4, 2, 5, 4, 8
    q = mx.random.normal((prompts * n, heads, 1, d))
    pk, pv = mx.random.normal((prompts, kv_heads, width, d)), mx.random.normal((prompts, kv_heads, width, d))
    k, v = mx.random.normal((prompts * n, kv_heads, slots, d)), mx.random.normal((prompts * n, kv_heads, slots, d))
    left_pad = mx.repeat(mx.array([2, 0]), n)
    mask = fastgen.shared_prompt_mask(left_pad, mx.array(width), mx.array(width + 2), 1, width, slots)
    got = cpu_fast.prefix_attention(q, pk, pv, k, v, 0.3, mask)
    full_k = mx.concatenate([mx.repeat(pk, n, axis=0), k], axis=2)
    full_v = mx.concatenate([mx.repeat(pv, n, axis=0), v], axis=2)
    want = cpu_fast.attention(q, full_k, full_v, 0.3, mask)
    np.testing.assert_allclose(np.array(got), np.array(want), atol=1e-5)
    seen = np.array(mask)[:, 0, 0]
    assert seen[0].tolist() == [False, False, True, True, True, True, True, True, False]  # padding, future slot


# ----------------------------------------------------------------------------- log-probs


def test_greedy_logprobs_match_the_model(arith, random_qwen3):
    for model, prompts, stop in ((arith[0], arith[2], {2}), (random_qwen3[0], random_qwen3[1], set())):
        tokens, stopped, lps = fastgen.generate_tokens(model, prompts, 2, 9, stop, GREEDY, logprobs=True)
        for row, (t, lp) in enumerate(zip(tokens, lps)):
            assert len(lp) == len(t)
            assert all(v <= 1e-6 for v in lp)
            ref_tokens, ref_lps = naive_greedy(model, prompts[row // 2], 9, stop)
            assert t == ref_tokens
            np.testing.assert_allclose(lp, ref_lps, atol=1e-4)


def test_sampled_logprobs_match_the_model_and_batch_generator(random_qwen3):
    model, prompts = random_qwen3
    sampler = make_sampler(temp=1.0)
    mx.random.seed(1)
    tokens, _, lps = fastgen.generate_tokens(model, prompts, 2, 8, set(), sampler, logprobs=True)
    for row, (t, lp) in enumerate(zip(tokens, lps)):
        p = prompts[row // 2]
        logits = model(mx.array([p + t]))[0, len(p) - 1 : -1].astype(mx.float32)
        ref = mx.take_along_axis(logits - mx.logsumexp(logits, axis=-1, keepdims=True), mx.array(t)[:, None], -1)
        np.testing.assert_allclose(lp, np.array(ref)[:, 0], atol=1e-4)
        assert all(v <= 1e-6 for v in lp)
    # same numbers as mlx-lm reports on the greedy path
    g_tokens, _, g_lps = fastgen.generate_tokens(model, prompts, 1, 6, set(), GREEDY, logprobs=True)
    r_tokens, _, r_lps = batch_generator(model, prompts, 1, 6, set(), logprobs=True)
    assert g_tokens == r_tokens
    np.testing.assert_allclose(np.array(g_lps), np.array(r_lps), atol=1e-4)


# ----------------------------------------------------------------------------- dispatch


def test_supports_and_rollout_dispatch(arith, monkeypatch):
    model, tok, prompts = arith
    assert fastgen.supports(model, 1.0)
    assert not fastgen.supports(model, 1.1)
    windowed = random_llama(patched=False)
    windowed.args.sliding_window = 16
    assert not fastgen.supports(windowed, 1.0)
    from mlx_lm.models import gpt2

    g = gpt2.Model(gpt2.ModelArgs(model_type="gpt2", n_ctx=32, n_embd=16, n_head=2, n_layer=1,
                                  n_positions=32, layer_norm_epsilon=1e-5, vocab_size=40))
    assert not fastgen.supports(g, 1.0)

    calls = []
    real = rollout._batch_generator
    monkeypatch.setattr(rollout, "_batch_generator", lambda *a, **k: calls.append(1) or real(*a, **k))
    gen = GenerationConfig(max_completion_length=8)
    fast = rollout.generate(model, tok, prompts, 2, gen, greedy=True, plan=stock_plan(model, gen))
    assert calls == []
    slow = rollout.generate(model, tok, prompts, 2, gen, greedy=True, logprobs=False, plan=stock_plan(model, gen))
    assert [c.token_ids for c in slow] == [c.token_ids for c in fast]
    assert all(c.finish_reason == "stop" and c.token_ids[-1] == 2 for c in fast)
    assert all(len(c.sampling_logprobs) == len(c.token_ids) for c in fast)
    rollout.generate(model, tok, prompts, 2, GenerationConfig(max_completion_length=8, repetition_penalty=1.1), greedy=True, plan=stock_plan(model, GenerationConfig(max_completion_length=8, repetition_penalty=1.1)))
    assert calls == [1]


@pytest.mark.parametrize("dtype", [mx.bfloat16, mx.float16])
def test_half_precision_model_with_left_padding(arith, dtype):
    """A padded batch gives each prompt the completion it gets alone (bf16/fp16 checkpoints)."""
    model, tok = policy_load(ModelConfig(path=TINY))
    model.set_dtype(dtype)
    prompts = arith[2]
    batch, _, _ = fastgen.generate_tokens(model, prompts, 1, 6, {2}, GREEDY)
    alone = [fastgen.generate_tokens(model, [p], 1, 6, {2}, GREEDY)[0][0] for p in prompts]
    assert batch == alone
