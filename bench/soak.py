"""A soak of everything that takes input from outside a run (docs/security.md): a detached run of the
bundled tiny model while this script, for ``--minutes``, sends random ``grpo-tui set``s (valid,
refused, oversized), requests to the policy's endpoint (valid, invalid, slow, oversized, without the
secret) and connects and drops viewers on the control socket. At the end the run is told to finish;
it must end ``done`` with every step in ``run.jsonl`` and the store, and the worker's and the
supervisor's memory (RSS) and open descriptors must stay flat (bench/README.md has the figures).

    nice -n 19 python bench/soak.py --minutes 30        # the soak (memory and descriptors are not load-sensitive)
    python bench/soak.py --minutes 1                    # to see that it works

It prints one line per sample (every ``--every`` s) and a JSON summary last; exit 1 when the run did
not finish, lost a step, or grew (RSS by more than ``--rss-growth-mb``, descriptors by more than 16)
between the first and the last quarter of the soak.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CLI = [sys.executable, "-m", "grpo_tui.tui.cli"]

from grpo_tui.protocol import control as c  # noqa: E402

# The run's rollout function: it hands the endpoint's address and secret to this script (a 0600
# file in the run folder) and keeps each rollout open a moment, so the script's requests land in one.
ROLLOUT = '''
import json, os, time

def rollout(prompts, trainer):
    path = os.path.join(trainer.args.output_dir, "endpoint.json")
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, json.dumps({"base_url": trainer.base_url, "api_key": trainer.api_key}).encode())
    os.close(fd)
    os.replace(path + ".tmp", path)
    time.sleep(0.4)
    outs = trainer.generate_rollout_completions(prompts)
    return {"prompt_ids": [o["prompt_ids"] for o in outs], "completion_ids": [o["completion_ids"] for o in outs],
            "logprobs": [o["logprobs"] for o in outs]}
'''

VALID_SETS = ["training.learning_rate=1e-2", "training.learning_rate=5e-3", "generation.temperature=0.9",
              "generation.temperature=1.0", "grpo.beta=0.0", "rewards[0].weight=1.0"]
REFUSED_SETS = ["bogus.key=1", "training.batch_size=4", "generation.temperature=1e-45", "training.learning_rate=" + "9" * 5000,
                "training.learning_rate=" + "[" * 2000, "generation.temperature=0.5\n0.7"]


class Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by: dict[str, int] = {}

    def add(self, name: str) -> None:
        with self.lock:
            self.by[name] = self.by.get(name, 0) + 1


def proc_figures(pid: int) -> tuple[float, int]:
    """(RSS in MB, open descriptors) of ``pid``."""
    try:
        rss = next(int(line.split()[1]) for line in open(f"/proc/{pid}/status") if line.startswith("VmRSS:")) / 1024
        return rss, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return 0.0, 0


def setter(out: Path, stop: threading.Event, counts: Counts) -> None:
    while not stop.is_set():
        items = random.choice([[random.choice(VALID_SETS)], [random.choice(REFUSED_SETS)],
                               [random.choice(VALID_SETS), random.choice(REFUSED_SETS)]])
        done = subprocess.run([*CLI, "set", str(out), *items], capture_output=True, text=True, timeout=600)
        counts.add(f"set exit {done.returncode}")
        stop.wait(random.uniform(2, 6))


def endpoint(out: Path) -> tuple[str, str] | None:
    try:
        found = json.loads((out / "endpoint.json").read_text())
        return found["base_url"].removesuffix("/v1"), found["api_key"]
    except (OSError, ValueError, KeyError):
        return None


def requester(out: Path, stop: threading.Event, counts: Counts) -> None:
    held: list[socket.socket] = []
    while not stop.is_set():
        where = endpoint(out)
        if where is None:
            stop.wait(0.5)
            continue
        root, key = where
        port = int(root.rsplit(":", 1)[1])
        kind = random.choice(["valid", "valid", "bad temperature", "huge max_tokens", "no secret", "slow", "oversized"])
        try:
            if kind == "slow":  # a head that never ends, held a while
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
                held.append(sock)
                if len(held) > 40:
                    held.pop(0).close()
                counts.add("slow held")
            elif kind == "oversized":
                with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                    sock.sendall(f"POST /v1/completions HTTP/1.1\r\nAuthorization: Bearer {key}\r\n"
                                 "Content-Length: 99999999999\r\n\r\n".encode())
                    counts.add(f"oversized {sock.recv(64).split(b' ')[1].decode()}")
            else:
                params: dict[str, Any] = {"max_tokens": 4}
                if kind == "bad temperature":
                    params["temperature"] = "hot"
                if kind == "huge max_tokens":
                    params["max_tokens"] = 10**9
                body = json.dumps({"token_ids": [1, 2, 3], "sampling_params": params}).encode()
                headers = {"Content-Type": "application/json"}
                if kind != "no secret":
                    headers["Authorization"] = f"Bearer {key}"
                request = urllib.request.Request(f"{root}/inference/v1/generate", data=body, headers=headers)
                try:
                    with urllib.request.urlopen(request, timeout=60) as answer:
                        counts.add(f"{kind} {answer.status}")
                except urllib.error.HTTPError as exc:
                    counts.add(f"{kind} {exc.code}")
        except OSError as exc:
            counts.add(f"{kind} {type(exc).__name__}")
        stop.wait(random.uniform(0.05, 0.5))
    for sock in held:
        sock.close()


def viewers(out: Path, stop: threading.Event, counts: Counts) -> None:
    while not stop.is_set():
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            with c.socket_address(c.socket_path(out)) as address:
                sock.connect(address)
            sock.settimeout(2)
            sock.recv(65536)  # its welcome and some frames, then gone
            stop.wait(random.uniform(0.1, 3))
            sock.close()
            counts.add("viewer")
        except OSError:
            counts.add("viewer refused")
        stop.wait(random.uniform(0.2, 2))


def steps_in(out: Path) -> tuple[list[int], list[int]]:
    """(the steps in run.jsonl, the steps in the store)."""
    logged = [json.loads(line)["step"] for line in (out / "run.jsonl").read_text().splitlines()
              if line.strip() and json.loads(line).get("type") == "step"]
    with sqlite3.connect(f"file:{out / 'outputs.db'}?mode=ro", uri=True) as conn:
        stored = [r[0] for r in conn.execute("SELECT step FROM steps ORDER BY step")]
    return logged, stored


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--rss-growth-mb", type=float, default=50.0)
    args = parser.parse_args()
    from tests.helpers.worker_harness import write_config

    work = Path(tempfile.mkdtemp(prefix="soak-"))
    (work / "rollout.py").write_text(ROLLOUT)
    config = write_config(work, ROOT / "examples" / "models" / "tiny-arith",
                          training={"max_steps": 1_000_000, "num_epochs": 1_000_000, "silent_patience": 0},
                          checkpoint={"save_every": 50, "keep_last": 2},
                          environment={"rollout_func": f"{work / 'rollout.py'}:rollout"})
    out = work / "out"
    started = subprocess.run([*CLI, "run", str(config), "--detach"], capture_output=True, text=True, cwd=work)
    if started.returncode != 0:
        print(started.stderr, file=sys.stderr)
        return 1
    record = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (record is None or not record.worker_pid or record.step < 1):
        record = c.read_record(out)
        time.sleep(0.5)
    assert record is not None and record.worker_pid, "the run never started"
    stop, counts = threading.Event(), Counts()
    threads = [threading.Thread(target=f, args=(out, stop, counts), daemon=True) for f in (setter, requester, viewers)]
    for t in threads:
        t.start()
    samples: list[dict[str, Any]] = []
    end = time.monotonic() + args.minutes * 60
    while time.monotonic() < end:
        record = c.read_record(out)
        if record is None or not c.is_live(record):
            break
        worker, supervisor = proc_figures(record.worker_pid), proc_figures(record.pid)
        sample = {"t": round(args.minutes * 60 - (end - time.monotonic())), "step": record.step,
                  "worker_rss_mb": round(worker[0], 1), "worker_fds": worker[1],
                  "supervisor_rss_mb": round(supervisor[0], 1), "supervisor_fds": supervisor[1],
                  "restarts": record.restarts}
        samples.append(sample)
        print(json.dumps(sample), flush=True)
        time.sleep(args.every)
    stop.set()
    for t in threads:
        t.join(timeout=120)
    for _ in range(10):  # the run ends a little later; a step count it has passed already is refused: again
        record = c.read_record(out)
        finish_at = max(record.step if record else 0, max(steps_in(out)[0], default=0)) + 100
        told = subprocess.run([*CLI, "set", str(out), f"training.max_steps={finish_at}"], capture_output=True,
                              text=True, timeout=600)
        if told.returncode == 0:
            break
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and c.is_live(c.read_record(out)):
        time.sleep(1)
    record = c.read_record(out)
    logged, stored = steps_in(out)
    quarter = max(1, len(samples) // 4)
    first, last = samples[:quarter], samples[-quarter:]

    def med(rows: list[dict[str, Any]], key: str) -> float:
        return statistics.median(r[key] for r in rows) if rows else 0.0

    summary = {
        "minutes": args.minutes, "status": record.status if record else None, "restarts": record.restarts if record else None,
        "steps": len(logged), "last_step": max(logged, default=0),
        "lost": sorted(set(range(1, max(logged, default=0) + 1)) - set(logged)) + sorted(set(logged) - set(stored)),
        "worker_rss_mb": [med(first, "worker_rss_mb"), med(last, "worker_rss_mb")],
        "worker_fds": [med(first, "worker_fds"), med(last, "worker_fds")],
        "supervisor_rss_mb": [med(first, "supervisor_rss_mb"), med(last, "supervisor_rss_mb")],
        "supervisor_fds": [med(first, "supervisor_fds"), med(last, "supervisor_fds")],
        "sent": dict(sorted(counts.by.items())), "folder": str(work),
    }
    print(json.dumps(summary, indent=2))
    # descriptors move with the slow connections held at the moment (each lives at most the endpoint's
    # head timeout): a leak is growth past that
    grew = (summary["worker_rss_mb"][1] - summary["worker_rss_mb"][0] > args.rss_growth_mb
            or summary["worker_fds"][1] - summary["worker_fds"][0] > 16
            or summary["supervisor_rss_mb"][1] - summary["supervisor_rss_mb"][0] > args.rss_growth_mb
            or summary["supervisor_fds"][1] - summary["supervisor_fds"][0] > 16)
    ok = summary["status"] == "done" and not summary["lost"] and len(logged) >= finish_at and not grew
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
