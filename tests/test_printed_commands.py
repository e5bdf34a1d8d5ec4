"""Every command the program tells a user to type is run, exactly as printed.

Each scenario makes the real CLI print its message (``grpo-tui worker --plain``, ``grpo-tui run`` in a
terminal, ``init``, ``attach``), takes the command out of the actual output, types it into a shell in
the folder the user was in (a folder whose name has a space, so an unquoted path shows), and checks
that it does what the message promised. A command that opens the dashboard runs in a
pseudo-terminal; the run it starts is ended once its run.jsonl shows the promised effect.

The table (message → where the program prints it → what the command must do):

| message | printed by | the command must |
|---|---|---|
| NaN stop | worker, NaN guard | resume from the last good checkpoint with the lower rate |
| resume = latest passed over an emergency checkpoint | worker, start | resume from the emergency checkpoint |
| damaged store | worker, start | go on with a fresh store / train without one |
| damaged checkpoint named by checkpoint.resume | worker, start; check (common/resume_check.py) | start again from step 0 |
| checkpoint of the other kind (LoRA/full) or of another model | worker, start; check (common/resume_check.py) | start again from step 0: the damaged checkpoint's command, made by the same `resume_command` |
| run --detach | cli | attach to the run |
| a run is already going | cli (run) | attach to that run |
| d (detach) in the dashboard | dashboard, on exit | attach again |
| init | cli | train the starter run (dashboard and headless) |
| init into a folder that is not empty | cli | write the starter run |
| init --from-mlx-node | cli (tui/from_mlx_node.py) | check the converted config; train it; convert into a new folder |
| attach with no live run here | cli | list the runs |
| a key that cannot change live | cli (`grpo-tui set`; common/live_settings.py) | fork the run with that key changed; resume the stopped run with it |
| set, fork or compare on a folder that is no live run / no run | cli (tui/live_settings_command.py, tui/fork.py, tui/compare.py) | list the runs |
| a tracker that is not installed | worker, trackers | pip: install what provides it |
| attach --web without textual-serve | cli (web) | pip: install what provides it |
| the reference BLAS (slow) on x86-64 Linux | worker, start (common/blas.py, blas_warning.py) | pip: install MKL |
"""

from __future__ import annotations

import json
import platform
import re
import sys
from pathlib import Path

import pytest

from grpo_tui.protocol import control as c
from grpo_tui.protocol import messages as m
from tests.helpers.printed import Terminal, commands, frame, frames, shell, the_command, wait_for
from tests.helpers.trainer_env import HOOK, fake_trainer_env
from tests.helpers.worker_harness import FAULTY_TRAINER, tiny_model, write_config, write_dataset

__all__ = ["tiny_model"]  # the fixture, imported for pytest

pytestmark = pytest.mark.slow


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The user's folder: a space in its name, so a printed path that is not quoted fails."""
    folder = tmp_path / "my runs"
    folder.mkdir()
    return folder


def config_in(home: Path, model: Path, **sections: dict) -> Path:  # type: ignore[type-arg]
    sections.setdefault("training", {}).update(silent_patience=0)  # the tiny model's groups tie
    return write_config(home, model, **sections)


def resumes_at(terminal: Terminal, out: Path, step: int, since: int) -> dict:  # type: ignore[type-arg]
    """The command ran the run again from ``step``: its run.jsonl says so, then a step after it."""
    resumed = wait_for(lambda: frame(out, "resume_state", since), 90, f"a resume in {out}\n{terminal.text()[-2000:]}")
    assert resumed["step"] == step, resumed
    wait_for(lambda: any(f.get("type") == "step" and f["step"] == step + 1 for f in frames(out)[since:]), 90,
             f"step {step + 1}")
    return resumed


def test_the_nan_stops_resume_commands(home, tiny_model):
    config_in(home, tiny_model, training={"nan_patience": 2, "max_steps": 6, "learning_rate": 1e-2})
    out = home / "out"
    faulty = {**fake_trainer_env(FAULTY_TRAINER), "FAKE_SKIP_STEPS": "3,4"}
    stopped = shell("grpo-tui worker config.toml --plain", home, **faulty)
    assert stopped.returncode == 3, stopped.stdout + stopped.stderr
    nan_command = the_command(stopped.stdout + stopped.stderr, "grpo-tui run")
    assert "training.learning_rate=0.001" in nan_command

    # resume = latest never picks the emergency checkpoint; its log line says how to anyway
    latest = shell("grpo-tui worker config.toml --plain --set training.max_steps=5", home)
    assert latest.returncode == 0, latest.stdout + latest.stderr
    emergency_command = the_command(latest.stdout + latest.stderr, "grpo-tui run")
    assert "emergency-4" in emergency_command

    # the NaN stop's command: the last good checkpoint, before the two bad steps, at the lower rate
    for command, step in ((nan_command, 2), (emergency_command, 4)):
        since = len(frames(out))
        terminal = Terminal(command, home)
        try:
            resumes_at(terminal, out, step, since)
            init = frame(out, "config", since)
            if command is nan_command:
                assert init is None or init["config"]["training"]["learning_rate"] == pytest.approx(1e-3)
        finally:
            terminal.end(out)


def test_the_damaged_stores_two_commands(home, tiny_model):
    config_in(home, tiny_model, training={"max_steps": 3})
    out = home / "out"
    out.mkdir()
    (out / "outputs.db").write_bytes(b"this is not a database, it was cut short by a full disk" * 40)
    refused = shell("grpo-tui worker config.toml --plain", home)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    fresh, without = (the_command(refused.stdout + refused.stderr, f"grpo-tui run config.toml --set store.{key}")
                      for key in ("if_damaged=fresh", "enabled=false"))
    for command in (fresh, without):
        since = len(frames(out))
        terminal = Terminal(command, home)
        try:
            wait_for(lambda: any(f.get("type") == "step" for f in frames(out)[since:]), 90,
                     f"training after {command}\n{terminal.text()[-2000:]}")
        finally:
            terminal.end(out)
    assert list(out.glob("outputs.damaged-*.db")), "the damaged store is kept beside the fresh one"


def test_a_damaged_checkpoints_start_again_command(home, tiny_model):
    config_in(home, tiny_model, training={"max_steps": 2})
    out = home / "out"
    first = shell("grpo-tui worker config.toml --plain", home)
    assert first.returncode == 0, first.stderr
    weights = next((out / "final").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100])  # a copy cut short
    refused = shell("grpo-tui worker config.toml --plain --resume out/final", home)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    command = the_command(refused.stdout + refused.stderr, "grpo-tui run")
    since = len(frames(out))
    terminal = Terminal(command, home)
    try:
        wait_for(lambda: any(f.get("type") == "step" for f in frames(out)[since:]), 90, "training again")
        assert frame(out, "resume_state", since) is None  # from step 0
        assert [f["step"] for f in frames(out)[since:] if f.get("type") == "step"][0] == 1
    finally:
        terminal.end(out)


def test_the_attach_commands_of_a_run_in_the_background(home, tiny_model):
    config_in(home, tiny_model, training={"max_steps": 100000, "num_epochs": 20000}, checkpoint={"save_every": 0})
    out = (home / "out").resolve()
    started = shell("grpo-tui run config.toml --detach", home)
    assert started.returncode == 0, started.stderr
    from grpo_tui.tui.launcher import adopt

    record = c.read_record(out)
    assert record is not None
    adopt(record.pid)  # ended by the autouse fixture if this test fails half-way
    viewer = Terminal(the_command(started.stdout, "grpo-tui attach"), home)
    try:
        wait_for(lambda: (r := c.read_record(out)) is not None and r.viewers == 1, 60, "the attached viewer")
        wait_for(lambda: "grpo-tui" in viewer.text(), 60, "the dashboard")
        busy = shell("grpo-tui run config.toml --detach", home)  # a second start: the run is going already
        assert busy.returncode == 2, busy.stdout + busy.stderr
        again_run = shell("grpo-tui run config.toml", home)  # refused the same way, before any dashboard opens
        assert again_run.returncode == 2 and again_run.stderr == busy.stderr and again_run.stdout == ""
        assert again_run.stderr.count("\n") == 1, again_run.stderr
        second = Terminal(the_command(again_run.stderr, "grpo-tui attach"), home)
        wait_for(lambda: (r := c.read_record(out)) is not None and r.viewers == 2, 60, "a second viewer")
        second.type("d")  # detach: this dashboard closes, the run goes on
        second.proc.wait(30)
        # the dashboard has exited; its last line can still be on its way through the terminal
        wait_for(lambda: any(cmd.startswith("grpo-tui attach") for cmd in commands(second.text())), 30,
                 "the attach command printed on detach")
        again = the_command(second.text(), "grpo-tui attach")
        second.end()
        third = Terminal(again, home)
        wait_for(lambda: (r := c.read_record(out)) is not None and r.viewers == 2, 60, "the viewer attached again")
        third.end()
    finally:
        viewer.end(out)


def test_the_resume_command_of_a_key_that_cannot_change_live(home, tiny_model):
    config_in(home, tiny_model, training={"max_steps": 100000, "num_epochs": 20000}, checkpoint={"save_every": 0})
    out = (home / "out").resolve()
    started = shell("grpo-tui run config.toml --detach", home)
    assert started.returncode == 0, started.stderr
    from grpo_tui.tui.launcher import adopt
    from tests.helpers.viewer import Viewer

    record = c.read_record(out)
    assert record is not None
    adopt(record.pid)
    viewer = Viewer(out)
    viewer.wait_for(m.Step)
    viewer.send(m.SaveCheckpoint())  # the fork starts from the latest checkpoint
    saved = viewer.wait_for(m.Checkpoint)
    refused = shell("grpo-tui set out training.batch_size=4", home)
    assert refused.returncode == 2 and "cannot change in a live run" in refused.stderr, refused.stderr
    fork = Terminal(the_command(refused.stderr, "grpo-tui fork"), home)  # the parent goes on meanwhile
    child = out.with_name(f"out-fork-{saved.step}")
    try:
        resumes_at(fork, child, saved.step, 0)
        assert frame(child, "init")["config"]["training"]["batch_size"] == 4
    finally:
        fork.end(child)
    command = the_command(refused.stderr, "grpo-tui run")
    viewer.send(m.Stop())
    stopped = viewer.wait_for(m.Complete)
    wait_for(lambda: not c.is_live(c.read_record(out)), 60, "the run's end")
    for said in (shell("grpo-tui set out training.learning_rate=1e-3", home), shell("grpo-tui fork data.jsonl", home),
                 shell("grpo-tui compare out data.jsonl", home)):
        assert said.returncode == 2, said.stderr
        listed = shell(the_command(said.stderr, "grpo-tui ls"), home)
        assert listed.returncode == 0 and "out" in listed.stdout, listed.stderr
    since = len(frames(out))
    terminal = Terminal(command, home)
    try:
        resumes_at(terminal, out, stopped.total_steps, since)
        assert frame(out, "init", since)["config"]["training"]["batch_size"] == 4
    finally:
        terminal.end(out)


def test_the_init_from_mlx_node_commands(home, tiny_model):
    (home / "mlx node.json").write_text(json.dumps({"modelPath": str(tiny_model), "maxNewTokens": 8, "batchSize": 2}))
    write_dataset(home / "rows.jsonl")
    written = shell("grpo-tui init --from-mlx-node 'mlx node.json' 'from mlx' --data rows.jsonl", home)
    assert written.returncode == 0, written.stderr
    checked = shell(the_command(written.stdout, "grpo-tui check"), home)
    assert checked.returncode == 0, checked.stderr
    out = home / "from mlx" / "runs" / "grpo"
    terminal = Terminal(the_command(written.stdout, "grpo-tui run") + " --set training.max_steps=1", home)
    try:
        wait_for(lambda: any(f.get("type") == "step" for f in frames(out)), 120, f"a step\n{terminal.text()[-2000:]}")
    finally:
        terminal.end(out)
    busy = shell("grpo-tui init --from-mlx-node 'mlx node.json' 'from mlx' --data rows.jsonl", home)
    assert busy.returncode == 2 and "already exists" in busy.stderr
    again = shell(the_command(busy.stderr, "grpo-tui init"), home)
    assert again.returncode == 0, again.stderr
    assert "rows.jsonl" in (home / "DIR" / "config.toml").read_text()


def test_the_init_commands(home):
    written = shell("grpo-tui init math 'my starter'", home)
    assert written.returncode == 0, written.stderr
    dashboard = the_command(written.stdout, "grpo-tui run")
    headless = the_command(written.stdout, "grpo-tui worker")
    trainer = Terminal(headless, home)  # it trains: its first step, then ctrl+c (a clean stop)
    wait_for(lambda: "step 1/" in trainer.text(), 120, f"the first step\n{trainer.text()[-2000:]}")
    trainer.type("\x03")
    assert trainer.proc.wait(60) == 4  # stopped by the user, after a checkpoint
    trainer.end()

    out = next(p.parent for p in (home / "my starter").rglob("run.jsonl"))
    since = len(frames(out))
    terminal = Terminal(dashboard + " --set checkpoint.resume=false", home)  # the run as printed, again from step 0
    try:
        wait_for(lambda: any(f.get("type") == "step" for f in frames(out)[since:]), 90, "the dashboard's run")
    finally:
        terminal.end(out)

    busy = shell("grpo-tui init math 'my starter'", home)  # the folder is taken now
    assert busy.returncode == 2
    retry = shell(the_command(busy.stderr, "grpo-tui init"), home)
    assert retry.returncode == 0, retry.stderr
    assert next((home).glob("*/config.toml")).exists()

    nothing = shell("grpo-tui attach", home)  # no live run here: the message names the command that lists runs
    assert nothing.returncode == 2
    listed = shell(the_command(nothing.stderr, "grpo-tui ls"), home)
    assert listed.returncode == 0 and "my starter" in listed.stdout, listed.stdout + listed.stderr


def installed(distribution: str) -> bool:
    from importlib.metadata import PackageNotFoundError, version

    try:
        version(distribution)
    except PackageNotFoundError:
        return False
    return True


def assert_pip_command_installs(command: str, home: Path, provides: str) -> None:
    """Run a printed ``pip install`` with the package index unreachable: pip reads the command and
    looks for the distribution that provides the missing module (already there: nothing to do)."""
    assert command.startswith("pip install "), command
    done = shell(command, home, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    said = done.stdout + done.stderr
    assert "does not provide the extra" not in said, said
    if installed(provides):
        assert done.returncode == 0 and f"Requirement already satisfied: {provides}" in said, said
    else:
        assert re.search(rf"No matching distribution found for {re.escape(provides)}\b", said), said


def test_a_missing_trackers_pip_command(home, tiny_model):
    tracker = "wandb"
    config_in(home, tiny_model, logging={"report_to": [tracker]})
    hidden = {"PYTHONPATH": str(HOOK), "GRPO_TUI_TEST_HIDE": tracker}
    refused = shell("grpo-tui worker config.toml --plain", home, **hidden)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert_pip_command_installs(the_command(refused.stdout + refused.stderr, "pip install"), home, tracker)


def test_the_web_views_pip_command(home, tiny_model):
    config_in(home, tiny_model, training={"max_steps": 1})
    assert shell("grpo-tui worker config.toml --plain", home).returncode == 0
    hidden = {"PYTHONPATH": str(HOOK), "GRPO_TUI_TEST_HIDE": "textual_serve"}
    refused = shell("grpo-tui attach out --web", home, **hidden)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert_pip_command_installs(the_command(refused.stderr, "pip install"), home, "textual-serve")


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.machine() != "x86_64",
                    reason="MKL's command is printed on x86-64 Linux (elsewhere apt's OpenBLAS, or nothing on macOS)")
def test_the_slow_blas_pip_command(home, tiny_model):
    config_in(home, tiny_model, training={"max_steps": 1}, runtime={"blas": "off"}, checkpoint={"save_every": 0})
    slow = shell("grpo-tui worker config.toml --plain", home, LD_PRELOAD="")  # on the wheel's reference BLAS
    said = slow.stdout + slow.stderr
    assert slow.returncode == 0, said
    warning = next(line for line in said.splitlines() if "slow BLAS" in line)
    assert warning.startswith("[warning]"), said
    assert_pip_command_installs(the_command(said, "pip install"), home, "mkl")  # said twice (BLAS line, warning): one


def test_every_command_printed_in_source_is_in_this_table():
    """A new message with a command must come with its row here: the sources that format one."""
    root = Path(__file__).resolve().parent.parent
    printing = set()
    for folder in ("worker", "tui", "protocol", "common", "api"):
        for file in (root / folder).rglob("*.py"):
            text = file.read_text()
            if re.search(r"run_command\(|resume_command\(|pip_install\(|(?<!`)`(?:grpo-tui|pip|python) |Attach(?: again)?: grpo-tui", text):
                printing.add(str(file.relative_to(root)))
    assert printing <= KNOWN_PRINTERS, printing - KNOWN_PRINTERS


KNOWN_PRINTERS = {
    "worker/checkpoint_files.py", "worker/start.py", "worker/nan_stop.py", "worker/trackers.py", "tui/cli.py",
    "tui/app.py", "tui/launcher.py", "tui/web.py", "tui/init_templates.py", "common/blas.py",
    "common/blas_warning.py", "common/install_hint.py", "common/commands.py", "common/resume_check.py",
    "common/live_settings.py", "tui/live_settings_command.py", "tui/fork.py", "tui/compare.py",
    "tui/closing.py",  # the dashboard's last lines: test_the_commands_printed_when_the_dashboard_closes
    "worker/live_settings.py",  # a comment naming `grpo-tui set`, not a command to run
    # not a command to run: the header of the config file GRPOTrainer writes names the commands that
    # read it (no path: the file is the one it is in); a comment
    "api/trainer.py", "api/run_files.py", "tui/supervisor.py", "tui/from_mlx_node.py",
}


def test_the_commands_printed_when_the_dashboard_closes(home, tiny_model):
    """Every ending prints how the run ended, its exit code and folder, and what to type next: here
    a stop (q, y), whose resume and browse commands are run as printed."""
    config_in(home, tiny_model, training={"max_steps": 100000, "num_epochs": 20000})
    out = (home / "out").resolve()
    first = Terminal("grpo-tui run config.toml", home)
    try:
        wait_for(lambda: any(f.get("type") == "step" and f["step"] >= 2 for f in frames(out)), 120, "two steps")
        first.type("q")
        wait_for(lambda: "leave it running" in first.text(), 30, "the quit dialog")
        first.type("y")
        assert first.proc.wait(120) == 4  # stopped by the user
        wait_for(lambda: "Browse its steps" in first.text(), 30, f"the closing lines\n{first.text()[-2000:]}")
        text = first.text()
    finally:
        first.end(out)
    stopped = [f for f in frames(out) if f.get("type") == "complete"][-1]
    assert f"Run stopped at step {stopped['total_steps']}/" in text and "(exit code 4)" in text
    assert f"Run folder: {out}" in text
    since = len(frames(out))
    resume = Terminal(the_command(text, "grpo-tui run"), home)
    try:
        resumes_at(resume, out, stopped["total_steps"], since)
    finally:
        resume.end(out)
    browse = Terminal(the_command(text, "grpo-tui browse"), home)
    try:
        wait_for(lambda: "outputs.db" in browse.text(), 60, f"the run's store\n{browse.text()[-2000:]}")
    finally:
        browse.end()
