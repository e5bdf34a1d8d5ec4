"""A folder made read-only for the user the tests run as: a chmod for a normal user; root ignores
modes, so a read-only bind mount of the folder onto itself. Where neither can be done (root
without permission to mount, as in a container without CAP_SYS_ADMIN) the test is skipped."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def make_read_only(path: Path) -> Callable[[], None]:
    """Make the folder ``path`` read-only; returns what makes it writable again."""
    if os.geteuid() != 0:
        path.chmod(0o555)
        return lambda: path.chmod(0o755)
    mount = shutil.which("mount")
    if mount is None or subprocess.run([mount, "--bind", str(path), str(path)], capture_output=True).returncode:
        pytest.skip("running as root without permission to bind-mount: cannot make a folder read-only")

    def undo() -> None:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)

    if subprocess.run([mount, "-o", "remount,ro,bind", str(path)], capture_output=True).returncode:
        undo()
        pytest.skip("running as root without permission to remount a bind mount read-only")
    return undo


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` read-only inside the ``with`` block."""
    undo = make_read_only(path)
    try:
        yield
    finally:
        undo()
