"""SVG snapshots of the dashboard's main states (update with ``pytest --snapshot-update``)."""

import pytest

from .scenarios import SCENARIOS

SIZE = (160, 48)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_snapshot(name, make_app, snap_compare):
    scenario = SCENARIOS[name]
    app = make_app(*scenario.options, **scenario.config)
    assert snap_compare(app, terminal_size=SIZE, run_before=scenario.prepare)
