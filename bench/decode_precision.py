"""Can lower-precision weights make decoding cheaper on this machine? A decode step is one skinny
matmul per weight (a few rows against the whole matrix), so its speed is how fast the weights stream
through. This prints that rate for float32 (MLX calls the preloaded BLAS), bfloat16 / float16 and
8- / 4-bit quantized weights (MLX's own CPU kernels), on one of a Qwen3-0.6B-shaped layer's MLP
matrices (3072 × 1024) and on the whole tied vocabulary projection (151,936 × 1024).

    .venv/bin/python bench/decode_precision.py [--rows 8]

Run it with the BLAS the worker uses (``protocol.blas``): it re-executes itself with MKL/OpenBLAS
preloaded when one is installed, as the worker does.
"""

from __future__ import annotations

import argparse
import time

from grpo_tui.common.blas import active_blas, reexec_if_needed

reexec_if_needed()  # an optimized BLAS for mlx[cpu] on Linux, before MLX is imported

import mlx.core as mx  # noqa: E402


def _rate(fn, weight_bytes: int, repeats: int) -> float:
    """Weight bytes streamed per second (GB/s), best of ``repeats``."""
    mx.eval(fn())
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        mx.eval(fn())
        best = min(best, time.perf_counter() - t0)
    return weight_bytes / best / 1e9


def measure(rows: int, out_features: int, in_features: int, repeats: int) -> list[tuple[str, float, float]]:
    """(format, bytes per weight, GB/s of float32-equivalent weights) for each format."""
    w32 = mx.random.normal((out_features, in_features)) * 0.02
    x32 = mx.random.normal((rows, in_features))
    size = w32.size * 4
    results = []
    for name, dtype in (("float32", mx.float32), ("bfloat16", mx.bfloat16), ("float16", mx.float16)):
        w, x = w32.astype(dtype), x32.astype(dtype)
        mx.eval(w, x)
        results.append((name, w.itemsize, _rate(lambda: x @ w.T, size, repeats)))
        del w, x
    for bits in (8, 4):
        wq, scales, biases = mx.quantize(w32, group_size=64, bits=bits)
        mx.eval(wq, scales, biases)
        def qmm():
            return mx.quantized_matmul(x32, wq, scales, biases, transpose=True, group_size=64, bits=bits)
        results.append((f"{bits}-bit", bits / 8, _rate(qmm, size, repeats)))
        del wq, scales, biases
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8, help="sequences decoded together (default 8)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"BLAS: {active_blas()} · {args.rows} rows per decode matmul · float32-equivalent weight GB/s (higher is faster)")
    for label, shape in (("MLP matrix 3072×1024", (3072, 1024)), ("vocabulary 151936×1024", (151936, 1024))):
        results = measure(args.rows, *shape, repeats=args.repeats if shape[0] < 10_000 else 2)
        base = results[0][2]
        print(f"{label}:")
        for name, itemsize, rate in results:
            print(f"  {name:<9} {itemsize:>4} B/weight  {rate:7.2f} GB/s  {rate / base:6.3f}× float32's speed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
