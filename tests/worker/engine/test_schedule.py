"""LR schedules: the same numbers as transformers' schedulers, step by step."""

from __future__ import annotations

import ast
import importlib.util
import math
from pathlib import Path

import pytest

from grpo_tui.worker.engine.learning.schedule import SCHEDULER_TYPES, lr_at, warmup_steps


def _transformers_lambdas() -> dict[str, object]:
    """transformers' lr_lambda functions, read from its source (importing it needs torch)."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        pytest.skip("transformers is not installed")
    source = (Path(spec.origin).parent / "optimization.py").read_text()
    wanted = {
        "_get_constant_schedule_with_warmup_lr_lambda",
        "_get_linear_schedule_with_warmup_lr_lambda",
        "_get_cosine_schedule_with_warmup_lr_lambda",
    }
    namespace: dict[str, object] = {"math": math}
    for node in ast.parse(source).body:  # the last definition wins, as on import
        if isinstance(node, ast.FunctionDef) and node.name in wanted:
            exec(compile(ast.Module([node], []), "optimization.py", "exec"), namespace)
    return namespace


def _reference(kind: str, k: int, warmup: int, total: int, min_lr_rate: float) -> float:
    ns = _transformers_lambdas()
    if kind == "constant":
        return 1.0
    if kind == "constant_with_warmup":
        return ns["_get_constant_schedule_with_warmup_lr_lambda"](k, num_warmup_steps=warmup)
    if kind == "linear":
        return ns["_get_linear_schedule_with_warmup_lr_lambda"](k, num_warmup_steps=warmup, num_training_steps=total)
    rate = min_lr_rate if kind == "cosine_with_min_lr" else 0.0
    return ns["_get_cosine_schedule_with_warmup_lr_lambda"](
        k, num_warmup_steps=warmup, num_training_steps=total, num_cycles=0.5, min_lr_rate=rate
    )


@pytest.mark.parametrize("kind", SCHEDULER_TYPES)
@pytest.mark.parametrize("warmup,total", [(0, 10), (3, 10), (10, 10), (5, 200)])
def test_every_schedule_matches_transformers(kind: str, warmup: int, total: int) -> None:
    ours = [lr_at(s, 2e-5, kind, total, warmup_steps_=warmup, min_lr_rate=0.1) for s in range(1, total + 1)]
    theirs = [2e-5 * _reference(kind, s - 1, warmup, total, 0.1) for s in range(1, total + 1)]
    assert ours == pytest.approx(theirs, rel=1e-12, abs=0.0)


def test_warmup_then_decay_shape() -> None:
    lrs = [lr_at(s, 1.0, "cosine", 10, warmup_steps_=2) for s in range(1, 11)]
    assert lrs[0] == 0.0 and lrs[1] == 0.5 and lrs[2] == 1.0  # the first update of a warmup uses 0
    assert all(a > b for a, b in zip(lrs[2:], lrs[3:]))  # then decays
    floor = [lr_at(s, 1.0, "cosine_with_min_lr", 10, min_lr_rate=0.2) for s in range(1, 12)]
    assert min(floor) >= 0.2 - 1e-12
    assert lr_at(5, 3e-4, "constant", 10, warmup_steps_=4) == 3e-4  # plain constant ignores warmup


def test_warmup_ratio_rounds_up_like_transformers() -> None:
    assert warmup_steps(200, 0, 0.1) == 20
    assert warmup_steps(15, 0, 0.1) == 2  # ceil(1.5)
    assert warmup_steps(200, 7, 0.5) == 7  # explicit steps win
