"""The ``[distributed]`` settings as command-line flags, shared by ``grpo-tui run|worker`` and the
worker itself (which applies them over the config; see worker/ranks.py)."""

from __future__ import annotations

import argparse
from typing import get_args

from .config import Backend


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
