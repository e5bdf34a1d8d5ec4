"""Several ranks, process side (no MLX): the ``mlx.launch`` command line, and which rank this is.

``mlx.launch`` starts one process per rank (local ranks with ``-n``, or one per host of ``--hosts``
/ ``--hostfile``), sets ``MLX_RANK`` in each, broadcasts its stdin to all of them and merges their
stdout and stderr into its own. So the rank is known before MLX loads, and only rank 0 may write
frames to stdout, read commands, or touch the output folder (docs/architecture.md, "Several ranks").
"""

from __future__ import annotations

import argparse
import os
import sys

from grpo_tui.protocol.config import Config, ConfigError
from grpo_tui.protocol.distributed import add_arguments

__all__ = ["add_arguments", "apply_arguments", "config_launch", "describe", "launch_command", "launched", "rank", "relaunch"]

# mlx.launch's entry point, run with this interpreter (its console script may name another one).
_LAUNCHER = "import sys; from mlx._distributed_utils.launch import main; sys.argv[0] = 'mlx.launch'; sys.exit(main())"


def rank() -> int:
    """This process's rank: ``MLX_RANK`` from ``mlx.launch``, 0 when started alone."""
    try:
        return int(os.environ.get("MLX_RANK", "0"))
    except ValueError:
        return 0


def launched() -> bool:
    """Started by ``mlx.launch``: one of several ranks."""
    return "MLX_RANK" in os.environ


def is_leader() -> bool:
    return rank() == 0


def wanted(config: Config) -> bool:
    """Whether the config asks for more than one process."""
    d = config.distributed
    return d.ranks > 1 or bool(d.hosts) or d.hostfile is not None


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
    return launch_command(command, ranks=d.ranks if not (d.hosts or d.hostfile) else 1, backend=d.backend,
                          hosts=d.hosts or None, hostfile=d.hostfile)


def apply_arguments(config: Config, args: argparse.Namespace) -> None:
    d = config.distributed
    if args.ranks is not None:
        if args.ranks < 1:
            raise ConfigError("distributed.ranks", f"{args.ranks} (from --ranks) must be at least 1")
        d.ranks = args.ranks
    if args.hosts:
        d.hosts, d.hostfile = [h.strip() for h in args.hosts.split(",") if h.strip()], None
    if args.hostfile:
        if not os.path.isfile(args.hostfile):
            raise ConfigError("distributed.hostfile", f"{args.hostfile!r} (from --hostfile) does not exist")
        d.hostfile, d.hosts = os.path.abspath(args.hostfile), []
    if args.backend:
        d.backend = args.backend


def relaunch(config: Config) -> None:
    """Replace this process with ``mlx.launch`` running this same worker command on every rank."""
    command = config_launch(config, [sys.executable, "-m", "grpo_tui.worker", *sys.argv[1:]])
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)


def describe(trainer: object) -> tuple[int, str]:
    """The ``init`` frame's ``ranks`` and ``backend`` (a test fake trainer has no ``ranks``)."""
    group = getattr(trainer, "ranks", None)
    size = int(getattr(group, "size", 1))
    return size, str(getattr(group, "backend", "")) if size > 1 else ""
