"""What a plain `pip install` brings: the fast BLAS on x86-64 Linux, nothing new elsewhere."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _installs(requirements: list[str], system: str, machine: str) -> set[str]:
    env = {"sys_platform": system, "platform_machine": machine}
    return {r.name for r in map(Requirement, requirements) if r.marker is None or r.marker.evaluate(env)}


def test_plain_install_brings_mkl_on_x86_64_linux_only() -> None:
    deps = _project()["dependencies"]
    assert "mkl" in _installs(deps, "linux", "x86_64")
    assert "mkl" not in _installs(deps, "linux", "aarch64")
    assert "mkl" not in _installs(deps, "darwin", "arm64")
    assert "mlx" in _installs(deps, "darwin", "arm64")  # macOS unchanged


def test_the_old_fast_blas_extra_still_resolves() -> None:
    extras = _project()["optional-dependencies"]
    assert extras["fast-blas"] == []  # `pip install grpo-tui[fast-blas]` keeps working
    deps = _project()["dependencies"]
    assert "mkl" in _installs(deps + extras["fast-blas"], "linux", "x86_64")  # what the extra used to bring
