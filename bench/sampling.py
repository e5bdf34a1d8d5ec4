"""Milliseconds per token of the rollout's keyed draw over a large vocabulary, side by side.

    .venv/bin/python bench/sampling.py                  # 64 rows x 151,936 logits (~1 min)
    .venv/bin/python bench/sampling.py --rows 8 --vocab 32000

Compares, on the same logits (a peaked random distribution, like a model's), the draws the rollout
could use on this CPU:
- ``mlx gumbel``: the keyed Gumbel-max in MLX ops (``sampling.KeyedSampler`` without ``host``: a
  hash and two ``log`` per vocabulary entry; what the CPU ran before, and what Metal/CUDA run);
- ``mx.random.categorical``: mlx-lm's own sampler (not keyed);
- ``numpy gumbel``: the same Gumbel-max with the hash and logs in numpy (SIMD);
- ``numpy inverse-CDF``: ``accel.host_sampling``, one uniform per row (what the plan's
  ``host_sampling`` runs), plain and with top-p 0.95 / min-p 0.05 / top-k 50, and with log-probs.
Each figure is the median of ``--repeats`` draws, after one warm-up.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from grpo_tui.protocol.config import GenerationConfig  # noqa: E402
from grpo_tui.worker.engine.policy import sampling  # noqa: E402
from grpo_tui.worker.engine.accel import host_sampling  # noqa: E402


def _fmix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


@np.errstate(over="ignore")  # the hash's multiplications wrap on purpose
def _numpy_gumbel(x: np.ndarray, keys: np.ndarray, position: int) -> np.ndarray:
    """Gumbel-max with a per-element 32-bit hash, all in numpy."""
    golden = np.uint32(0x9E3779B9)
    row = _fmix(keys ^ _fmix(np.uint32(position) * golden + golden))
    bits = _fmix(_fmix(row[:, None] ^ (np.arange(x.shape[1], dtype=np.uint32) * np.uint32(0xCC9E2D51))) + golden)
    u = ((bits >> np.uint32(9)).astype(np.float32) + 0.5) * np.float32(1.0 / (1 << 23))
    return np.argmax(x - np.log(-np.log(u)), axis=1)


def _time(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    # Normal logits with standard deviation 4: the top 1% of tokens hold most of the mass.
    x_np = (rng.standard_normal((args.rows, args.vocab), dtype=np.float32) * 4).astype(np.float32)
    logits = mx.array(x_np)
    mx.eval(logits)
    keys = [sampling.row_key(0, 1, r, 0) for r in range(args.rows)]
    plain, filtered = GenerationConfig(), GenerationConfig(top_p=0.95, min_p=0.05, top_k=50)
    u = sampling.host_uniforms(np.array(keys, np.uint32), np.zeros(args.rows, np.uint32))
    mlx_sampler, mlx_filtered = sampling.KeyedSampler(plain, keys), sampling.KeyedSampler(filtered, keys)
    categorical = mx.compile(lambda z: mx.random.categorical(z))
    cases = {
        "mlx gumbel (keyed, MLX ops)": lambda: mx.eval(mlx_sampler(logits)),
        "mlx gumbel, top-p/min-p/top-k (mlx-lm's)": lambda: mx.eval(mlx_filtered(logits)),
        "mx.random.categorical (mlx-lm)": lambda: mx.eval(categorical(logits)),
        "numpy gumbel (keyed)": lambda: _numpy_gumbel(x_np, np.array(keys, np.uint32), 0),
        "numpy inverse-CDF (keyed)": lambda: host_sampling.draw(logits, u, 1.0),
        "numpy inverse-CDF, temperature 0.7": lambda: host_sampling.draw(logits, u, 0.7),
        "numpy inverse-CDF, top-p/min-p/top-k": lambda: host_sampling.draw(
            logits, u, 1.0, host_sampling.Filters(filtered.top_p, filtered.min_p, filtered.top_k)),
        "numpy inverse-CDF + log-probs": lambda: host_sampling.draw(logits, u, 1.0, logprobs=True),
    }
    print(f"bench/sampling.py: one keyed draw of {args.rows} rows x {args.vocab:,} logits, "
          f"median of {args.repeats} (ms per token position)")
    base = None
    for name, fn in cases.items():
        ms = _time(fn, args.repeats)
        base = base or ms
        print(f"  {name:<40} {ms:8.1f} ms   {base / ms:6.1f}x vs mlx gumbel")
    return 0


if __name__ == "__main__":
    sys.exit(main())
