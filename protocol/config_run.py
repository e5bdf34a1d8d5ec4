"""The run's own sections: ``[checkpoint]``, ``[logging]``, ``[store]``, ``[display]``, ``[runtime]``,
``[distributed]`` and ``[fork]``
(docs/config.md)."""

from __future__ import annotations

from typing import Literal

import msgspec

from grpo_tui.protocol.config_base import Section as _Section, invalid as _invalid
from grpo_tui.protocol.messages import SampleDisplay


class CheckpointConfig(_Section):
    output_dir: str = "runs/grpo"
    save_every: int = 50  # steps; 0 = only final / manual
    keep_last: int = 3  # periodic checkpoints kept; 0 = keep all
    resume: str | bool = "latest"  # "latest" | a checkpoint path | false

    def __post_init__(self) -> None:
        if self.save_every < 0:
            raise _invalid("save_every", self.save_every, "must be >= 0 (0 = only final and manual)")
        if self.keep_last < 0:
            raise _invalid("keep_last", self.keep_last, "must be >= 0 (0 = keep all)")
        if self.resume is True:
            self.resume = "latest"
        if self.resume == "":
            raise _invalid("resume", self.resume, 'must be "latest", a checkpoint path or false')


Tracker = Literal["wandb", "trackio", "tensorboard"]


class LoggingConfig(_Section):
    """Trackers the run reports to besides its own store (docs/trackers.md); rank 0 reports."""

    report_to: list[Tracker] = msgspec.field(default_factory=list)  # TRL's report_to
    steps: int = 1  # report every this many steps, the mean over them (TRL's logging_steps)
    log_completions: bool = False  # also a table of each logged step's completions (TRL's name)
    project: str = "grpo-tui"  # the W&B / Trackio project (TensorBoard: a folder in the output dir)

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise _invalid("steps", self.steps, "must be at least 1")
        if len(set(self.report_to)) != len(self.report_to):
            raise _invalid("report_to", self.report_to, "names a tracker twice")


class StoreConfig(_Section):
    enabled: bool = True
    # The SQLite file; default <output_dir>/outputs.db. Several runs may share one (mlx-node's
    # outputStore.localPath): each is a row of its runs table.
    path: str | None = None
    # A store that fails SQLite's check at start: "stop" names it and the ways on; "fresh" keeps it
    # beside as outputs.damaged-<time>.db and starts a new one.
    if_damaged: Literal["stop", "fresh"] = "stop"


class DisplayConfig(_Section):
    sample_display: SampleDisplay = "best_worst"  # the protocol's modes (protocol/messages.py)
    restart_on_crash: bool = True
    restart_delay_s: float = 5.0
    max_restarts: int = 3

    def __post_init__(self) -> None:
        if self.restart_delay_s < 0:
            raise _invalid("restart_delay_s", self.restart_delay_s, "must be >= 0")
        if self.max_restarts < 0:
            raise _invalid("max_restarts", self.max_restarts, "must be >= 0")


class RuntimeConfig(_Section):
    # Linux mlx[cpu] links a slow reference BLAS; "auto" preloads an optimized one when found.
    blas: str = "auto"  # "auto" | "off" | path to a BLAS shared library


Backend = Literal["ring", "mpi", "jaccl", "nccl"]  # mx.distributed's backends, as mlx.launch names them


class DistributedConfig(_Section):
    """Data parallelism over mx.distributed, started by mlx.launch (docs/config.md, "[distributed]")."""

    ranks: int = 1  # local ranks (mlx.launch -n) when neither hosts nor hostfile is given
    backend: Backend = "ring"
    hosts: list[str] = msgspec.field(default_factory=list)  # mlx.launch --hosts
    hostfile: str | None = None  # mlx.launch --hostfile

    def __post_init__(self) -> None:
        if self.ranks < 1:
            raise _invalid("ranks", self.ranks, "must be at least 1")
        if self.hosts and self.hostfile:
            raise _invalid("hosts", self.hosts, "and distributed.hostfile are exclusive; give one")
        if any(not h or "," in h for h in self.hosts):
            raise _invalid("hosts", self.hosts, "must be host names, one per element")


class ForkConfig(_Section):
    """Where a forked run branched off (``grpo-tui fork``, docs/steering.md); fork writes it."""

    parent: str  # the parent's output folder (never written to)
    run_id: int = 0  # the parent's run in its store
    step: int = 0  # the parent's checkpoint it starts from: the fork's first step is step + 1
