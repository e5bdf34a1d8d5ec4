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


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """The real-model demo (``smollm2``) needs a 98 MB download: it runs only when ``-m`` names it.
    Under xdist (tests/helpers/parallel.py) each file is one group, and every test that launches
    ranks is in the ``ranks`` group."""
    if "smollm2" not in (config.getoption("-m") or ""):
        chosen = [item for item in items if item.get_closest_marker("smollm2") is None]
        if len(chosen) != len(items):
            config.hook.pytest_deselected(items=[item for item in items if item not in chosen])
            items[:] = chosen
    for item in items:
        ranks = item.get_closest_marker("ranks") is not None or "distributed" in item.path.parts
        item.add_marker(pytest.mark.xdist_group("ranks" if ranks else item.path.relative_to(ROOT).as_posix()))
    # the longest files first, so that no worker starts one of them while the others run out of work
    heavy = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: heavy.get(item.path.relative_to(ROOT).as_posix(), len(heavy)))


# The files that take longest (each a few minutes on two cores: the every-key table, the mistakes'
# matrix, the SIGKILL moments, mypy, the doctor's quiet runs, the printed commands).
LONGEST_FILES = ("tests/tui/test_global_keys.py", "tests/faults/test_user_mistakes.py", "tests/faults/test_kills.py",
                 "tests/test_printed_commands.py", "tests/worker/test_doctor_quiet.py", "tests/test_types.py")


def pytest_xdist_auto_num_workers(config):
    """One worker per core, at most four: each test may start a worker process of its own."""
    return max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 4))


@pytest.fixture(autouse=True)
def _end_supervisors():
    """A test that leaves its dashboard leaves the run going (as a user's would): end the supervisors
    this test started, and their workers, so nothing outlives the test."""
    from grpo_tui.tui.launcher import end_started

    yield
    end_started(timeout=0)
