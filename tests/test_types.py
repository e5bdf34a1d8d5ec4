"""The type checker runs clean over protocol/, worker/ and tui/ (settings in pyproject.toml's
[tool.mypy]; the package is seen through the .typecheck/ link tree)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_link_tree_points_at_the_packages():
    for name in ["protocol", "worker", "tui"] + [p.name for p in (ROOT / "api").glob("*.py")]:
        link = ROOT / ".typecheck" / "grpo_tui" / name
        target = ROOT / ("api" if name.endswith(".py") else "") / name  # grpo_tui itself is api/
        assert link.is_symlink() and link.resolve() == target.resolve(), link


@pytest.mark.slow
def test_mypy_is_clean():
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
