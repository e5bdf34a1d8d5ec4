"""What watching costs: the quickstart trained plain vs under the dashboard, alternating.

    python bench/tui_overhead.py [--rounds 3] [--size 200x50] [--config examples/quickstart.toml]

Each round trains the config twice from scratch (a copy in a temp folder with a fresh output dir,
so nothing resumes): once with ``grpo-tui worker CONFIG --plain`` and once under the dashboard,
``grpo-tui run CONFIG`` in a pseudo-terminal of ``--size`` whose output is read (and thrown away)
as a terminal would. Wall time runs from the launch to the worker's exit; when the worker has
finished, the bench presses q (and y, should the app still ask) and the dashboard exits. The
dashboard process's own CPU time (not its worker's) over the same wall time is its CPU share.
Targets: dashboard wall time within 1.10x of plain; the dashboard process below 25 % of one core.
This is a benchmark that prints figures, not a test.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import select
import signal
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GRPO_TUI = Path(sys.executable).with_name("grpo-tui")
TICKS = os.sysconf("SC_CLK_TCK")


def fresh_config(source: Path, folder: Path, max_steps: int | None = None) -> Path:
    """``source`` copied into ``folder`` with its paths made absolute and a new, empty output dir."""
    text = source.read_text()

    def absolute(match: re.Match[str]) -> str:
        key, value = match.group(1), match.group(2)
        target = folder / "out" if key == "output_dir" else (source.parent / value).resolve()
        return f'{key} = "{target}"'

    text = re.sub(r'^(path|eval_path|output_dir)\s*=\s*"([^"]*)"', absolute, text, flags=re.M)
    text = re.sub(r'^resume\s*=.*$', 'resume = false', text, flags=re.M)
    if max_steps is not None:
        text = re.sub(r'^max_steps\s*=.*$', f'max_steps = {max_steps}', text, flags=re.M)
    path = folder / "config.toml"
    path.write_text(text)
    return path


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process (not its children), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def run_plain(config: Path) -> float:
    start = time.perf_counter()
    subprocess.run([str(GRPO_TUI), "worker", str(config), "--plain"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def run_dashboard(config: Path, cols: int, rows: int) -> tuple[float, float]:
    """(wall seconds to the worker's exit, the dashboard's CPU seconds over that time)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(cols), "LINES": str(rows)}
    start = time.perf_counter()
    proc = subprocess.Popen([str(GRPO_TUI), "run", str(config)], stdin=slave, stdout=slave, stderr=slave,
                            env=env, start_new_session=True, close_fds=True)
    os.close(slave)
    worker: int | None = None
    wall = cpu = 0.0
    pressed: list[tuple[float, bytes]] = []

    def drain(timeout: float) -> None:
        ready, _, _ = select.select([master], [], [], timeout)
        if ready:
            try:
                os.read(master, 1 << 16)
            except OSError:  # the app closed the terminal
                pass

    try:
        while proc.poll() is None:
            drain(0.05)
            if worker is None:  # the dashboard starts the run's supervisor, which starts the worker
                supervisor = next(iter(children(proc.pid)), None)
                worker = next(iter(children(supervisor)), None) if supervisor else None
            elif not wall and not alive(worker):
                wall, cpu = time.perf_counter() - start, cpu_seconds(proc.pid)
                pressed.append((time.perf_counter() + 1.0, b"q"))  # after the next flush shows the run done
            for due, key in list(pressed):
                if time.perf_counter() >= due:
                    try:
                        os.write(master, key)
                    except OSError:  # the app has just closed its terminal
                        pass
                    pressed.remove((due, key))
                    if key == b"q":  # a run the app does not yet see as done asks first
                        pressed.append((time.perf_counter() + 2.0, b"y"))
            if wall and time.perf_counter() - start > wall + 60:
                proc.kill()
                raise SystemExit("the dashboard did not exit after the run ended")
    finally:  # an error or ^C: never leave the dashboard or its worker behind
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    os.close(master)
    if not wall:
        raise SystemExit(f"the dashboard exited (code {proc.returncode}) before its worker finished")
    return wall, cpu


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", type=Path, default=ROOT / "examples" / "quickstart.toml")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--size", default="200x50", help="the dashboard's terminal, COLSxROWS")
    p.add_argument("--max-steps", type=int, default=None, help="override the config's max_steps (a quick check)")
    args = p.parse_args()
    cols, rows = (int(x) for x in args.size.split("x"))
    plain: list[float] = []
    dash: list[tuple[float, float]] = []
    print(f"tui_overhead: {args.config.name}, {args.rounds} rounds, dashboard at {cols}x{rows}; load {load()}")
    for i in range(args.rounds):
        for mode in (("plain", "dashboard") if i % 2 == 0 else ("dashboard", "plain")):
            folder = Path(tempfile.mkdtemp(prefix="tui-overhead-"))
            try:
                config = fresh_config(args.config, folder, args.max_steps)
                if mode == "plain":
                    plain.append(run_plain(config))
                    print(f"  round {i + 1} plain      {plain[-1]:6.2f} s  (load {load()})")
                else:
                    dash.append(run_dashboard(config, cols, rows))
                    wall, cpu = dash[-1]
                    print(f"  round {i + 1} dashboard  {wall:6.2f} s  dashboard CPU {cpu:.2f} s = "
                          f"{cpu / wall * 100:.0f}% of a core  (load {load()})")
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    p_med = statistics.median(plain)
    d_med = statistics.median(w for w, _ in dash)
    share = sum(c for _, c in dash) / sum(w for w, _ in dash)
    print(f"  median wall       plain {p_med:.2f} s · dashboard {d_med:.2f} s · ratio {d_med / p_med:.3f} "
          f"(target <= 1.10)")
    print(f"  dashboard CPU     {share * 100:.1f}% of one core over its runs (target < 25%)")


if __name__ == "__main__":
    main()
