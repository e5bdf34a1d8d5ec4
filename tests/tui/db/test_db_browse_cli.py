"""``grpo-tui browse`` refuses files it can't show with one clear sentence and a non-zero exit."""

import sqlite3
import subprocess
import sys

import pytest

from grpo_tui.protocol.schema import SCHEMA_VERSION, migrate


def browse(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "browse", str(path)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def not_sqlite(tmp_path):
    p = tmp_path / "notes.db"
    p.write_text("just some notes\n" * 200)
    return p


def other_sqlite(tmp_path):
    p = tmp_path / "other.db"
    sqlite3.connect(p).execute("CREATE TABLE songs (title TEXT)").connection.commit()
    return p


def newer_store(tmp_path):
    p = tmp_path / "future.db"
    c = sqlite3.connect(p, isolation_level=None)
    migrate(c)
    c.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    c.close()
    return p


@pytest.mark.parametrize("make, phrase", [
    (lambda tmp: tmp / "missing.db", "no such file"),
    (not_sqlite, "not an SQLite database"),
    (other_sqlite, "not a grpo-tui store"),
    (newer_store, f"store schema version {SCHEMA_VERSION + 1} is newer than this grpo-tui understands "
                  f"({SCHEMA_VERSION}); upgrade grpo-tui"),
], ids=["missing", "not-sqlite", "not-a-store", "newer-schema"])
def test_bad_file_one_sentence_nonzero_exit(tmp_path, make, phrase):
    path = make(tmp_path)
    out = browse(path)
    assert out.returncode != 0
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and phrase in lines[0] and lines[0].startswith("grpo-tui: "), out.stderr
    assert "Traceback" not in out.stderr


def test_a_run_folder_opens_its_store(tmp_path):
    run = tmp_path / "runs" / "x"
    run.mkdir(parents=True)
    out = browse(run)
    assert out.returncode == 2 and out.stderr == f"grpo-tui: {run}: a folder without outputs.db; name a run's output folder or its outputs.db.\n"
    newer_store(tmp_path).rename(run / "outputs.db")  # a store this version refuses: its path shows it was opened
    out = browse(run)
    assert out.returncode != 0 and str(run / "outputs.db") in out.stderr and "is newer than" in out.stderr, out.stderr
