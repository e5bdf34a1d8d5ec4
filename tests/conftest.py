import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# Keep MLX/BLAS from oversubscribing the 2-core CI machine when tests run side by side.
os.environ.setdefault("OMP_NUM_THREADS", "2")


@pytest.fixture
def root() -> Path:
    return ROOT


def pytest_report_header(config):
    from grpo_tui.protocol.blas import active_blas, describe

    import mlx.core  # noqa: F401  (active_blas inspects the loaded MLX)

    return f"blas: {describe(active_blas())}"
