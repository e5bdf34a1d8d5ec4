"""The ``pip install`` command that brings a missing optional library, as the program prints it.

It names the library itself with grpo-tui's own version bound (read from the installed metadata),
not ``grpo-tui[extra]``: that form fetches grpo-tui from the package index, which a source or
editable install does not come from, and an extra that does not exist is only a warning to pip.
"""

from __future__ import annotations

import re
import shlex
from importlib.metadata import PackageNotFoundError, requires

DISTRIBUTION = "grpo-tui"


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement(distribution: str) -> str:
    """grpo-tui's requirement on ``distribution`` (``"wandb>=0.19"``), without its marker; the
    bare name when grpo-tui's metadata does not name it."""
    try:
        listed = requires(DISTRIBUTION) or []
    except PackageNotFoundError:
        listed = []
    for line in listed:
        spec = line.split(";", 1)[0].strip()
        name = re.split(r"[\s\[<>=!~(]", spec, maxsplit=1)[0]
        if _normal(name) == _normal(distribution):
            return spec.replace(" ", "")
    return distribution


def pip_install(distribution: str) -> str:
    """``pip install 'wandb>=0.19'`` in backquotes, the program's mark of a command to type."""
    return f"`pip install {shlex.quote(requirement(distribution))}`"


def not_installed(what: str, distribution: str) -> str:
    """The sentence for a feature whose optional library is missing: ``what`` (``data.reasoning_gym``)
    needs ``distribution``, and the command that brings it."""
    return f"{what} needs the {distribution} package, which is not installed: {pip_install(distribution)}"
