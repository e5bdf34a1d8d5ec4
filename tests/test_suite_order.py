"""The README's test command hands the longest groups of tests out first (tests/conftest.py's
LONGEST_GROUPS, in the order tests/helpers/parallel.py keeps), so that no xdist worker starts a long
file while the other runs out of work."""

import subprocess
import sys
from pathlib import Path

from tests.helpers.parallel import XDIST

ROOT = Path(__file__).resolve().parent.parent


def test_a_long_group_of_few_tests_starts_before_a_short_group_of_many():
    # test_types.py (mypy) is a long group; the two quick tests of test_layout.py chosen here outnumber
    # its one: pytest-xdist's own reordering, by number of tests, would start test_layout.py first
    args = [arg if arg != "auto" else "1" for arg in XDIST]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args, "-v", "-p", "no:cacheprovider", "tests/test_layout.py",
         "tests/test_types.py", "-k", "test_link_tree_points_at_the_packages or test_protocol_depends or test_common_depends"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    ran = [line.split()[-1].split("@")[0] for line in done.stdout.splitlines() if " PASSED " in line]
    assert len(ran) > 2 and ran[0] == "tests/test_types.py::test_link_tree_points_at_the_packages", done.stdout[-3000:]
