"""[async] across two ranks of ``mlx.launch --backend ring`` standing in for two machines
(``generator_hosts``): rank 0 learns and alone writes, rank 1 generates (docs/async.md)."""

from __future__ import annotations

from pathlib import Path

from grpo_tui.protocol import messages as m
from tests.helpers.worker_harness import WorkerProcess, query

ROOT = Path(__file__).resolve().parents[2]


def test_a_generator_rank_under_mlx_launch_feeds_the_learner_within_max_staleness_and_the_run_learns(tmp_path):
    out = tmp_path / "out"
    worker = WorkerProcess(ROOT / "examples" / "quickstart.toml", "--set", "training.max_steps=6",
                           "--set", "async.max_staleness=1", "--set", 'async.generator_hosts=["127.0.0.1"]',
                           "--set", "eval.every=6", "--set", "eval.limit=100", "--set", "checkpoint.save_every=0",
                           "--set", f'checkpoint.output_dir="{out}"')
    worker.wait_for(m.Complete, timeout=300)
    assert worker.finish() == 0, worker.stderr.decode()[-3000:]
    assert [h.ranks for h in worker.of(m.Init)] == [1]  # one learner: the generator is no rank of its group
    steps = worker.of(m.Step)
    assert [s.step for s in steps] == list(range(1, 7))
    assert [s.extra_metrics["async/staleness_max"] for s in steps] == [0, 1, 1, 1, 1, 1]
    rows = query(out / "outputs.db", "SELECT step, policy_step FROM generations GROUP BY step ORDER BY step")
    assert rows == [(1, 0), (2, 0), (3, 1), (4, 2), (5, 3), (6, 4)]
    assert query(out / "outputs.db", "SELECT count(*) FROM runs") == [(1,)]  # rank 1 never wrote
    evals = {e.step: e.accuracy for e in worker.of(m.Eval)}
    assert evals[6] > evals[0], evals
