"""reasoning-gym as a data source and a reward (docs/environments.md, "reasoning-gym").

``[data] reasoning_gym`` generates the training rows (and the eval rows, from another seed) in the
worker with reasoning-gym's own composite dataset: each row is one entry, ``prompt`` its question,
``answer`` and ``metadata`` its own columns, so the entry travels with the row to the rewards. The
built-in reward ``reasoning_gym`` rebuilds the entry from the row and scores the completion's answer
with the entry's own task's scorer (``reasoning_gym.get_score_answer_fn``). No MLX here; nothing is
downloaded: reasoning-gym generates its tasks offline.
"""

from __future__ import annotations

import dataclasses
import hashlib
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Callable

from grpo_tui.common.install_hint import not_installed
from grpo_tui.protocol.config_environments import ReasoningGymConfig
from grpo_tui.protocol.outcome import Mistake
from grpo_tui.worker.engine.policy.parsing import split_thinking

ANSWER_TAG = "answer"


def require(key: str) -> Any:
    try:
        import reasoning_gym
    except ImportError:
        raise Mistake("data", not_installed(key, "reasoning-gym")) from None
    return reasoning_gym


def build(config: ReasoningGymConfig, prompt_column: str = "prompt", *, held_out: bool = False,
          levels: int = 0) -> tuple[list[dict[str, Any]], str]:
    """The rows of the training set (``held_out``: the eval set, from ``eval_seed``) and their
    fingerprint (the tasks, size, seed and reasoning-gym's version) for resume checks. ``levels``
    (``curriculum.strategy = "levels"``): ``size`` rows at each of that many difficulty levels, each
    with its ``level`` column (docs/curriculum.md, "Levels")."""
    rg = require("data.reasoning_gym")
    from reasoning_gym.composite import DatasetSpec

    seed = config.held_out_seed if held_out else config.seed
    size = config.eval_size if held_out else config.size
    specs = config.specs()
    rows = []
    for level in range(levels) if levels else [None]:
        try:
            tasks = [DatasetSpec(t.name, float(t.weight), _at_level(t.name, dict(t.config), level, seed, size)) for t in specs]
            dataset = rg.create_dataset("composite", size=size, seed=seed, datasets=tasks)
            entries = [dataset[i] for i in range(size)]
        except Exception as exc:  # noqa: BLE001 — an unknown task, a bad task config: the user's to fix
            raise Mistake("data", f"data.reasoning_gym: {_sentence(exc, [t.name for t in specs])}") from None
        rows += [{prompt_column: e["question"], "answer": e["answer"], "metadata": e["metadata"],
                  **({} if level is None else {"level": level})} for e in entries]
    try:
        package = version("reasoning-gym")
    except PackageNotFoundError:
        package = "?"
    digest = hashlib.sha256(f"{config.fingerprint()} {seed} {size} {package}{f' levels {levels}' if levels else ''}".encode()).hexdigest()
    return rows, digest


def _at_level(name: str, own: dict[str, Any], level: int | None, seed: int, size: int) -> dict[str, Any]:
    """A task's config at a global difficulty ``level`` of its reasoning-gym curriculum (the task's
    own keys win); ``own`` as it is without a level or a curriculum."""
    import reasoning_gym.factory as factory

    if level is None or not factory.has_curriculum(name):
        return own
    curriculum = factory.create_curriculum(name)
    curriculum.set_global_level(level)
    generated = dataclasses.asdict(curriculum.generate_configuration({"seed": seed, "size": size}))
    return {**{k: v for k, v in generated.items() if k not in ("seed", "size")}, **own}


def _sentence(exc: Exception, names: list[str]) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "not registered" in text:
        import reasoning_gym.factory as factory

        known = sorted(factory.DATASETS)
        unknown = next((n for n in names if n not in known), "?")
        return f"no reasoning-gym task {unknown!r} (it has {len(known)}, e.g. {', '.join(known[:6])})"
    return f"reasoning-gym refused the tasks' config: {type(exc).__name__}: {text}"


def completion_answer(text: str) -> str:
    """What is scored: the last ``<answer>…</answer>`` of the text after thinking (reasoning-gym's
    ``extract_answer``), else that whole text, stripped."""
    from reasoning_gym.utils import extract_answer

    after = split_thinking(text)[1]
    found = extract_answer(after, tag_name=ANSWER_TAG)
    return found if found is not None else after.strip()


def reasoning_gym(prompts: list, completions: list[str], answer: list | None = None, metadata: list | None = None,
                  log_extra: Callable[[str, list[Any]], None] | None = None, **_: Any) -> list[float | None]:
    """Each completion's answer scored by its entry's own task (reasoning-gym's ``score_answer``:
    1.0 right, 0.0 wrong, some tasks give partial credit); ``None`` for a row that is no entry (no
    ``metadata``). The scored answer is logged with the generation (``answer``)."""
    rg = require("the reasoning_gym reward")
    n = len(completions)
    answers = answer if answer is not None else [None] * n
    metas = metadata if metadata is not None else [None] * n
    scores: list[float | None] = []
    scored: list[Any] = []
    for prompt, text, expected, meta in zip(prompts, completions, answers, metas):
        if not isinstance(meta, dict) or "source_dataset" not in meta:
            scores.append(None)
            scored.append(None)
            continue
        got = completion_answer(text)
        entry = {"question": prompt, "answer": expected, "metadata": meta}
        try:
            scores.append(float(rg.get_score_answer_fn(meta["source_dataset"])(got, entry)))
        except Exception:  # noqa: BLE001 — a scorer that chokes on the model's text: a wrong answer
            scores.append(0.0)
        scored.append(got)
    if log_extra is not None:
        log_extra("answer", scored)
    return scores
