"""Finding runs on disk: ``grpo-tui ls`` and ``grpo-tui attach`` without a folder. No Textual here.

A run folder is an output folder with a supervisor record (``.control/supervisor.json``,
protocol/control.py) or a ``run.jsonl`` (a run started with ``grpo-tui worker``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec

from grpo_tui.common.tomlout import dumps
from grpo_tui.protocol import control as c
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.codec import ProtocolError, decode_event, line_prefix
from grpo_tui.protocol.config import Config, ConfigError, load_config, parse_config
from grpo_tui.protocol.layout import RUN_LOG_FILE, STORE_FILE, parse_checkpoint_dir_name

MAX_DEPTH = 4
TAIL_BYTES = 256 * 1024  # enough of run.jsonl's end for the last step and how the run ended
SKIP = {".git", "node_modules", "__pycache__", ".venv", "venv", c.CONTROL_DIR}


@dataclass
class RunInfo:
    folder: Path
    status: str  # running, paused, done, stopped, crashed, mistake, nan_stop, ... or unknown
    step: int
    total_steps: int
    pid: int  # the supervisor's (0: none)
    started_at: float
    last_reward: float | None
    live: bool
    changes: int = 0  # live changes (docs/steering.md)
    parent: Path | None = None  # a fork's parent folder (grpo-tui fork)


def find_runs(root: Path, max_depth: int = MAX_DEPTH) -> list[RunInfo]:
    """Every run folder under ``root`` (``root`` itself included), oldest first."""
    runs: list[RunInfo] = []
    root = root.resolve()
    for folder, dirs, files in os.walk(root):
        depth = len(Path(folder).relative_to(root).parts)
        dirs[:] = sorted(
            d for d in dirs if d not in SKIP and parse_checkpoint_dir_name(d) is None and not d.startswith(".tmp-")
            and depth < max_depth
        )
        here = Path(folder)
        if (here / c.CONTROL_DIR / c.RECORD_FILE).is_file() or RUN_LOG_FILE in files:
            if (info := run_info(here)) is not None:
                config = config_for(here)
                if config is not None and config.fork is not None:
                    info.parent = Path(config.fork.parent)
                runs.append(info)
    return _forks_under_parents(sorted(runs, key=lambda r: r.started_at))


def _forks_under_parents(runs: list[RunInfo]) -> list[RunInfo]:
    """Oldest first, each fork right after its parent (and its parent's earlier forks)."""
    folders = {r.folder for r in runs}
    out: list[RunInfo] = []

    def place(run: RunInfo) -> None:
        out.append(run)
        for fork in runs:
            if fork.parent == run.folder and fork not in out:
                place(fork)

    for run in runs:
        if run not in out and (run.parent is None or run.parent not in folders):
            place(run)
    return out + [r for r in runs if r not in out]


def run_info(folder: Path) -> RunInfo | None:
    record = c.read_record(folder)
    if record is not None:
        live = c.is_live(record)
        status = record.status if live or record.status not in c.LIVE_STATUSES else "crashed"
        step, total, reward = record.step, record.total_steps, record.last_reward
        if not live and record.status in c.LIVE_STATUSES:  # its supervisor was killed: the run log is newer
            logged = _from_run_log(folder)
            if logged is not None and logged.step > step:
                step, total, reward = logged.step, logged.total_steps or total, logged.last_reward
        return RunInfo(
            folder, status, step, total, record.pid if live else 0, record.started_at, reward, live, record.changes,
        )
    return _from_run_log(folder)


def _from_run_log(folder: Path) -> RunInfo | None:
    """A run with no supervisor (``grpo-tui worker``): what the end of its run.jsonl says."""
    path = folder / RUN_LOG_FILE
    try:
        info = path.stat()
        with open(path, "rb") as f:
            head = f.read(TAIL_BYTES).splitlines()
            f.seek(max(0, info.st_size - TAIL_BYTES))
            tail = f.read().splitlines()
    except OSError:
        return None
    started, first_total = _start_of(head)
    started = started or info.st_mtime
    step, total, reward, status, changes, said = 0, 0, None, "unknown", 0, None
    for line in tail:
        try:
            event = decode_event(line)
        except ProtocolError:
            continue
        if isinstance(event, m.Step):
            step, reward = event.step, m.finite(event.reward)
        elif isinstance(event, m.Init):
            total = event.total_steps
        elif isinstance(event, m.ResumeState):
            changes = len(event.changes)
        elif isinstance(event, m.SettingChanged):
            changes += 1
        elif isinstance(event, m.Error) and event.fatal:
            said = event.exit_code  # a stop that is a mistake, a NaN stop or a task too hard says its kind
        elif isinstance(event, m.Hello):
            said = None
        elif isinstance(event, m.Complete):
            status, step = ("done" if event.status == "completed" else "stopped"), event.total_steps
            if event.status == "stopped" and said is not None:
                status = c.status_of_exit(said, event)
    return RunInfo(folder, status, step, total or first_total, 0, started, reward, False, changes)


def _start_of(head: list[bytes]) -> tuple[float, int]:
    """When the run started (its first log line's time; 0: none) and its first ``init``'s total steps
    (0: none), from the start of run.jsonl: a long run's tail holds neither."""
    started, total = 0.0, 0
    for line in head:
        if not (started and total) and line.startswith((_INIT, _LOG)):
            try:
                event = decode_event(line)
            except ProtocolError:
                continue
            if isinstance(event, m.Log) and not started:
                started = event.time
            elif isinstance(event, m.Init) and not total:
                total = event.total_steps
    return started, total


def newest_live(root: Path) -> RunInfo | None:
    live = [r for r in find_runs(root) if r.live]
    return live[-1] if live else None


def format_runs(runs: list[RunInfo], root: Path) -> list[str]:
    """``grpo-tui ls``'s lines: status, step/total, pid, start time, last reward, live changes, folder."""
    rows = [("STATUS", "STEP", "PID", "STARTED", "REWARD", "CHANGES", "FOLDER")]
    for r in runs:
        try:
            where = str(r.folder.relative_to(root.resolve())) or "."
        except ValueError:
            where = str(r.folder)
        depth, up = 0, r.parent
        while up is not None and depth < 8 and (above := next((p for p in runs if p.folder == up), None)) is not None:
            depth, up = depth + 1, above.parent
        where = "  " * (depth - 1) + "└ " + where if depth else where
        rows.append((
            r.status.replace("_", "-"), f"{r.step}/{r.total_steps or '?'}", str(r.pid) if r.pid else "-",
            time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started_at)) if r.started_at else "-",
            "-" if r.last_reward is None else f"{r.last_reward:.3f}", str(r.changes) if r.changes else "-", where,
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row[:6], widths)) + "  " + row[6] for row in rows]


def config_for(folder: Path) -> Config | None:
    """The run's config: its file with the run's ``--set`` overrides (from the record), else the one
    its ``init`` frame carried."""
    record = c.read_record(folder)
    if record is not None and record.config:
        try:
            return load_config(record.config, check_paths=False, overrides=record.overrides)
        except (ConfigError, OSError):
            pass
    init = _first_init(folder / RUN_LOG_FILE)
    if init is None:
        return None
    config = dict(init.config)
    if isinstance(runtime := config.get("runtime"), dict):  # what the worker found at start, not a key
        config["runtime"] = {k: v for k, v in runtime.items() if k != "active_blas"}
    try:
        return parse_config(dumps(config), base_dir=folder, check_paths=False)
    except (ConfigError, msgspec.MsgspecError, ValueError, TypeError):
        return None


def store_of(folder: Path) -> Path:
    """The run's store: its config's ``store.path`` when set (a store outside the folder, maybe
    shared by several runs), else ``<folder>/outputs.db``."""
    config = config_for(folder)
    if config is not None and config.store.path:
        return Path(config.store.path)
    return folder / STORE_FILE


_INIT = line_prefix(m.Init)
_LOG = line_prefix(m.Log)


def _first_init(path: Path) -> m.Init | None:
    """The newest ``init`` frame in run.jsonl."""
    found: m.Init | None = None
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.startswith(_INIT):
                    try:
                        event = decode_event(line)
                    except ProtocolError:
                        continue
                    if isinstance(event, m.Init):
                        found = event
    except OSError:
        return None
    return found
