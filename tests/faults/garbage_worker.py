"""A worker that speaks garbage: ``python garbage_worker.py SCENARIO [PIDFILE]``.

Scenarios (each sends ``hello`` first unless it says otherwise):

- ``garbage``: every kind of bad line (malformed JSON, unknown type, wrong field types, binary
  bytes, a 10 MiB line, a line over the reader's limit, odd but valid values), each followed by a
  valid frame so the test can see the stream goes on; then it waits for EOF on stdin.
- ``partial``: a few good frames, then half a frame with no newline, then it exits 0.
- ``no_hello``: a line on stderr, then exit 3 before any frame.
- ``not_hello``: a ``step`` frame first (not a hello), then waits.
- ``hostile DB``: a run whose model name, log lines, stderr and samples are hostile text
  (``hostile.py``), announcing the store DB; then waits.

With PIDFILE (the last argument, ending in .pid) it first starts a grandchild (``sleep``) and writes its pid there, so a test can
check that nothing the worker started outlives the dashboard.
"""

from __future__ import annotations

import os
import subprocess
import sys

from grpo_tui.protocol import codec
from grpo_tui.protocol import messages as m

OUT = sys.stdout.buffer
TEN_MIB = 10 * 1024 * 1024

# (kind, raw bytes of one line including the newline). What a user could meet from a broken or
# foreign worker; the dashboard must log each one and carry on.
GARBAGE: list[tuple[str, bytes]] = [
    ("malformed JSON", b'{"type": "step", "step": 1,\n'),
    ("malformed JSON", b"this is not json at all\n"),
    ("malformed JSON", b"{}}{{\n"),
    ("unknown type", b'{"type": "explode", "step": 1}\n'),
    ("unknown type", b'{"no_type": true}\n'),
    ("unknown type", b"[1, 2, 3]\n"),
    ("wrong field types", b'{"type": "step", "step": "three", "epoch": 0}\n'),
    ("wrong field types", b'{"type": "sample", "step": 1, "index": 0, "group": 0, "prompt": 5, "completion": null}\n'),
    ("wrong field types", b'{"type": "log", "level": "shout", "message": "x", "time": 0}\n'),
    ("binary bytes", bytes(range(256)).replace(b"\n", b"") + b"\n"),
    ("binary bytes", b"\xff\xfe\x00\x00\x1b[2J\x1b]0;pwned\x07\n"),
    ("10 MiB line", b'{"type": "log", "level": "info", "message": "' + b"x" * TEN_MIB + b"\n"),
    ("over the line limit", b"y" * (codec.MAX_LINE_BYTES + 1024) + b"\n"),
]


def send(event: m.Event) -> None:
    OUT.write(codec.encode(event))
    OUT.flush()


def hello() -> None:
    send(m.Hello(protocol_version=m.PROTOCOL_VERSION, worker_version="garbage", pid=os.getpid()))


def step(n: int) -> m.Step:
    return m.Step(step=n, epoch=0, loss=0.1 * n, reward=0.5, reward_std=0.1, frac_reward_zero_std=0.0)


def odd_but_valid() -> list[m.Event]:
    """Frames that decode but carry values a careless dashboard would divide by or index with."""
    return [
        m.Init(model="odd", model_path="/nowhere", total_steps=0, steps_per_epoch=0, num_epochs=0, dataset_size=0),
        m.EpochStart(epoch=-1, total_epochs=0, steps_in_epoch=0),
        m.Step(step=-5, epoch=-1),
        m.Step(step=10**23, epoch=10**23, num_tokens=-1),  # JSON has no int limit; msgspec takes it
        m.Sample(step=10**12, index=-1, group=-7, prompt="", completion="", num_tokens=-3),
        m.ResumeState(step=0, epoch=0, total_epochs=0, step_in_epoch=0, steps_per_epoch=0),
        m.EpochEnd(epoch=10**9, seconds=-1.0),
        m.Checkpoint(path="", step=-1, kind="manual"),
    ]


def hostile_run(db: str) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from hostile import HOSTILE, samples

    send(m.Init(model=HOSTILE, model_path="/h", total_steps=4, steps_per_epoch=4, output_dir="/nonexistent"))
    send(m.DatabasePath(path=db, run_id=1, run_name=HOSTILE))
    send(m.EpochStart(epoch=0, total_epochs=1, steps_in_epoch=4))
    send(step(1))
    for sample in samples():
        send(sample)
    send(m.Log(level="warning", message=f"log {HOSTILE}", time=0.0))
    print(f"stderr {HOSTILE}", file=sys.stderr, flush=True)
    send(m.Error(message=f"error {HOSTILE}", fatal=False, traceback=f"Traceback {HOSTILE}"))


def wait_for_eof() -> None:
    while sys.stdin.buffer.read(65536):
        pass


def main() -> int:
    scenario = sys.argv[1]
    if sys.argv[-1].endswith(".pid"):
        child = subprocess.Popen(["sleep", "300"])
        with open(sys.argv[-1], "w") as f:
            f.write(str(child.pid))
    print(f"garbage worker: scenario {scenario}", file=sys.stderr, flush=True)
    if scenario == "no_hello":
        print("garbage worker: giving up before hello", file=sys.stderr, flush=True)
        return 3
    if scenario == "not_hello":
        send(step(1))
        wait_for_eof()
        return 0
    hello()
    if scenario == "hostile":
        hostile_run(sys.argv[2])
        wait_for_eof()
        return 0
    if scenario == "partial":
        send(m.Init(model="partial", model_path="/p", total_steps=4, steps_per_epoch=4))
        send(step(1))
        OUT.write(b'{"type": "step", "step": 2, "epo')
        OUT.flush()
        return 0
    send(m.Init(model="garbage", model_path="/g", total_steps=100, steps_per_epoch=100))
    for i, (kind, line) in enumerate(GARBAGE, start=1):
        OUT.write(line)
        send(step(i))  # a good frame after each bad line: the stream must go on
    for event in odd_but_valid():
        send(event)
    send(step(len(GARBAGE) + 1))
    send(m.Log(level="info", message="garbage worker: all sent", time=0.0))
    wait_for_eof()
    return 0


if __name__ == "__main__":
    sys.exit(main())
