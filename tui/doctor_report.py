"""``grpo-tui doctor RUN_DIR [--json]``: the run doctor over a run's store, finished or live, old
stores too (docs/doctor.md). It replays the run's steps through ``common/doctor.py``'s rules, the
ones the worker applies as it trains; the text-reading rules (repetition, pass rates, reward
dominance) read the last windows' generations only, so a 500,000-generation store takes seconds.

Exit codes, for scripts: 0 nothing above info holds, 10 a warning holds, 11 a critical one, 2 a
mistake (no such run or store)."""

from __future__ import annotations

import json
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from grpo_tui.common.doctor import SEVERITIES, Doctor, GenFacts, StepFacts, worst
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import Config
from grpo_tui.protocol.schema import STEP_METRIC_COLUMNS, StoreError, step_from_row
from grpo_tui.tui.db.mlx_node import is_mlx_node_store
from grpo_tui.tui.db.store import open_readonly

HEALTHY, WARNING, CRITICAL = 0, 10, 11
DETAIL_WINDOWS = 3  # the last windows whose generations' text and per-function scores are read


@dataclass
class Report:
    store: Path
    run_id: int
    steps: int
    now: list[m.Finding]  # what holds at the last step, the most severe first
    history: list[m.Finding]  # every change, in step order

    @property
    def exit_code(self) -> int:
        level = worst(self.now)
        return CRITICAL if level == "critical" else WARNING if level == "warning" else HEALTHY


def diagnose(store: Path, config: Config, run_id: int | None = None) -> Report:
    """Replay run ``run_id`` of ``store`` (default: its newest) through the doctor."""
    conn = open_readonly(store)
    try:
        run = run_id if run_id is not None else _newest_run(conn)
        doctor = Doctor(config)
        steps = [r["step"] for r in conn.execute("SELECT step FROM steps WHERE run_id = ? ORDER BY step", (run,))]
        detailed = steps[max(0, len(steps) - DETAIL_WINDOWS * config.doctor.window)] if steps else 0
        greedy = int(config.eval is None or config.eval.greedy)  # the pass the run is judged by, as in the worker
        evals = [(int(r["step"]), float(r["accuracy"])) for r in conn.execute(
            "SELECT step, accuracy FROM evals WHERE run_id = ? AND greedy = ? AND accuracy IS NOT NULL ORDER BY step",
            (run, greedy))]
        generations = _generations(conn, run, detailed)
        history: list[m.Finding] = []
        columns = ", ".join(("step", "epoch", *STEP_METRIC_COLUMNS))
        for row in conn.execute(f"SELECT {columns} FROM steps WHERE run_id = ? ORDER BY step", (run,)):
            metrics = step_from_row(dict(row))
            since = [(s, a) for s, a in evals if s <= metrics.step]  # the start's (step 0) with step 1, as live
            evals = evals[len(since):]
            history += doctor.feed(StepFacts(metrics.step, metrics, generations.get(metrics.step, []), since))
        return Report(store, run, len(steps), doctor.findings(), history)
    finally:
        conn.close()


def _newest_run(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT max(id) AS id FROM runs").fetchone()
    if row is None or row["id"] is None:
        raise StoreError("the store holds no run yet")
    return int(row["id"])


def _generations(conn: sqlite3.Connection, run: int, detailed_from: int) -> dict[int, list[GenFacts]]:
    """Every generation of the run by step; text and per-function scores from step ``detailed_from`` on."""
    out: dict[int, list[GenFacts]] = {}
    sql = ("SELECT step, prompt_index, group_index, reward, num_tokens, finish_reason, "
           "CASE WHEN step >= ? THEN completion END AS text, CASE WHEN step >= ? THEN reward_details END AS details "
           "FROM generations WHERE run_id = ? ORDER BY step, id")
    for r in conn.execute(sql, (detailed_from, detailed_from, run)):
        scores = json.loads(r["details"]) if r["details"] else {}
        out.setdefault(r["step"], []).append(GenFacts(r["prompt_index"], r["group_index"], r["reward"], r["num_tokens"],
                                                      r["finish_reason"], r["text"] or "", scores))
    return out


def _line(finding: m.Finding) -> list[str]:
    ev = finding.evidence
    where = f"steps {ev.steps[0]}–{ev.steps[-1]}" if len(ev.steps) > 1 else f"step {ev.steps[0]}" if ev.steps else ""
    gens = f", {len(ev.generations)} generations" + (f" (finish reason {ev.finish_reason})" if ev.finish_reason else "")
    numbers = ", ".join(f"{k} {v:g}" for k, v in finding.numbers.items())
    lines = [f"{finding.severity:<8}  {finding.name} (since step {finding.since})", f"          {finding.message}",
             f"          numbers: {numbers}; evidence: {where}{gens if ev.generations else ''}"]
    if finding.suggestion:
        lines.append(f"          suggested change: {finding.suggestion}")
    return lines


def format_report(report: Report, folder: Path) -> str:
    counts = {level: sum(f.severity == level for f in report.now) for level in reversed(SEVERITIES)}
    health = " · ".join(f"{n} {level}" for level, n in counts.items() if n) or "ok: no finding"
    lines = [f"run {folder} (store {report.store}, run {report.run_id}, {report.steps} steps)", f"health: {health}"]
    for finding in report.now:
        lines += _line(finding)
    earlier = [f for f in report.history if not f.cleared and f.name not in {n.name for n in report.now}]
    if earlier:
        lines.append("earlier, cleared since: " + ", ".join(sorted({f"{f.name} (step {f.since})" for f in earlier})))
    return "\n".join(lines)


def as_json(report: Report, folder: Path) -> dict[str, Any]:
    return {"run_dir": str(folder), "store": str(report.store), "run_id": report.run_id, "steps": report.steps,
            "health": worst(report.now) or "ok", "exit_code": report.exit_code,
            "findings": msgspec.to_builtins(report.now), "history": msgspec.to_builtins(report.history)}


def run_doctor(folder: Path, as_json_output: bool) -> int:
    from grpo_tui.tui.runs import config_for, store_of

    if not folder.is_dir():
        print(f"grpo-tui: {folder}: no such run folder; name a run's output folder (grpo-tui ls lists them).", file=sys.stderr)
        return 2
    config, store = config_for(folder), store_of(folder)
    if store.is_file() and is_mlx_node_store(store):
        print(f"grpo-tui: {store} is mlx-node's store, not a grpo-tui run's: the doctor replays grpo-tui runs; "
              f"grpo-tui browse {store} opens it.", file=sys.stderr)
        return 2
    if config is None or not store.is_file():
        missing = "its outputs.db" if config is not None else "its config (no run.jsonl or supervisor record)"
        print(f"grpo-tui: {folder}: no run with a store here ({missing} is missing); "
              "name a run's output folder (grpo-tui ls lists them).", file=sys.stderr)
        return 2
    try:
        report = diagnose(store, config)
    except StoreError as exc:
        print(f"grpo-tui: {exc}.", file=sys.stderr)
        return 2
    except (sqlite3.Error, msgspec.ValidationError, ValueError, TypeError) as exc:  # a missing table, a foreign row
        print(f"grpo-tui: {store}: {str(exc).splitlines()[0]}; the store is damaged or not a grpo-tui "
              "store.", file=sys.stderr)
        return 2
    print(json.dumps(as_json(report, folder), indent=2) if as_json_output else format_report(report, folder))
    return report.exit_code
