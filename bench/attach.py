"""Attaching to a long run: time to the first full paint, and what three viewers cost training.

    python bench/attach.py                      # both parts
    python bench/attach.py --part paint --repeat 5
    python bench/attach.py --part viewers --rounds 3
    python bench/attach.py --part cpu --against main~3   # one viewer's CPU, this checkout beside main~3

``paint``: a run of 10,000 steps and 500,000 generations (built synthetically once into .bench/: the
store with tests/tui/db/make_store.py, run.jsonl as the worker writes it: hello, init, the store's path,
every step frame, two samples per step, an eval every 100 steps, a log line every 10 steps, a
checkpoint every 500). A stand-in worker replays those frames through a real supervisor (so the
socket's welcome counts them) and then idles. ``grpo-tui attach`` is started in a pseudo-terminal
(160x48) and timed from its launch until the terminal shows step 10000 in the header: the whole
history (charts, tiles, eval points, the newest samples, the log) folded and drawn. Target < 1.5 s.

``viewers``: the quickstart (examples/quickstart.toml, a fresh output folder each time) started with
``grpo-tui run --detach``, timed from the launch to the run's end (its supervisor's record says
done), with no viewer and with three ``grpo-tui attach`` viewers in pseudo-terminals whose output
is read as a terminal would, alternating. Target: median ratio <= 1.05.

``cpu`` (not part of "both"): what one viewer costs while frames stream, without training's noise:
the stand-in worker sends the bench's frames at the quickstart's rate (11 steps a second), and a
viewer's CPU seconds per second are read from /proc over 20 s. ``--against REV`` attaches a viewer
of that git revision to the same run at the same time: both measured under the same load.

Prints figures; not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pty
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.tui_overhead import cpu_seconds, fresh_config, load  # noqa: E402
from grpo_tui.protocol import codec  # noqa: E402
from grpo_tui.protocol import control as c  # noqa: E402
from grpo_tui.protocol import messages as m  # noqa: E402
from grpo_tui.protocol.layout import RUN_LOG_FILE, STORE_FILE  # noqa: E402

CLI = [sys.executable, "-m", "grpo_tui.tui.cli"]
TARGET_S = 1.5  # attach to its first full paint
STEPS, PROMPTS, GROUP = 10_000, 5, 10  # 500,000 generations
ANSI = re.compile(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][A-Z0-9]|\x1b[=>]|\x1b\][^\x07]*\x07")
CONFIG = {
    "name": "attach-bench", "model": {"path": "models/tiny"}, "data": {"path": "data.jsonl"},
    "rewards": [{"name": "accuracy"}], "grpo": {"group_size": GROUP}, "training": {"batch_size": PROMPTS},
    "eval": {"every": 100},
}


# ---------------------------------------------------------------- the synthetic run


def frames(store: Path, steps: int = STEPS) -> list[bytes]:
    """What the worker would have sent for the whole run, in order."""
    import random

    rng = random.Random(0)
    out = [
        m.Hello(protocol_version=m.PROTOCOL_VERSION, worker_version="bench", pid=os.getpid()),
        m.Init(model="tiny", model_path="models/tiny", config=CONFIG, dataset_size=50_000, steps_per_epoch=steps,
               total_steps=steps, output_dir=str(store.parent)),
        m.DatabasePath(path=str(store), run_id=1, run_name="bench"),
        m.EpochStart(epoch=0, total_epochs=1, steps_in_epoch=steps),
    ]  # type: list[m.Event]
    for step in range(1, steps + 1):
        rewards = [round(rng.random(), 3) for _ in range(PROMPTS * GROUP)]
        mean = sum(rewards) / len(rewards)
        out.append(m.Status(phase="generating"))
        out.append(m.Step(
            step=step, epoch=0, loss=rng.gauss(0, 0.1), reward=mean, reward_std=0.2, frac_reward_zero_std=0.1,
            kl=0.01, completion_mean_length=24.0, generation_ms=400.0, scoring_ms=5.0, training_ms=300.0,
            learning_rate=5e-5, grad_norm=0.5, num_tokens=1200, training_tokens_per_s=3000.0,
            rewards={"accuracy": mean}, completion_rewards=rewards,
        ))
        for index, reward in ((0, max(rewards)), (1, min(rewards))):
            out.append(m.Sample(step=step, index=index, group=0, prompt="What is 3 + 4?",
                                completion=f"<answer>{step % 10}</answer> since three and four make seven",
                                reward=reward, reward_details={"accuracy": reward}, advantage=reward - mean,
                                num_tokens=12))
        if step % 10 == 0:
            out.append(m.Log(level="info", message=f"step {step} done", time=time.time()))
        if step % 100 == 0:
            out.append(m.Eval(step=step, num_prompts=50, num_samples=1, greedy=True, accuracy=mean, reward=mean,
                              rewards={"accuracy": mean}, seconds=2.0))
        if step % 500 == 0:
            out.append(m.Checkpoint(step=step, kind="periodic", path=str(store.parent / f"checkpoint-{step}")))
    return [codec.encode(e) for e in out]


def build_run(folder: Path) -> Path:
    """The store (once, cached) and the frames file."""
    from tests.tui.db.make_store import RunSpec, build_store

    store = folder / STORE_FILE
    if not store.exists():
        folder.mkdir(parents=True, exist_ok=True)
        print(f"building {store}: {STEPS} steps x {PROMPTS * GROUP} generations (once)...", flush=True)
        t = time.perf_counter()
        tmp = folder / "building.db"
        tmp.unlink(missing_ok=True)
        build_store(tmp, [RunSpec("bench", steps=STEPS, prompts=PROMPTS, group=GROUP, status="running")])
        tmp.rename(store)
        print(f"built in {time.perf_counter() - t:.0f} s", flush=True)
    lines = folder / "frames.jsonl"
    if not lines.exists():
        lines.write_bytes(b"".join(frames(store)))
    return store


def replay(frames_file: str, out: str, rate: float = 0.0) -> int:
    """The stand-in worker: every frame to stdout and run.jsonl (as the worker's Emitter does), then idle.
    With ``rate``, the run's first frames at once, then one step's frames every ``1 / rate`` seconds."""
    stdout = sys.stdout.buffer
    with open(Path(out) / RUN_LOG_FILE, "ab") as log, open(frames_file, "rb") as source:
        start, steps = time.monotonic(), 0
        for line in source:
            if rate and line.startswith(codec.line_prefix(m.Status)):  # a step's first frame
                stdout.flush()
                log.flush()
                steps += 1
                time.sleep(max(0.0, start + steps / rate - time.monotonic()))
            stdout.write(line)
            log.write(line)
    stdout.flush()
    sys.stdin.buffer.read()  # until the supervisor closes it
    return 0


# ---------------------------------------------------------------- pseudo-terminals


class Terminal:
    """A process in a pseudo-terminal, its output read as a terminal would (escapes stripped for search)."""

    def __init__(self, argv: list[str], cols: int = 160, rows: int = 48, env: dict[str, str] | None = None) -> None:
        import fcntl
        import struct
        import termios

        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {**(env or os.environ), "TERM": "xterm-256color", "COLUMNS": str(cols), "LINES": str(rows)}
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
        os.close(slave)
        self.master, self.text = master, b""

    def read(self, timeout: float, keep: bool = True) -> None:
        """What the process drew; ``keep=False`` drains it unread (the viewers part: a terminal on
        the user's side, not this machine's work)."""
        ready, _, _ = select.select([self.master], [], [], timeout)
        if ready:
            try:
                data = os.read(self.master, 1 << 16)
            except OSError:
                return
            if keep:
                self.text += ANSI.sub(b"", data)

    def wait_for(self, marker: bytes, timeout: float = 60.0) -> float:
        """Seconds from launch until ``marker`` is on screen."""
        while marker not in self.text[-200_000:]:
            if time.perf_counter() - self.started > timeout:
                raise SystemExit(f"never saw {marker!r}; the screen ends with {self.text[-400:]!r}")
            self.read(0.01)
        return time.perf_counter() - self.started

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        os.close(self.master)


# ---------------------------------------------------------------- the two parts


def part_paint(repeat: int) -> None:
    folder = ROOT / ".bench" / f"attach-{STEPS}"
    store = build_run(folder)
    with tempfile.TemporaryDirectory(prefix="attach-bench-") as tmp:
        out = Path(tmp) / "run"
        out.mkdir()
        os.symlink(store, out / STORE_FILE)
        (out / "config.toml").write_text("")
        from grpo_tui.tui.launcher import launch, wait_ready

        worker = [sys.executable, str(Path(__file__).resolve()), "--replay", str(folder / "frames.jsonl"), str(out)]
        sup = launch(out, worker)
        try:
            assert asyncio.run(wait_ready(out, sup)), "the supervisor did not start"
            total = sum(1 for _ in open(folder / "frames.jsonl", "rb"))
            while (r := c.read_record(out)) is None or r.step < STEPS:
                time.sleep(0.1)
            size = (out / RUN_LOG_FILE).stat().st_size
            print(f"paint: a live run of {STEPS:,} steps, {STEPS * PROMPTS * GROUP:,} generations in the store, "
                  f"{total:,} frames ({size / 2**20:.1f} MiB) in run.jsonl; load {load()}")
            times: list[float] = []
            cpus: list[float] = []
            for i in range(repeat):
                term = Terminal([*CLI, "attach", str(out)])
                try:
                    full = term.wait_for(f"step {STEPS}/{STEPS}".encode())
                    cpu = cpu_seconds(term.proc.pid)
                finally:
                    term.close()
                times.append(full)
                cpus.append(cpu)
                print(f"  attach {i + 1}: full paint (step {STEPS}, its charts, tiles, samples, log) {full:.2f} s wall, "
                      f"{cpu:.2f} s CPU of the attach process  (load {load()})")
            wall, cpu = statistics.median(times), statistics.median(cpus)
            print(f"  median full paint {wall:.2f} s wall, {cpu:.2f} s CPU of the attach process (target < {TARGET_S} s)")
            print(f"paint vs the {TARGET_S} s target: wall {wall / TARGET_S:.2f}x, CPU {cpu / TARGET_S:.2f}x "
                  f"({'met' if wall < TARGET_S else 'not met'} on wall, {'met' if cpu < TARGET_S else 'not met'} on CPU; "
                  f"load {load()})")
        finally:
            os.killpg(sup.pid, signal.SIGTERM)
            sup.wait(30)


def timed_run(config: Path, viewers: int) -> tuple[float, float, float]:
    """Wall seconds from launch to done, the viewers' CPU seconds (all of them), the supervisor's."""
    out = config.parent / "out"
    start = time.perf_counter()
    subprocess.run([*CLI, "run", str(config), "--detach"], check=True, stdout=subprocess.DEVNULL)
    terms = [Terminal([*CLI, "attach", str(out)]) for _ in range(viewers)]
    try:
        while True:
            for term in terms:
                for _ in range(16):  # what it drew since the last look (bounded: a dead viewer's pty stays readable)
                    if not select.select([term.master], [], [], 0)[0]:
                        break
                    term.read(0, keep=False)
            record = c.read_record(out)
            if record is not None and record.status not in c.LIVE_STATUSES:
                wall = time.perf_counter() - start
                viewer_cpu = sum(cpu_seconds(t.proc.pid) for t in terms if t.proc.poll() is None)
                supervisor_cpu = cpu_seconds(record.pid) if c.pid_alive(record.pid) else float("nan")  # it lingers 1 s
                return wall, viewer_cpu, supervisor_cpu
            time.sleep(0.05)
    finally:
        for term in terms:
            term.close()


def part_viewers(rounds: int, config: Path) -> None:
    walls: dict[int, list[float]] = {0: [], 3: []}
    per_viewer: list[float] = []
    print(f"viewers: {config.name} from launch to done, no viewer vs three attached; load {load()}")
    for i in range(rounds):
        for viewers in ((0, 3) if i % 2 == 0 else (3, 0)):
            folder = Path(tempfile.mkdtemp(prefix="attach-viewers-"))
            try:
                wall, cpu, sup = timed_run(fresh_config(config, folder), viewers)
                walls[viewers].append(wall)
                line = f"  round {i + 1}, {viewers} viewers: {wall:6.2f} s, supervisor {sup:.2f} s CPU"
                if viewers:
                    per_viewer.append(cpu / viewers / wall)
                    line += f", viewers {cpu:.2f} s CPU ({per_viewer[-1]:.3f} CPU-s per viewer per training-second)"
                print(f"{line}  (load {load()})")
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    none, three = statistics.median(walls[0]), statistics.median(walls[3])
    print(f"  median wall  none {none:.2f} s · three viewers {three:.2f} s · ratio {three / none:.3f} (target <= 1.05) · "
          f"{statistics.median(per_viewer):.3f} CPU-s per viewer per training-second; load {load()}")


def checkout(rev: str, folder: Path) -> dict[str, str]:
    """``rev`` of this repository laid out as the installed package (pyproject's package-dir) in
    ``folder``: the environment that runs a viewer of that version."""
    src, pkg = folder / "src", folder / "pkg" / "grpo_tui"
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    shutil.copytree(src / "api", pkg)
    for name in ("protocol", "worker", "tui"):
        (pkg / name).symlink_to(src / name)
    return {**os.environ, "PYTHONPATH": str(pkg.parent)}


def part_cpu(seconds: float, rate: float, against: str | None) -> None:
    """One viewer's CPU while a run streams frames at ``rate`` steps a second (the bench's frames:
    ~4 a step), measured over ``seconds`` after a warm-up; with ``against``, a viewer of that git
    revision attached to the same run at the same time (an A/B under the same load)."""
    warmup = 5.0
    with tempfile.TemporaryDirectory(prefix="attach-cpu-") as tmp:
        out = Path(tmp) / "run"
        out.mkdir()
        (out / "config.toml").write_text("")
        source = Path(tmp) / "frames.jsonl"
        source.write_bytes(b"".join(frames(Path(tmp) / "no-store.db", int(rate * (warmup + seconds + 30)))))
        envs = {"this checkout": dict(os.environ)}
        if against:
            envs[against] = checkout(against, Path(tmp) / "against")
        from grpo_tui.tui.launcher import launch, wait_ready

        sup = launch(out, [sys.executable, str(Path(__file__).resolve()), "--replay", str(source), str(out), str(rate)])
        terms: dict[str, Terminal] = {}
        try:
            assert asyncio.run(wait_ready(out, sup)), "the supervisor did not start"
            while c.read_record(out) is None or not (out / RUN_LOG_FILE).exists():  # what attach looks for
                time.sleep(0.05)
            terms = {name: Terminal([*CLI, "attach", str(out)], env=env) for name, env in envs.items()}

            def drain(until: float) -> None:
                while time.perf_counter() < until:
                    for term in terms.values():
                        term.read(0.02, keep=False)

            drain(time.perf_counter() + warmup)
            before = {name: cpu_seconds(term.proc.pid) for name, term in terms.items()}
            start = time.perf_counter()
            drain(start + seconds)
            wall = time.perf_counter() - start
            print(f"cpu: viewers of a run streaming {rate:g} steps/s (~{4 * rate + rate / 10:.0f} frames/s), "
                  f"160x48, CPU over {wall:.1f} s after a {warmup:.0f} s warm-up; load {load()}")
            for name, term in terms.items():
                used = cpu_seconds(term.proc.pid) - before[name]
                print(f"  {name}: {used / wall:.4f} CPU-s per second ({used:.2f} s, {1000 * used / (wall * rate):.1f} ms per step)")
        finally:
            for term in terms.values():
                term.close()
            os.killpg(sup.pid, signal.SIGTERM)
            sup.wait(30)


def main() -> None:
    if len(sys.argv) in (4, 5) and sys.argv[1] == "--replay":
        sys.exit(replay(sys.argv[2], sys.argv[3], float(sys.argv[4]) if len(sys.argv) == 5 else 0.0))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=("paint", "viewers", "both", "cpu"), default="both",
                   help="cpu (not in both): one viewer's CPU while frames stream")
    p.add_argument("--repeat", type=int, default=3, help="attaches timed (paint)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of none / three viewers (viewers)")
    p.add_argument("--config", type=Path, default=ROOT / "examples" / "quickstart.toml")
    p.add_argument("--seconds", type=float, default=20.0, help="CPU measured over (cpu)")
    p.add_argument("--rate", type=float, default=11.0, help="steps a second streamed (cpu): the quickstart's")
    p.add_argument("--against", metavar="REV", help="a viewer of this git revision beside this checkout's (cpu)")
    args = p.parse_args()
    if args.part == "cpu":
        part_cpu(args.seconds, args.rate, args.against)
    if args.part in ("paint", "both"):
        part_paint(args.repeat)
    if args.part in ("viewers", "both"):
        part_viewers(args.rounds, args.config)


if __name__ == "__main__":
    main()
