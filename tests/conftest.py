import collections
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
    groups: dict[str, str] = {}
    slow: set[str] = set()
    for item in items:
        ranks = item.get_closest_marker("ranks") is not None or "distributed" in item.path.parts
        groups[item.nodeid] = group = "ranks" if ranks else item.path.relative_to(ROOT).as_posix()
        item.add_marker(pytest.mark.xdist_group(group))
        if item.get_closest_marker("slow") is not None:
            slow.add(group)
    # xdist hands out whole groups in the order of their first test (its own reordering, by number of
    # tests, is off: tests/helpers/parallel.py). The longest first, then those with a slow test, then
    # the rest by number of tests, so that no worker starts a long one while the others run out of work.
    longest = {name: i for i, name in enumerate(LONGEST_GROUPS)}
    sizes = collections.Counter(groups.values())

    def order(item: pytest.Item) -> tuple[int, bool, int, str]:
        group = groups[item.nodeid]
        return longest.get(group, len(longest)), group not in slow, -sizes[group], group

    items.sort(key=order)


# The groups that take longest, longest first (measured one folder at a time; bench/README.md, "The
# test suite"): the every-key table, the rank launches, the doctor's quiet runs, the mistakes' matrix,
# the files of many worker runs, the printed commands, mypy and the SIGKILL moments.
LONGEST_GROUPS = (
    "tests/tui/test_global_keys.py", "ranks", "tests/worker/test_doctor_quiet.py", "tests/faults/test_user_mistakes.py",
    "tests/worker/test_worker_process.py", "tests/worker/test_environments.py", "tests/tui/test_init_templates.py",
    "tests/worker/test_nothing_lost.py", "tests/test_printed_commands.py", "tests/test_types.py", "tests/tui/test_app.py",
    "tests/worker/test_doctor_runs.py", "tests/worker/test_resume.py", "tests/tui/db/test_db_browse_app.py",
    "tests/worker/test_algorithms.py", "tests/tui/test_long_runs.py", "tests/faults/test_kills.py",
    "tests/worker/test_live_settings.py", "tests/worker/test_training_features.py", "tests/worker/test_trackers.py",
)


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
