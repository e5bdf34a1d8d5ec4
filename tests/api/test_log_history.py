"""trainer.state.log_history has the metrics TRL 1.16's GRPOTrainer logs, with its meaning: each
checked against a hand computation on the same completions (read back from the run's store)."""

from __future__ import annotations

import json
import sqlite3
import statistics

import pytest

from grpo_tui import GRPOTrainer
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.codec import decode_event
from tests.helpers.api_runs import TINY_MODEL, quick_args


def length_score(completions, **kwargs):
    return [len(c) / 10 for c in completions]


def every_other(completions, **kwargs):  # None: not applicable, left out of TRL's nan-aware std
    return [float(i) if i % 2 else None for i in range(len(completions))]


def test_log_history_has_trls_metrics_with_trls_values(tmp_path):
    # 7 tokens at most: of these seeded completions (6 to 8 tokens) some end on EOS, some are cut
    args = quick_args(tmp_path, max_steps=2, max_completion_length=7, save_steps=10)
    trainer = GRPOTrainer(model=str(TINY_MODEL), reward_funcs=[length_score, every_other], args=args,
                          train_dataset=[{"prompt": f"What is {i}+{i}?"} for i in range(4)])
    trainer.train()
    entries = {e["step"]: e for e in trainer.state.log_history if "reward" in e}
    out = tmp_path / "run"
    with sqlite3.connect(out / "outputs.db") as db:
        rows = db.execute("SELECT step, reward, reward_details, num_tokens, finish_reason FROM generations").fetchall()
    frames = [decode_event(line) for line in (out / "run.jsonl").read_bytes().splitlines()]
    tokens = {e.step: e.num_tokens for e in frames if isinstance(e, m.Step)}
    assert sorted(entries) == [1, 2]
    assert {r[4] for r in rows} == {"stop", "length"}  # both kinds, so the terminated lengths tell them apart
    for step, entry in entries.items():
        done = [r for r in rows if r[0] == step]
        details = [json.loads(r[2]) for r in done]
        assert len(done) == 4
        for name in ("length_score", "every_other"):
            scored = [d[name] for d in details if d[name] is not None]
            assert entry[f"rewards/{name}/std"] == pytest.approx(statistics.stdev(scored))
        assert entry["reward_std"] == pytest.approx(statistics.stdev([r[1] for r in done]))  # the batch's
        ended = [r[3] for r in done if r[4] == "stop"] or [0]  # TRL: 0 when none ended on EOS
        assert entry["completions/mean_terminated_length"] == pytest.approx(statistics.mean(ended))
        assert entry["completions/min_terminated_length"] == min(ended)
        assert entry["completions/max_terminated_length"] == max(ended)
        assert entry["num_tokens"] == sum(n for s, n in tokens.items() if s <= step)  # the run's so far
        # one pass on the sampling policy: ratio 1, nothing clipped (the values: test_grpo.py)
        assert entry["clip_ratio/low_min"] == 0.0 and entry["clip_ratio/high_max"] == 0.0

