"""The warning a worker gives when it ends up on a slow reference BLAS, with the fix.

Standard library only (the dashboard and the ``--plain`` output use it without MLX).
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

from grpo_tui.common.install_hint import pip_install

FAST_NAMES = ("mkl", "openblas", "blis", "accelerate")
PREFIX = "slow BLAS:"  # the warning starts with this (the dashboard's header looks for it)


def is_reference_blas(path: str) -> bool:
    """True for the netlib reference BLAS that Linux ``mlx[cpu]`` links (``libblas.so*``,
    ``libcblas.so*``), which is several times slower than MKL or OpenBLAS on a training step."""
    lowered = path.lower()
    if any(name in lowered for name in FAST_NAMES):
        return False
    name = Path(path.split(" ")[0]).name
    return name.startswith(("libblas", "libcblas", "librefblas"))


def slow_blas_warning(active: str, system: str | None = None, machine: str | None = None) -> str | None:
    """A one-line warning with the fix when ``active`` (``blas.active_blas()``) is the reference
    BLAS on Linux; None on macOS or when a fast BLAS is in use."""
    system = system if system is not None else sys.platform
    machine = machine if machine is not None else platform.machine()
    if not system.startswith("linux") or not is_reference_blas(active):
        return None
    if machine in ("x86_64", "AMD64"):
        fix = f"{pip_install('mkl')} in this environment (grpo-tui depends on it on x86-64 Linux; it is missing)"
    else:
        fix = "install OpenBLAS (e.g. `apt install libopenblas0`)"
    return (
        f"{PREFIX} MLX is using the reference BLAS ({active}); training steps are several times slower. "
        f"Fix: {fix}, or set runtime.blas to the path of a libopenblas or libmkl_rt library."
    )
