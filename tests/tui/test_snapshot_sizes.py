"""SVG snapshots of the running screen, the Database tab and the Charts tab at 80x24, 120x40 and
200x50 (update with ``pytest --snapshot-update``)."""

import pytest

from .db.conftest import utc  # noqa: F401 (autouse: the Database tab shows local times)
from .sized_scenarios import SIZED, SIZES, OPTIONS


@pytest.mark.parametrize("size", sorted(SIZES))
@pytest.mark.parametrize("name", sorted(SIZED))
def test_snapshot(name, size, tmp_path, make_app, snap_compare):
    scenario = SIZED[name]
    scenario.before(tmp_path)
    app = make_app(*OPTIONS)
    assert snap_compare(app, terminal_size=SIZES[size], run_before=scenario.prepare)
