"""The ``[distributed]`` settings as command-line flags, shared by ``grpo-tui run|worker`` and the
worker itself (which applies them over the config; see worker/ranks.py)."""

from __future__ import annotations

import argparse
from typing import get_args

from grpo_tui.protocol.config import Backend, Config, ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("several ranks (mlx.launch; docs/config.md, [distributed])")
    group.add_argument("--ranks", type=int, metavar="N", help="local ranks: mlx.launch -n N")
    group.add_argument("--hosts", metavar="A,B", help="one rank per host: mlx.launch --hosts")
    group.add_argument("--hostfile", metavar="FILE", help="mlx.launch --hostfile (JSON)")
    group.add_argument("--backend", choices=get_args(Backend), help="mx.distributed backend (default ring)")


def forwarded(args: argparse.Namespace) -> list[str]:
    """The flags that were given, as worker arguments."""
    out: list[str] = []
    for name in ("ranks", "hosts", "hostfile", "backend"):
        value = getattr(args, name, None)
        if value is not None:
            out += [f"--{name}", str(value)]
    return out


def rank_count(config: Config) -> int | None:
    """How many ranks the run starts, when the config says (a hostfile's count is mlx.launch's)."""
    d = config.distributed
    if d.hostfile:
        return None
    return len(d.hosts) if d.hosts else d.ranks


def undealt(accumulation: int, size: int) -> ConfigError | None:
    """The micro-batch is the unit of distribution: each rank must get as many."""
    if size <= 1 or accumulation % size == 0:
        return None
    return ConfigError(
        "training.gradient_accumulation_steps",
        f"{accumulation} micro-batches cannot be dealt out evenly to {size} ranks "
        "(the micro-batch is the unit of distribution; use a multiple of the rank count)",
        kind="ranks",
    )
