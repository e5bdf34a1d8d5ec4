"""``grpo-tui doctor`` and ``compare`` on a store with a missing table or rows that are not what
grpo-tui writes: one sentence naming the store, exit 2, no traceback (issue 57.8)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.run_folders import write_run

DAMAGE = {
    "no steps table": "DROP TABLE steps",
    "no generations table": "DROP TABLE generations",
    "no setting_changes table": "DROP TABLE setting_changes",
    "a reward that is text": "UPDATE steps SET reward = 'abc', loss = x'00ff' WHERE step = 2",
    "a change that is not JSON": "INSERT INTO setting_changes (run_id, step, key, old, new, source, created_at) "
                                 "VALUES (1, 2, 'generation.temperature', '1.0', '{bad', 'cli', 0)",
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_doctor_and_compare_on_a_damaged_store_say_one_sentence(tmp_path, damage):
    whole = write_run(tmp_path / "whole", "whole", [0.1, 0.2, 0.3])
    folder = write_run(tmp_path / "damaged", "damaged", [0.1, 0.2, 0.3])
    with sqlite3.connect(folder / "outputs.db") as conn:
        conn.execute(DAMAGE[damage])
    for command in (["doctor", str(folder)], ["compare", str(whole), str(folder)]):
        done = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", *command], capture_output=True, text=True,
                              timeout=60)
        assert "Traceback" not in done.stderr, done.stderr
        if done.returncode in (0, 10, 11):  # what it needs was whole: it reported
            continue
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(f"grpo-tui: {folder / 'outputs.db'}: ") and "damaged" in done.stderr
