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
    from grpo_tui.common.blas import active_blas, describe

    import mlx.core  # noqa: F401  (active_blas inspects the loaded MLX)

    return f"blas: {describe(active_blas())}"


def pytest_collection_modifyitems(config, items):
    """The real-model demo (``smollm2``) needs a 98 MB download: it runs only when ``-m`` names it."""
    if "smollm2" in (config.getoption("-m") or ""):
        return
    chosen = [item for item in items if item.get_closest_marker("smollm2") is None]
    if len(chosen) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in chosen])
        items[:] = chosen


@pytest.fixture(autouse=True)
def _end_supervisors():
    """A test that leaves its dashboard leaves the run going (as a user's would): end the supervisors
    this test started, and their workers, so nothing outlives the test."""
    from grpo_tui.tui.launcher import end_started

    yield
    end_started(timeout=0)
