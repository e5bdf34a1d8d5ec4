"""A run folder is its owner's (docs/security.md, "The run folder"; issue 57.2): an output folder that
another local user owns or may write to is refused before anything is written, and a file of the run
that is a planted link is never written through, by ``grpo-tui worker --plain`` and ``run --detach``
alike."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.mistake_cases import ROOT, write_run
from tests.helpers.other_user import give_to_nobody

VICTIM = "the owner's notes\n"


def grpo_tui(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", *args], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})}, cwd=ROOT)


def planted(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(config, output folder, the owner's file) with ``run.jsonl`` in the folder a link to that file."""
    config = write_run(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "notes.txt"
    victim.write_text(VICTIM)
    (out / "run.jsonl").symlink_to(victim)
    return config, out, victim


@pytest.mark.parametrize("how", [["worker", "--plain"], ["run", "--detach"]])
def test_a_folder_of_another_user_is_refused_and_its_link_never_written_through(tmp_path, how):
    config, out, victim = planted(tmp_path)
    give_to_nobody(out / "run.jsonl")
    give_to_nobody(out)
    done = grpo_tui(how[0], str(config), *how[1:])
    both = done.stdout + done.stderr
    assert done.returncode == 2, both[-2000:]
    assert f"checkpoint.output_dir: {out} belongs to another user (nobody), who could plant links in it" in both
    assert "Traceback" not in both
    assert victim.read_text() == VICTIM
    assert sorted(p.name for p in out.iterdir()) == ["run.jsonl"]  # nothing written there


def test_a_link_in_your_own_folder_is_refused_not_followed(tmp_path):
    config, out, victim = planted(tmp_path)
    done = grpo_tui("worker", str(config), "--plain")
    both = done.stdout + done.stderr
    assert done.returncode == 2, both[-2000:]
    assert f"{out / 'run.jsonl'} is a link; a run never writes through a link" in both
    assert "Traceback" not in both and victim.read_text() == VICTIM


def test_a_folder_every_user_may_write_is_refused_unless_shared_is_said(tmp_path):
    config = write_run(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o1777)  # as /tmp itself
    done = grpo_tui("check", str(config))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"checkpoint.output_dir: {out} can be written by other users (mode 1777)" in done.stdout + done.stderr
    shared = grpo_tui("check", str(config), env={"GRPO_TUI_SHARED_OUTPUT": "1"})
    assert "can be written by other users" not in shared.stdout + shared.stderr


def test_run_detach_into_a_folder_where_a_plain_worker_trains_is_refused(tmp_path):
    """Issue 57.13: it said "Training in the background" and then went on from the other run's
    final checkpoint with its own config."""
    import time

    from grpo_tui.tui.launcher import worker_holds

    config = write_run(tmp_path, training={"max_steps": 100_000, "seed": 0})
    out = tmp_path / "out"
    worker = subprocess.Popen([sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(config), "--plain"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while not worker_holds(out):
            assert time.monotonic() < deadline and worker.poll() is None, "the worker never took its folder"
            time.sleep(0.2)
        done = grpo_tui("run", str(config), "--detach")
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"a worker is already training in {out} (started without a supervisor" in done.stderr
        assert "Training in the background" not in done.stdout and not (out / ".control" / "supervisor.json").exists()
    finally:
        worker.terminate()
        worker.wait(timeout=60)
