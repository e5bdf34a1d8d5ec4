"""``grpo-tui check CONFIG --probe [N]``: will it learn? (docs/doctor.md, "Before the run").

Loads the model as the run would, samples ``N`` prompts × ``group_size`` with the run's sampler,
scores them with the run's rewards, and trains four steps of the run's own batch shape (then forgets
them): the median of the last three is a step's time, their peak memory a step's. Run as a child process of ``check`` (the dashboard side
never imports MLX); prints one JSON object: ``python -m grpo_tui.worker.engine.probe CONFIG N [--set …]``.
"""

from __future__ import annotations

import json
import random
import sys
import time
from typing import Any

from grpo_tui.protocol.config import Config, load_config

CORRECT = 1.0 - 1e-9
TIMED_STEPS = 3  # after a first step that compiles


def probe(config: Config, prompts: int) -> dict[str, Any]:
    import mlx.core as mx

    from grpo_tui.worker.engine.stepwise import Batch, Engine

    config.store.enabled = False
    engine = Engine(config, log=lambda level, message: None)
    parts = engine.trainer.parts
    size = parts.prompts.dataset_size
    examples = parts.prompts.examples(random.Random(config.data.seed).sample(range(size), min(prompts, size)))
    t0 = time.perf_counter()
    parts.begin_step(1)
    completions = parts.policy.roll_out(1, [e.prompt_ids for e in examples], list(range(len(examples))))
    sampled = Batch(1, 0, examples, completions, generation_s=time.perf_counter() - t0)
    totals = engine.score(sampled)
    G = config.grpo.group_size
    accuracy = config.accuracy_label
    best = max((t for t in totals if t is not None), default=0.0)
    rates, flat = [], 0
    for k in range(len(examples)):
        group = totals[k * G : (k + 1) * G]
        values = [0.0 if t is None else t for t in group]
        flat += max(values) - min(values) <= 1e-9
        if accuracy is not None:
            scores = [v for v in sampled.per_function.get(accuracy, [])[k * G : (k + 1) * G] if v is not None]
            rates.append(sum(v >= CORRECT for v in scores) / len(scores) if scores else 0.0)
        else:
            rates.append(sum(v >= best - 1e-9 and v > 0 for v in values) / len(values))
    cut = sum(c.finish_reason == "length" for c in completions) / max(len(completions), 1)
    finished = sorted(c.model_tokens for c in completions if c.finish_reason != "length")
    engine.step_once()  # the run's own batch shape, once to build its compiled functions
    mx.reset_peak_memory()
    times = []
    for _ in range(TIMED_STEPS):  # then its time and memory (the weights are not kept)
        t0 = time.perf_counter()
        engine.step_once()
        times.append(time.perf_counter() - t0)
    # the median: a step whose completions reach a length not seen yet compiles again (several times a
    # step's time), which a run pays a few times at its start, not at every step
    step_s = sorted(times)[len(times) // 2]
    return {
        "prompts": len(examples), "group_size": G, "completions": len(completions),
        "pass_0": sum(r == 0 for r in rates) / len(rates), "pass_100": sum(r == 1 for r in rates) / len(rates),
        "pass_between": sum(0 < r < 1 for r in rates) / len(rates), "flat_groups": flat / len(examples),
        "truncated": cut, "max_completion_length": config.generation.max_completion_length,
        "finished_p95_tokens": finished[int(0.95 * (len(finished) - 1))] if finished else None,
        "mean_reward": sum(0.0 if t is None else t for t in totals) / max(len(totals), 1),
        "by_accuracy": accuracy is not None, "step_seconds": step_s, "total_steps": parts.prompts.total_steps,
        "run_seconds": step_s * parts.prompts.total_steps, "peak_memory_gb": mx.get_peak_memory() / 1e9,
    }


def main(argv: list[str]) -> int:
    path, count, overrides = argv[0], int(argv[1]), argv[2:]
    config = load_config(path, overrides=overrides)
    print(json.dumps(probe(config, count)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
