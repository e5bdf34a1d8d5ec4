"""Another local user, for the tests of what such a user must not be able to do to a run
(docs/security.md). CI runs as root, which may become ``nobody``; a test run as a normal user cannot
switch users, and those tests are skipped there."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

NOBODY = 65534


def as_nobody(*command: str, timeout: float = 60, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``command`` as ``nobody`` (uid and gid 65534, no other groups)."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root (and setpriv) to act as another local user")
    return subprocess.run(
        [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *command],
        capture_output=True, text=True, timeout=timeout, cwd=cwd,
        env={**os.environ, "HOME": "/tmp"},
    )


def give_to_nobody(path: Path) -> None:
    """``path`` (a folder or file) now belongs to ``nobody``, as another user's would."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a file another user's")
    os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
