"""Several ranks, process side (no MLX): the ``mlx.launch`` command line, and which rank this is.

``mlx.launch`` starts one process per rank (local ranks with ``-n``, or one per host of ``--hosts``
/ ``--hostfile``), sets ``MLX_RANK`` in each, broadcasts its stdin to all of them and merges their
stdout and stderr into its own. So the rank is known before MLX loads, and only rank 0 may write
frames to stdout, read commands, or touch the output folder (docs/architecture.md, "Several ranks").
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys

from grpo_tui.common import distributed
from grpo_tui.common.distributed import add_arguments
from grpo_tui.protocol.config import Config, ConfigError
from grpo_tui.protocol.outcome import Exit

__all__ = ["add_arguments", "apply_arguments", "config_launch", "data_parallel", "describe", "is_generator",
           "launch_command", "launched", "rank", "relaunch", "remote_generator"]

# mlx.launch's entry point, run with this interpreter (its console script may name another one).
_LAUNCHER = "import sys; from mlx._distributed_utils.launch import main; sys.argv[0] = 'mlx.launch'; sys.exit(main())"


def rank() -> int:
    """This process's rank: ``MLX_RANK`` from ``mlx.launch``, 0 when started alone."""
    try:
        return int(os.environ.get("MLX_RANK", "0"))
    except ValueError:
        return 0


def launched() -> bool:
    """Started by ``mlx.launch`` (it sets ``MLX_RANK`` for every backend it starts): one of several
    ranks. The engine asks too (``engine.distributed``)."""
    return "MLX_RANK" in os.environ


def is_leader() -> bool:
    return rank() == 0


def wanted(config: Config) -> bool:
    """Whether the config asks for more than one process (``mlx.launch``'s)."""
    d = config.distributed
    return d.ranks > 1 or bool(d.hosts) or d.hostfile is not None or remote_generator(config)


def remote_generator(config: Config) -> bool:
    """[async] with ``generator_hosts``: ``mlx.launch`` starts the learner (rank 0) and the
    generator (rank 1, on the generator's host); docs/async.md."""
    return config.async_.on and bool(config.async_.generator_hosts)


def is_generator(config: Config) -> bool:
    """This process is [async]'s generator rank (``mlx.launch``'s last)."""
    return remote_generator(config) and launched() and rank() == 1


def data_parallel(config: Config) -> bool:
    """The ranks share the step's batch (``engine.distributed``): ``mlx.launch`` started this process
    for ``[distributed]``, not for [async]'s generator."""
    return launched() and not remote_generator(config)


def launch_command(command: list[str], *, ranks: int = 1, backend: str = "ring", hosts: list[str] | None = None,
                   hostfile: str | None = None) -> list[str]:
    """``command`` (a full argv, interpreter first) under ``mlx.launch``; ``-n`` repeats each host
    (``localhost`` when none is given) ``ranks`` times. One local rank needs no launcher (and
    ``mlx.launch -n 1``'s empty ring hostfile fails ``mx.distributed.init``): ``command`` itself."""
    if ranks <= 1 and not hosts and hostfile is None:
        return list(command)
    launch = [sys.executable, "-c", _LAUNCHER, "--backend", backend]
    if hostfile is not None:
        launch += ["--hostfile", hostfile]
    else:
        launch += ["--hosts", ",".join(hosts or ["127.0.0.1"]), "-n", str(ranks)]
    # The ranks run ``command`` as given: the launcher's own --python would prepend an interpreter.
    return launch + ["--", *command]


def launcher_failure(stderr: str) -> str | None:
    """``mlx.launch`` exits 0 even when a rank fails; it prints one warning per failed rank
    ("Node with rank R exited with code C" or "... was killed"). The first such line, cleaned."""
    for line in stderr.splitlines():
        if "Node with rank" in line and ("exited with code" in line or "was killed" in line):
            start = line.index("Node with rank")
            return line[start:].split("\x1b")[0].strip()
    return None


def config_launch(config: Config, command: list[str]) -> list[str]:
    d = config.distributed
    if remote_generator(config):  # the learner's host (this one unless named), then the generator's
        return launch_command(command, backend="ring", hosts=(d.hosts or ["127.0.0.1"]) + config.async_.generator_hosts)
    return launch_command(command, ranks=d.ranks if not (d.hosts or d.hostfile) else 1, backend=d.backend,
                          hosts=d.hosts or None, hostfile=d.hostfile)


def apply_arguments(config: Config, args: argparse.Namespace) -> None:
    d = config.distributed
    if args.ranks is not None:
        if args.ranks < 1:
            raise ConfigError("distributed.ranks", f"{args.ranks} (from --ranks) must be at least 1", kind="ranks")
        d.ranks = args.ranks
    if args.hosts:
        d.hosts, d.hostfile = [h.strip() for h in args.hosts.split(",") if h.strip()], None
    if args.hostfile:
        if not os.path.isfile(args.hostfile):
            raise ConfigError("distributed.hostfile", f"{args.hostfile!r} (from --hostfile) does not exist", kind="ranks")
        d.hostfile, d.hosts = os.path.abspath(args.hostfile), []
    if args.backend:
        d.backend = args.backend
    if (count := distributed.rank_count(config)) is not None and (
            error := distributed.undealt(config.training.gradient_accumulation_steps, count)) is not None:
        raise error  # before mlx.launch starts a rank, each of which would say it
    if wanted(config) and d.backend == "mpi" and shutil.which("mpirun") is None:
        raise ConfigError(
            "distributed.backend", "'mpi' needs mpirun (Open MPI), which is not installed here; use the ring backend "
            "(the default) or install Open MPI", kind="ranks",
        )


def relaunch(config: Config) -> None:
    """Run ``mlx.launch`` with this same worker command on every rank, and exit with the worst rank's code."""
    command = config_launch(config, [sys.executable, "-m", "grpo_tui.worker", *sys.argv[1:]])
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(launch_and_wait(command))


# A rank that stopped on a fixable mistake says so on stderr with this mark; the launch shows each
# sentence once (rank 0's already reached the reader as a frame or a plain line).
MISTAKE_MARK = "grpo-tui: a fixable mistake on rank "
_MISTAKE = re.compile(re.escape(MISTAKE_MARK) + r"(\d+): (.*)$")
_NODE = re.compile(r"Node with rank (\d+) (?:exited with code (-?\d+)|was killed)")
# Which rank's ending explains the launch's: a mistake on any rank explains the others' lost ranks.
_SEVERITY = {Exit.MISTAKE: 5, Exit.CRASH: 4, Exit.NAN_STOP: 3, Exit.UNREWARDED: 2, Exit.STOPPED: 1, Exit.DONE: 0}


def mistake_line(sentence: str) -> str:
    return f"{MISTAKE_MARK}{rank()}: {sentence}"


def worst(codes: list[int]) -> int:
    """The launch's exit code from its ranks': a code that is no kind (a silent death) is a crash."""
    kinds = [Exit(c) if c in _SEVERITY else Exit.CRASH for c in codes]
    return max(kinds, key=_SEVERITY.__getitem__, default=Exit.DONE)


def _die_with_parent() -> None:
    """In the launcher's child, before exec: on Linux the kernel sends it SIGTERM when this process
    dies, so a worker killed with -9 never leaves mlx.launch (and through it every rank) training
    on, holding the output folder's lock; the ranks then see their stdin close and stop."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def launch_and_wait(command: list[str]) -> int:
    """``mlx.launch`` as a child (stdin and stdout pass through: rank 0's frames), its stderr read
    line by line: each rank's exit code from its warnings (it exits 0 even when a rank fails), a
    mistake said once however many ranks made it. Returns the worst rank's code."""
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
    stopped = False

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopped
        stopped = True
        proc.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ctrl+c reaches every rank itself
    codes: dict[int, int] = {}
    killed: set[int] = set()
    mistakes: dict[int, str] = {}
    held: list[bytes] = []
    assert proc.stderr is not None
    for raw in iter(proc.stderr.readline, b""):
        line = raw.decode("utf-8", errors="replace")
        plain = re.sub(r"\x1b\[[0-9;]*m", "", line).rstrip()
        if said_mistake := _MISTAKE.search(plain):
            mistakes.setdefault(int(said_mistake.group(1)), said_mistake.group(2))
            continue
        if node := _NODE.search(plain):
            if node.group(2) is None:
                killed.add(int(node.group(1)))
                held.append(raw)  # ended by the launcher after another rank: noise unless nothing else says why
                continue
            codes[int(node.group(1))] = int(node.group(2))
            if int(node.group(2)) in (Exit.MISTAKE, Exit.STOPPED, Exit.NAN_STOP, Exit.UNREWARDED) or int(node.group(2)) < 0:
                held.append(raw)  # a frame, a plain line or the sentence below says it
                continue
        _write_stderr(raw)
    code = proc.wait()
    said = {mistakes.get(0)}
    for r, sentence in sorted(mistakes.items()):
        codes.setdefault(r, Exit.MISTAKE)
        if sentence not in said:  # a mistake rank 0 did not make (a file missing on that host)
            said.add(sentence)
            _write_stderr(f"rank {r}: {sentence}\n".encode())
    # mlx.launch's own status says only that some rank failed: the ranks' codes say how. A rank
    # ended by a signal was most often ended by the launcher after another rank's end.
    found = [c for c in codes.values() if c >= 0] or ([code] if code else [])
    if not found and (killed or codes):
        found = [Exit.STOPPED if stopped else Exit.CRASH]
    result = worst(found) if found else (Exit.STOPPED if stopped else Exit.DONE)
    if result == Exit.CRASH:
        for raw in held:
            _write_stderr(raw)
    return result


def _write_stderr(data: bytes) -> None:
    try:
        os.write(2, data)
    except OSError:
        pass


def describe(trainer: object) -> tuple[int, str]:
    """The ``init`` frame's ``ranks`` and ``backend`` (a test fake trainer has no ``ranks``)."""
    group = getattr(trainer, "ranks", None)
    size = int(getattr(group, "size", 1))
    return size, str(getattr(group, "backend", "")) if size > 1 else ""
