"""Both CPU cores for small models: two MLX streams, each with half of the batch.

On CPU, MLX runs every elementwise and reduction kernel on its stream's one thread, and a small
model's matmuls are too small for a second BLAS thread to pay, so a small model's step used one
core. Splitting a micro-batch into two halves by prompt group, each on its own CPU stream with half
of BLAS's threads per call, runs the halves side by side. That needs MLX to interleave the two
halves' ops, hence the wider evaluation order (``plan.prepare_process``). Which models get the
halves is the plan's ``two_streams`` (``GRPO_TUI_TWO_STREAMS=0`` turns it off).
"""

from __future__ import annotations

import ctypes
import threading
from contextlib import contextmanager
from functools import cache
from typing import Iterator

import mlx.core as mx

_THREAD_STREAMS: dict[int, list] = {}


def streams() -> list:
    """Two CPU streams for this thread, or the one default stream off CPU. MLX streams belong to
    the thread that made them (the worker clears them at exit)."""
    if mx.default_device() != mx.cpu:
        return [mx.default_stream(mx.default_device())]
    key = threading.get_ident()
    if key not in _THREAD_STREAMS:
        _THREAD_STREAMS[key] = [mx.default_stream(mx.cpu), mx.new_stream(mx.cpu)]
    return _THREAD_STREAMS[key]


@cache  # looked up once per process, not once per micro-batch
def _blas_thread_functions() -> tuple | None:
    """(get, set) of the loaded BLAS's thread count: MKL or OpenBLAS, None for any other."""
    process = ctypes.CDLL(None)
    for get, put in (("MKL_Get_Max_Threads", "MKL_Set_Num_Threads"),
                     ("openblas_get_num_threads", "openblas_set_num_threads")):
        try:
            getter, setter = getattr(process, get), getattr(process, put)
        except AttributeError:
            continue
        getter.restype, getter.argtypes = ctypes.c_int, []
        setter.restype, setter.argtypes = None, [ctypes.c_int]
        return getter, setter
    return None


@contextmanager
def half_the_blas_threads() -> Iterator[None]:
    """Inside the block each BLAS call uses half the threads it would (at least one): the two
    streams call it at the same time, and each stream's own thread is already a core."""
    functions = _blas_thread_functions()
    if functions is None:
        yield
        return
    get, put = functions
    before = get()
    put(max(1, before // 2))
    try:
        yield
    finally:
        put(before)
