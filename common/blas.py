"""Choosing an optimized BLAS for ``mlx[cpu]`` on Linux.

The Linux ``mlx[cpu]`` wheel links a reference BLAS (a 1024³ sgemm takes ~0.45 s on two cores
instead of ~0.01 s). MLX resolves ``cblas_sgemm`` through the dynamic linker, so preloading MKL
(PyPI ``mkl``, a dependency on x86-64 Linux) or OpenBLAS makes every matmul fast without
rebuilding anything. The dashboard starts the worker with the preload; the standalone worker
re-executes itself the same way. macOS is left alone (Accelerate / Metal).

Standard library only: the dashboard uses this without importing MLX.
"""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path

from grpo_tui.common.install_hint import pip_install

# Set in the child so that a re-exec happens at most once, whatever the outcome.
REEXEC_MARK = "GRPO_TUI_BLAS_REEXEC"


def _prefix_candidates() -> list[str]:
    prefixes = {sys.prefix, sys.base_prefix, os.environ.get("VIRTUAL_ENV", "")}
    found: list[str] = []
    for prefix in filter(None, prefixes):
        found += sorted(glob.glob(os.path.join(prefix, "lib", "libmkl_rt.so*")))
    return found


_SYSTEM_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/libmkl_rt.so",
)


def find_blas(setting: str = "auto") -> str | None:
    """The library to preload for ``runtime.blas = setting``, or None (off, macOS, none found)."""
    if setting == "off" or not sys.platform.startswith("linux"):
        return None
    if setting != "auto":
        return setting if os.path.exists(setting) else None
    for path in _prefix_candidates() + list(_SYSTEM_CANDIDATES):
        if os.path.exists(path):
            return path
    return None


def preloaded(env: dict[str, str] | None = None) -> list[str]:
    value = (env if env is not None else os.environ).get("LD_PRELOAD", "")
    return [p for p in value.replace(":", " ").split() if p]


def child_env(setting: str = "auto", base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment for a child process that preloads the chosen BLAS (if any)."""
    env = dict(os.environ if base is None else base)
    env[REEXEC_MARK] = "1"
    lib = find_blas(setting)
    if lib and lib not in preloaded(env):
        env["LD_PRELOAD"] = " ".join(preloaded(env) + [lib])
    return env


def reexec_if_needed(setting: str = "auto", argv: list[str] | None = None) -> None:
    """Replace this process by itself with the BLAS preloaded, once. Call before importing MLX."""
    if os.environ.get(REEXEC_MARK) or "mlx.core" in sys.modules:
        return
    lib = find_blas(setting)
    if not lib or lib in preloaded():
        return
    args = argv if argv is not None else [sys.executable, *sys.orig_argv[1:]]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(args[0], args, child_env(setting))


def active_blas() -> str:
    """The library that actually provides ``cblas_sgemm`` in this process (verified, not assumed).

    Looks the symbol up in the global namespace, the way MLX's own reference resolves it, and asks
    the dynamic linker which file it came from. Call after importing ``mlx.core``.
    """
    if not sys.platform.startswith("linux"):
        return "system (Accelerate/Metal)" if sys.platform == "darwin" else "unknown"
    import ctypes

    class _DlInfo(ctypes.Structure):
        _fields_ = [
            ("dli_fname", ctypes.c_char_p),
            ("dli_fbase", ctypes.c_void_p),
            ("dli_sname", ctypes.c_char_p),
            ("dli_saddr", ctypes.c_void_p),
        ]

    # The linker binds libmlx's cblas_sgemm to the global scope first (preloads), then to
    # libmlx's own dependencies; ask in that order.
    scopes: list[str | None] = [None]
    mlx_core = sys.modules.get("mlx.core")
    core_file = getattr(mlx_core, "__file__", None)
    if core_file:
        scopes += sorted(glob.glob(os.path.join(os.path.dirname(core_file), "lib", "libmlx*.so*")))
    libdl = ctypes.CDLL("libdl.so.2")
    for scope in scopes:
        try:
            sgemm = ctypes.cast(ctypes.CDLL(scope).cblas_sgemm, ctypes.c_void_p)
        except (AttributeError, OSError):
            continue
        info = _DlInfo()
        if libdl.dladdr(sgemm, ctypes.byref(info)) and info.dli_fname:
            return os.path.realpath(info.dli_fname.decode())
    return "unknown (cblas_sgemm not found)"


def describe(path: str) -> str:
    """A short label for a BLAS library path."""
    name = Path(path).name
    if "mkl" in name:
        return f"MKL ({path})"
    if "openblas" in name or "openblas" in path:
        return f"OpenBLAS ({path})"
    if "libblas" in name:
        return f"reference BLAS ({path}) — slow; {pip_install('mkl')} or set runtime.blas"
    return path
