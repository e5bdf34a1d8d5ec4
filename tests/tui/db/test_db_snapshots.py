"""SVG snapshots of the Database view (update with ``pytest tests/tui/db --snapshot-update``)."""

import pytest

from .scenes import SCENES, SIZE, make_app


@pytest.mark.parametrize("name", sorted(SCENES))
def test_snapshot(name, tmp_path, monkeypatch, snap_compare):
    monkeypatch.chdir(tmp_path)
    assert snap_compare(make_app(tmp_path), terminal_size=SIZE, run_before=SCENES[name])
