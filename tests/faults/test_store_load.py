"""The store under load: the dashboard's readers poll while the worker's writer commits steps.

The writer is the worker's own ``Store`` (aiosqlite, one ``BEGIN IMMEDIATE`` transaction per
step); the readers are the Database tab's query functions on its read-only ``ReadStore``, polling
as fast as they can from other processes (as the dashboard does): run list, steps, pages with and without search, counts, details,
and a long export that holds one read snapshot across many batches. No reader may ever see
"database is locked" (or any error), and the writer is never held up: its worst step commit under
load (and how long it waited for the write lock) is measured against the same writes with no
reader, and printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import statistics
import time
from pathlib import Path

import pytest

from grpo_tui.protocol.messages import Step, ToolCall
from grpo_tui.tui.db import GenFilter, ReadStore
from grpo_tui.tui.db import queries as q
from grpo_tui.worker.trainer_contract import Generation, StepOutput
from grpo_tui.worker.store import Store

STEPS = 250
PER_STEP = 16  # batch 4 x group 4
WORST_WAIT_BOUND_S = 1.0  # generous: the store's busy_timeout is 5 s; a blocked writer would show it


def output(step: int) -> StepOutput:
    text = " ".join(f"word{(step * 7 + i) % 97}" for i in range(150))  # ~1.2 KB completions
    gens = [
        Generation(
            prompt_index=i // 4, group_index=i % 4, prompt=f"prompt {i // 4} of step {step}",
            completion=f"answer {step}.{i} {text}", raw_completion=f"<think>hm</think>answer {text}",
            thinking="hm" if i % 2 else None, reward=(i % 4) / 3, reward_details={"accuracy": (i % 4) / 3},
            advantage=(i % 4) - 1.5, num_tokens=150, finish_reason="stop" if i % 3 else "length",
            tool_calls=[ToolCall(index=0, name="add", arguments={"a": i}, raw="{}")] if i % 5 == 0 else [],
        )  # fmt: skip
        for i in range(PER_STEP)
    ]
    return StepOutput(metrics=Step(step=step, epoch=0, loss=0.01 * step, reward=0.5, num_tokens=2400), generations=gens)


class TimedStore(Store):
    """The worker's store, timing how long each transaction waits for the write lock."""

    lock_waits: list[float]

    @contextlib.asynccontextmanager
    async def _transaction(self):  # type: ignore[no-untyped-def, override]
        t0 = time.perf_counter()
        async with super()._transaction() as conn:  # returns once BEGIN IMMEDIATE holds the lock
            self.lock_waits.append(time.perf_counter() - t0)
            yield conn


async def write_steps(db: Path, first: int, last: int) -> tuple[list[float], list[float]]:
    """Write steps first..last as the worker does; return (commit times, lock waits) in seconds."""
    store = await TimedStore.open(db)
    store.lock_waits = []
    run = 1 if first > 1 else await store.create_run("load", "m", "/m", {}, last)
    times = []
    for step in range(first, last + 1):
        store.queue_log(step, "info", f"step {step}")
        t0 = time.perf_counter()
        await store.write_step(run, output(step))
        times.append(time.perf_counter() - t0)
    await store.finish_run(run, "completed")
    await store.close()
    return times, store.lock_waits


def poll(db: Path, kind: str, stop, results) -> None:  # type: ignore[no-untyped-def]
    """One reader process doing what the Database tab does, as fast as it can, until ``stop``."""
    store, f = ReadStore(db), GenFilter(run_id=1)
    errors: list[str] = []
    rounds, seen = 0, []
    while not stop.is_set():
        try:
            if kind == "pages":
                seen.append(store.run(q.runs)[0].steps)
                page = store.run(q.generations_page, f)
                if page.next is not None:
                    store.run(q.generations_page, f, page.next)
                if page.rows:
                    store.run(q.generation, page.rows[0].id)
                store.run(q.steps, 1)
            elif kind == "search":
                store.run(q.generations_page, GenFilter(run_id=1, text="word42 OR answer", sort="reward"))
                store.run_background(q.count_generations, GenFilter(run_id=1, reward_min=0.5, finish_reason="stop"))
            else:  # export: one long read of everything, batch by batch, on one snapshot
                store.run(lambda conn: sum(1 for _ in q.iter_generations(conn, f, batch=200)))
            rounds += 1
        except Exception as exc:  # noqa: BLE001 — every error is a failure the user would see
            errors.append(f"{kind}: {type(exc).__name__}: {exc}")
    store.close()
    results.put((kind, rounds, errors, seen))


@pytest.mark.slow
def test_readers_never_see_locked_and_never_block_the_writer(tmp_path):
    db = tmp_path / "outputs.db"
    baseline, base_waits = asyncio.run(write_steps(tmp_path / "baseline.db", 1, STEPS))  # nobody reading

    asyncio.run(write_steps(db, 1, 1))  # the store exists before the dashboard opens it
    ctx = multiprocessing.get_context("spawn")
    stop, results = ctx.Event(), ctx.Queue()
    kinds = ("pages", "pages", "search", "export")
    readers = [ctx.Process(target=poll, args=(db, kind, stop, results)) for kind in kinds]
    for p in readers:
        p.start()
    time.sleep(2.0)  # let them start polling (spawned interpreters import first)
    try:
        loaded, waits = asyncio.run(write_steps(db, 2, STEPS + 1))
    finally:
        stop.set()
        reports = [results.get(timeout=60) for _ in readers]
        for p in readers:
            p.join(timeout=30)
    counts: dict[str, int] = {}
    errors = [e for _, _, errs, _ in reports for e in errs]
    seen = [n for _, _, _, s in reports for n in s]
    for kind, rounds, _, _ in reports:
        counts[kind] = counts.get(kind, 0) + rounds

    worst, worst_base = max(loaded), max(baseline)
    print(
        f"\nwriter: {len(loaded)} step commits of {PER_STEP} generations under 4 polling reader processes "
        f"({counts} reader rounds); commit median {statistics.median(loaded) * 1000:.1f} ms, worst "
        f"{worst * 1000:.1f} ms, worst wait for the write lock {max(waits) * 1000:.2f} ms "
        f"(no readers: median {statistics.median(baseline) * 1000:.1f} ms, worst {worst_base * 1000:.1f} ms, "
        f"lock {max(base_waits) * 1000:.2f} ms)"
    )
    assert errors == [], errors[:5]
    assert all(counts.get(k, 0) >= 3 for k in ("pages", "search", "export")), counts  # they really polled
    assert min(seen) < STEPS / 2 and max(seen) > STEPS / 2  # readers saw the run grow as it was written
    assert max(waits) < WORST_WAIT_BOUND_S  # readers never hold the writer's lock
    assert worst < 2 * WORST_WAIT_BOUND_S  # nor slow a commit down to where a user would notice
