"""Both CPU cores for small models: two MLX streams, each with half of the batch.

On CPU, MLX runs every elementwise and reduction kernel on its stream's one thread, and a small
model's matmuls are too small for a second BLAS thread to pay (MKL's OpenMP worker spun in
``kmp_flag_64::wait`` for a third of the demo's training samples; MKL on one thread was as fast).
So a small model's step used one core. Splitting a micro-batch into two halves by prompt group,
each on its own CPU stream with half of BLAS's threads per call (one on a 2-core machine), runs the
halves side by side.

That only works when MLX interleaves the two halves' ops: it orders a graph depth-first, breadth-
first across at most ``MLX_BFS_MAX_WIDTH`` branches (default 20), and at 20 one half was queued
behind the other and the streams took turns (demo fwd+bwd: 88 ms on one stream, 96 on two; at a
width of 200: 64 ms). MLX reads the variable once, at its first evaluation, so the worker package
sets it when it is imported. The wider order also lets AdamW's per-parameter kernels,
alternated over the two streams, overlap (4-layer 0.6B-shaped update 2.2 -> 1.0 s).

``GRPO_TUI_TWO_STREAMS=0`` keeps every model on one stream.
"""

from __future__ import annotations

import ctypes
import os
import threading
from contextlib import contextmanager
from functools import cache
from typing import Iterator

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

MAX_PARAMETERS = 50_000_000  # above this a step is matmul-bound and BLAS uses both cores itself

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


def applies(model: nn.Module) -> bool:
    """Whether ``model``'s batches are split over the two CPU streams."""
    if os.environ.get("GRPO_TUI_TWO_STREAMS", "1") == "0" or (os.cpu_count() or 1) < 2 or len(streams()) < 2:
        return False
    return sum(v.size for _, v in tree_flatten(model.parameters())) <= MAX_PARAMETERS


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
