"""The shared-prompt training layout gives the same log-probs and gradients as the plain one."""

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx.utils import tree_flatten

from grpo_tui.protocol.config import ModelConfig
from grpo_tui.worker.engine.models import model_io
from grpo_tui.worker.engine.learning.batch import pack
from grpo_tui.worker.engine.learning.logps import token_logps
from grpo_tui.worker.engine.accel.llama_family import padded_causal_mask
from grpo_tui.worker.engine.accel.shared_prompt import group_prompts
from tests.helpers.tiny_model import build_tiny_model

G = 4


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    m, _ = model_io.load(ModelConfig(path=str(build_tiny_model(tmp_path_factory.mktemp("tiny")))))
    return m


def _rollout(vocab: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    heads = [[int(t) for t in rng.integers(3, vocab, n)] for n in (5, 11, 8)]  # different lengths
    prompts = [h for h in heads for _ in range(G)]
    completions = [[int(t) for t in rng.integers(3, vocab, int(rng.integers(1, 9)))] for _ in prompts]
    advantages = [float(a) for a in rng.normal(size=len(prompts))]
    keep = [i % 5 != 3 for i in range(len(prompts))]  # some masked out (mask_truncated_completions)
    return prompts, completions, advantages, keep


def _per_token(values: mx.array, mask: mx.array) -> list[np.ndarray]:
    v, m = np.array(values), np.array(mask)
    return [v[i][m[i] > 0] for i in range(v.shape[0])]


def test_logps_and_gradients_match_the_plain_layout(model):
    prompts, completions, advantages, keep = _rollout(model.args.vocab_size)
    plain = pack(prompts, completions, advantages, keep)
    shared = pack(prompts, completions, advantages, keep, group=G)
    assert plain.prompts is None and shared.prompts is not None
    assert shared.prompts.shape[0] == 3  # each prompt once

    lp_plain, ent_plain, _ = token_logps(model, plain, 0.7)
    lp_shared, ent_shared, _ = token_logps(model, shared, 0.7)
    for a, b in zip(_per_token(lp_plain, plain.mask), _per_token(lp_shared, shared.mask)):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, atol=2e-5)
    for a, b in zip(_per_token(ent_plain, plain.mask), _per_token(ent_shared, shared.mask)):
        np.testing.assert_allclose(a, b, atol=2e-5)

    def loss(batch):
        logps = token_logps(model, batch, 0.7).logps
        return mx.sum(logps * batch.mask * batch.advantages[:, None])

    (l1, g1), (l2, g2) = nn.value_and_grad(model, loss)(plain), nn.value_and_grad(model, loss)(shared)
    assert abs(l1.item() - l2.item()) < 1e-4 * max(1.0, abs(l1.item()))
    for (name, a), (_, b) in zip(tree_flatten(g1), tree_flatten(g2)):
        scale = float(mx.max(mx.abs(a)).item()) + 1e-12
        assert float(mx.max(mx.abs(a - b)).item()) / scale < 1e-4, name


def test_rows_not_in_groups_keep_the_plain_layout(model):
    prompts, completions, advantages, keep = _rollout(model.args.vocab_size)
    prompts[5] = prompts[0]  # row 5 no longer shares its group's prompt
    batch = pack(prompts, completions, advantages, keep, group=G)
    assert batch.prompts is None
    assert group_prompts([[1], [1], [2]], 2) == ([], False)  # not a whole number of groups


def test_padding_queries_always_see_themselves():
    mask = np.array(padded_causal_mask(mx.array([2, 0]), 4, 0, 4))
    assert mask[0, 0, 0].tolist() == [True, False, False, False]  # a padding row is never empty
    assert mask[0, 0, 3].tolist() == [False, False, True, True]  # real rows never see padding
    assert mask[1, 0, 3].tolist() == [True, True, True, True]
    assert mask.any(axis=-1).all()
