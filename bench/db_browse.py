"""Database tab benchmark: page, search and open generations in a 1,000,000-generation store
while a writer process keeps appending steps.

    .venv/bin/python bench/db_browse.py            # builds .bench/db_browse-1000000.db once (a few minutes)
    .venv/bin/python bench/db_browse.py --generations 100000 --repeat 5

Prints the median and worst time of each query the Database tab runs, measured through the same
read-only connection and query functions the tab uses, against the targets of issue 6.
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import sqlite3
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.tui.db.make_store import RunSpec, add_steps, build_store  # noqa: E402

from grpo_tui.tui.db import GenFilter, open_readonly  # noqa: E402
from grpo_tui.tui.db import queries as q  # noqa: E402

PROMPTS, GROUP = 8, 8  # 64 generations per step


def cached_store(generations: int) -> Path:
    path = ROOT / ".bench" / f"db_browse-{generations}.db"
    if not path.exists():
        path.parent.mkdir(exist_ok=True)
        steps = -(-generations // (PROMPTS * GROUP))
        print(f"building {path} ({steps} steps x {PROMPTS * GROUP} generations; once, a few minutes)...", flush=True)
        t = time.perf_counter()
        tmp = path.with_suffix(".building")
        tmp.unlink(missing_ok=True)
        build_store(tmp, [RunSpec("bench", steps=steps, prompts=PROMPTS, group=GROUP, status="running")])
        tmp.rename(path)
        print(f"built in {time.perf_counter() - t:.0f} s", flush=True)
    return path


def writer(path: str, first: int, stop: multiprocessing.Event, counter) -> None:
    """Append steps to run 1 like the worker does (one transaction per step) until told to stop."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA busy_timeout=5000")
    spec = RunSpec("bench", steps=10**6, prompts=PROMPTS, group=GROUP)
    step = first
    while not stop.is_set():
        add_steps(conn, 1, spec, step, 1, seed=1)
        step += 1
        counter.value += 1
        time.sleep(0.05)
    conn.close()


def timed(fn, repeat: int) -> tuple[float, float, object]:
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), max(times), result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--generations", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--no-writer", action="store_true", help="measure without the concurrent writer")
    args = ap.parse_args()

    work = ROOT / ".bench" / "db_browse-work.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{work}{suffix}").unlink(missing_ok=True)
    shutil.copy(cached_store(args.generations), work)  # the writer appends to a copy, the cache stays clean
    conn = sqlite3.connect(work)
    last = conn.execute("SELECT max(step) FROM steps").fetchone()[0]
    total = conn.execute("SELECT count(*) FROM generations").fetchone()[0]
    conn.close()

    stop, counter = multiprocessing.Event(), multiprocessing.Value("i", 0)
    proc = None
    if not args.no_writer:
        proc = multiprocessing.Process(target=writer, args=(str(work), last + 1, stop, counter), daemon=True)
        proc.start()
        time.sleep(1.0)

    t = time.perf_counter()
    ro = open_readonly(work)
    open_ms = (time.perf_counter() - t) * 1000
    run = GenFilter(run_id=1)
    searched = GenFilter(run_id=1, reward_min=1.0, finish_reason="stop", has_thinking=True, text="banana")
    rare = GenFilter(run_id=1, text="pwned")
    ranged = GenFilter(run_id=1, step_min=last // 2, step_max=last // 2 + 100, sort="reward")
    rows = [("open store (read-only, schema check)", None, (open_ms, open_ms))]

    def row(label, target, fn):
        med, worst, result = timed(fn, args.repeat)
        rows.append((label, target, (med, worst)))
        return result

    first = row("first page of generations", 200, lambda: q.generations_page(ro, run))
    row("next page", 100, lambda: q.generations_page(ro, run, after=first.next))
    deep = q.generations_page(ro, run, after=(last // 3, 10**12))
    row("next page, deep in the run (keyset)", 100, lambda: q.generations_page(ro, run, after=deep.next))
    found = row("filtered + searched page (reward, finish, thinking, FTS)", 500,
                lambda: q.generations_page(ro, searched))
    row("next page of the filtered + searched", 500, lambda: q.generations_page(ro, searched, after=found.next))
    row("rare search term", 500, lambda: q.generations_page(ro, rare))
    row("filtered + searched, sorted by reward", 500, lambda: q.generations_page(ro, replace(searched, sort="reward")))
    row("search + a filter few matches pass (tool error, repetition)", None,
        lambda: q.generations_page(ro, replace(searched, finish_reason="repetition", tool_status="error")))
    row("count of the filtered + searched (status line, background)", None, lambda: q.count_generations(ro, searched))
    row("step range sorted by reward", 500, lambda: q.generations_page(ro, ranged))
    row("first page sorted by reward", 200, lambda: q.generations_page(ro, GenFilter(run_id=1, sort="reward")))
    row("detail open", 50, lambda: q.generation(ro, first.rows[0].id))
    row("runs list", 200, lambda: q.runs(ro))

    if proc:
        stop.set()
        proc.join(10)
    print(f"\nstore: {total:,} generations (+{counter.value * PROMPTS * GROUP:,} written during the run), "
          f"{args.repeat} repeats, writer {'off' if proc is None else 'on'}")
    print(f"{'query':<62} {'median ms':>10} {'worst ms':>9} {'target':>7}  ok")
    for label, target, (med, worst) in rows:
        ok = "" if target is None else ("yes" if med < target else "NO")
        print(f"{label:<62} {med:>10.2f} {worst:>9.2f} {('< ' + str(target)) if target else '':>7}  {ok}")
    ro.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
