"""Keep freed memory in the process on Linux, so each training step does not page-fault it back in.

MLX's CPU backend has no buffer cache: every array is a ``malloc`` and every release a ``free``,
and glibc returns large blocks to the kernel, which zeroes fresh pages for the next step. With
``mmap`` off and trimming off, freed blocks stay in the heap and the next step reuses them. The
cost: resident memory stays at the run's high-water mark, as with MLX's own GPU buffer cache.
Whether to is the plan's ``keep_freed_memory`` (``GRPO_TUI_KEEP_FREED_MEMORY=0`` leaves glibc's
defaults).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep what is freed (idempotent); False where that does not apply."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # -1 reads as SIZE_MAX for the trim threshold: never give the heap's top back.
    _applied = bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, -1))
    return _applied
