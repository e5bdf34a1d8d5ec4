"""The mistakes a user makes on a first run, each through the real program, as the user meets them.

The CLI half runs ``grpo-tui worker CONFIG --plain`` and asserts the exact sentence (once), the exit
code (2: a fixable mistake, ``protocol/outcome.py``), no traceback anywhere on the terminal, and the
traceback in the run's log where there is one. ``grpo-tui check`` finds the cases marked ``check``
with the same sentence, without training. The dashboard half runs every case through the real
dashboard with the real worker (Pilot) and asserts that the mistake's modal shows the sentence and
that nothing restarts. Both halves take their cases from tests/helpers/mistake_cases.py; most are
caught before the model loads, so the suite stays fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from grpo_tui.common import distributed
from grpo_tui.protocol.config import ConfigError, load_config
from grpo_tui.protocol.layout import RUN_LOG_FILE
from tests.helpers.mistake_cases import CASES, ROOT, ROWS, TINY, Case, Setup, custom_reward, jsonl, write_checkpoint, write_run

PREFIXES = ("[mistake] ", "grpo-tui: config error: ", "grpo-tui: ")


@pytest.fixture
def build(tmp_path: Path) -> Iterator[Callable[[Case], Setup]]:
    """``case.build`` in the test's folder; what it set up (a lock, a read-only mount) is undone after."""
    made: list[Setup] = []

    def make(case: Case) -> Setup:
        made.append(case.build(tmp_path))
        return made[-1]

    yield make
    for setup in made:
        for undo in reversed(setup.undo):
            undo()


def grpo_tui(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``grpo-tui ARGS`` as a user types it (the console script's entry point, this interpreter)."""
    return subprocess.run(
        [sys.executable, "-m", "grpo_tui.tui.cli", *args], capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})}, cwd=ROOT,
    )  # fmt: skip


def said(output: str) -> list[str]:
    """The lines of the terminal, each without the prefix that says who speaks."""
    lines = []
    for line in output.splitlines():
        for prefix in PREFIXES:
            if line.startswith(prefix):
                line = line[len(prefix):]
                break
        lines.append(line)
    return lines


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_mistake_is_one_sentence_exit_2_and_no_traceback(tmp_path, case, build):
    setup = build(case)
    log = Path(load_config(setup.config).checkpoint.output_dir) / RUN_LOG_FILE if _loads(setup) else None
    before = log.stat().st_size if log is not None and log.is_file() else 0
    done = grpo_tui("worker", str(setup.config), "--plain", *setup.args, env=setup.env)
    both = done.stdout + done.stderr
    sentence = case.sentence(tmp_path)
    assert done.returncode == case.code, both[-3000:]
    assert said(both).count(sentence) == 1, both[-3000:]
    assert "Traceback" not in both and 'File "' not in both
    if log is not None and log.is_file() and log.stat().st_size > before:  # the run's log keeps the traceback
        with open(log, "rb") as f:
            f.seek(before)
            errors = [e for e in map(json.loads, f.read().splitlines()) if e.get("type") == "error" and e.get("fatal")]
        assert [e["message"] for e in errors] == [sentence]
        assert errors[0]["traceback"].startswith("Traceback (most recent call last)")


def test_a_worker_that_dies_through_os_exit_says_why_and_where_the_log_is(tmp_path):
    body = "import os, sys\ndef score(completions, **kw):\n    print('reward: giving up', file=sys.stderr, flush=True)\n    os._exit(7)\n"
    config = write_run(tmp_path, rewards=custom_reward(tmp_path, body))
    done = grpo_tui("worker", str(config), "--plain")
    assert done.returncode == 1  # a silent death is a crash (restarted by the dashboard)
    log = tmp_path / "out" / "run.jsonl"
    assert said(done.stderr)[-1] == (
        "the worker exited with code 7 during step 1 (scoring) without reporting why (a reward or tool function may "
        f"have called os._exit(), or native code crashed). Its last output: reward: giving up. The run's log: {log}"
    )


@pytest.mark.parametrize("code", [0, 1, 2, 3])
def test_an_exit_code_the_worker_did_not_say_is_a_death_not_an_outcome(tmp_path, code):
    """os._exit(0) would read as "done", 2 as a mistake, 3 as a NaN stop: without the worker's last
    frame (complete, or a fatal error) any exit code is a death with its sentence, exit 1."""
    body = f"import os, sys\ndef score(completions, **kw):\n    print('reward: bye', file=sys.stderr, flush=True)\n    os._exit({code})\n"
    config = write_run(tmp_path, rewards=custom_reward(tmp_path, body))
    done = grpo_tui("worker", str(config), "--plain")
    assert done.returncode == 1, done.stderr[-3000:]
    log = tmp_path / "out" / "run.jsonl"
    assert said(done.stderr)[-1] == (
        f"the worker exited with code {code} during step 1 (scoring) without reporting why (a reward or tool function may "
        f"have called os._exit(), or native code crashed). Its last output: reward: bye. The run's log: {log}"
    )


@pytest.mark.parametrize("code", [0, 3])
def test_ls_never_calls_a_worker_that_died_with_code_0_or_3_done(tmp_path, code):
    """Through the supervisor (`grpo-tui run --detach`): the record says crashed, with the sentence."""
    from grpo_tui.protocol import control as c

    body = f"import os\ndef score(completions, **kw):\n    os._exit({code})\n"
    config = write_run(tmp_path, rewards=custom_reward(tmp_path, body), display={"restart_on_crash": False})
    started = grpo_tui("run", str(config), "--detach")
    assert started.returncode == 0, started.stderr
    out = tmp_path / "out"
    for _ in range(600):
        record = c.read_record(out)
        if record is not None and record.status not in c.LIVE_STATUSES and not c.is_live(record):
            break
        time.sleep(0.1)
    assert record is not None and record.status == "crashed" and record.exit_code == 1, record
    assert record.reason.startswith(f"the worker exited with code {code} during step 1 (scoring) without reporting why")
    [row] = grpo_tui("ls", str(tmp_path)).stdout.splitlines()[1:]
    assert row.split()[:2] == ["crashed", "0/2"]


def test_a_config_saved_with_a_bom_loads(tmp_path):
    config = write_run(tmp_path)
    config.write_bytes(b"\xef\xbb\xbf" + config.read_bytes())
    done = grpo_tui("check", str(config))
    assert done.returncode == 0 and done.stdout.startswith(f"# {config}: valid."), done.stderr


def _loads(setup: Setup) -> bool:
    try:
        load_config(setup.config)
        return True
    except ConfigError:
        return False


def test_check_piped_into_head_ends_quietly(tmp_path):
    config = write_run(tmp_path)
    done = subprocess.run(f"{sys.executable} -m grpo_tui.tui.cli check {config} | head -1", shell=True,
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.stdout == f"# {config}: valid. Resolved config:\n"
    assert done.stderr == ""  # no BrokenPipeError traceback
    gone = subprocess.run(f"{sys.executable} -m grpo_tui.tui.cli check {config} | true", shell=True,
                          capture_output=True, text=True, timeout=60, cwd=ROOT)  # a reader gone before the first line
    assert gone.stderr == "" and gone.returncode == 0


@pytest.mark.parametrize("case", [c for c in CASES if c.check], ids=lambda c: c.id)
def test_check_says_what_the_worker_would_stop_on_before_training(tmp_path, case, build):
    setup = build(case)
    before = sorted(tmp_path.rglob("*"))
    done = grpo_tui("check", str(setup.config), env=setup.env)
    assert done.returncode == 2 and said(done.stderr) == [case.sentence(tmp_path)], done.stderr
    assert sorted(tmp_path.rglob("*")) == before  # nothing created, moved or set aside


def test_check_resumes_a_checkpoint_of_the_same_model_and_kind(tmp_path):
    """The identity ``check`` computes for model.path is the one the worker records in checkpoints."""
    from grpo_tui.worker.engine.models.model_source import identity

    write_checkpoint(tmp_path, "model.safetensors", identity(str(TINY)))
    done = grpo_tui("check", str(write_run(tmp_path)))
    assert done.returncode == 0 and done.stdout.startswith("# "), done.stderr


def test_check_says_a_batch_cannot_be_dealt_out_to_the_configured_ranks(tmp_path):
    config = write_run(tmp_path, distributed={"ranks": 2})
    done = grpo_tui("check", str(config))
    assert done.returncode == 2 and said(done.stderr) == [
        "training.gradient_accumulation_steps: 1 micro-batches cannot be dealt out evenly to 2 ranks (the micro-batch "
        "is the unit of distribution; use a multiple of the rank count)"], done.stderr


# The dashboard half, through the real dashboard and the real worker, as `grpo-tui run` starts them.
# A config that does not load, a --resume that names nothing and an output folder that cannot hold
# the run are refused by `run` before the dashboard opens; the rest reach the worker, whose fatal
# error frame (the sentence the CLI half checks for every case) the mistake's modal shows. That way
# is one for every case, so these cases take each turn of it: refused by `run`, and the worker's
# stop at its config, model, data, reward file, a reward while scoring, a tool, the output folder,
# the ranks, the memory budget and a resume; every case's sentence goes through the modal below.
THROUGH_THE_DASHBOARD = ("unknown-key", "output-is-a-file", "reused-generation-with-dynamic-sampling",
                         "model-weights-truncated", "no-prompt-column", "reward-import-fails", "reward-wrong-count",
                         "tool-no-type-hints", "output-locked", "ranks-batch-not-dealt-out", "memory-budget-too-small",
                         "resume-damaged-checkpoint")


def test_the_mistake_modal_shows_every_cases_sentence_whole(tmp_path):
    from textual.app import App
    from textual.widgets import Static

    from grpo_tui.tui.screens.crash import MistakeScreen

    async def show_all() -> list[str]:
        missing = []
        async with App().run_test(size=(120, 40)) as pilot:
            for case in CASES:
                folder = tmp_path / case.id
                folder.mkdir()
                setup = case.build(folder)  # some sentences name what was built (a file's size)
                for undo in reversed(setup.undo):
                    undo()
                sentence = case.sentence(folder)
                await pilot.app.push_screen(MistakeScreen(sentence))
                shown = " ".join(str(pilot.app.screen.query_one("#mistake-text", Static).render()).split())
                if " ".join(sentence.split()) not in shown or "Traceback" in shown:
                    missing.append(case.id)
                pilot.app.pop_screen()
        return missing

    import asyncio

    assert asyncio.run(show_all()) == []


@pytest.mark.parametrize("case", [c for c in CASES if c.id in THROUGH_THE_DASHBOARD], ids=lambda c: c.id)
async def test_the_dashboard_shows_the_sentence_and_never_restarts(tmp_path, case, build, monkeypatch, capsys):
    from textual.widgets import Static

    from grpo_tui.tui import cli
    from grpo_tui.tui.app import GrpoApp
    from grpo_tui.tui.screens.crash import CrashScreen, MistakeScreen

    setup = build(case)
    for key, value in setup.env.items():
        monkeypatch.setenv(key, value)
    sentence = case.sentence(tmp_path)
    args = cli.build_parser().parse_args(["run", str(setup.config), *setup.args])
    config = cli.runnable(args)
    if config is None:  # `grpo-tui run` says it and opens nothing
        assert cli.main(["run", str(setup.config), *setup.args]) == 2
        assert said(capsys.readouterr().err).count(sentence) == 2  # once from each call
        return
    from grpo_tui.tui.launcher import live_run

    if live_run(config.checkpoint.output_dir) is not None:  # a run already lives there: said, nothing opens
        assert cli.main(["run", str(setup.config), *setup.args]) == 2
        lines = said(capsys.readouterr().err)  # one sentence naming the folder and the key that moves the run
        assert len(lines) == 1 and str(config.checkpoint.output_dir) in lines[0] and "checkpoint.output_dir" in lines[0]
        return
    worker_args = distributed.forwarded(args) + cli._sets(args) + cli._resume_args(args)
    app = GrpoApp(args.config, config, worker_argv=[sys.executable, "-m", "grpo_tui.worker", args.config, *worker_args])
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(2400):  # up to 120 s on a loaded machine
            if isinstance(app.screen, (MistakeScreen, CrashScreen)) and app.screen.is_mounted:
                break
            await pilot.pause(0.05)
        assert isinstance(app.screen, MistakeScreen), app.state.error
        text = app.screen.query_one("#mistake-text", Static)
        for _ in range(100):
            if " ".join(sentence.split()) in " ".join(str(text.render()).split()):
                break
            await pilot.pause(0.05)
        shown = " ".join(str(text.render()).split())
        assert " ".join(sentence.split()) in shown and "Traceback" not in shown
        assert app.run_link.restarts == 0 and app.run_link.worker_code == 2
        await pilot.press("escape", "q")
    assert app.run_link.restarts == 0


def test_a_dataset_smaller_than_a_batch_is_said_by_check_and_the_worker(tmp_path):
    config = write_run(tmp_path, data={"path": str(jsonl(tmp_path / "one.jsonl", ROWS[:1]))}, training={"batch_size": 2, "max_steps": 1})
    note = (f"{tmp_path / 'one.jsonl'} has 1 row and training.batch_size is 2: every step trains on its row about 2 "
            "times over; add rows or lower training.batch_size")
    checked = grpo_tui("check", str(config))
    assert checked.returncode == 0 and f"# note: {note}" in checked.stdout.splitlines()[:2], checked.stdout[:500]
    done = grpo_tui("worker", str(config), "--plain")
    assert done.returncode == 0 and f"[warning] {note}" in done.stdout.splitlines(), done.stdout[-2000:]


@pytest.mark.parametrize("env", [{}, {"TERM": "dumb"}])
def test_run_without_a_terminal_prints_the_plain_lines_with_a_note(tmp_path, env):
    """It drew the full-screen dashboard anyway (TERM=dumb), or into a pipe."""
    config = write_run(tmp_path)
    done = grpo_tui("run", str(config), env=env)  # stdin is /dev/null, stdout a pipe
    why = "TERM=dumb" if env else "stdin or stdout is not a terminal"
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.splitlines()[0] == f"grpo-tui: {why}, so no dashboard can be drawn; showing the --plain lines instead"
    assert done.stdout.splitlines()[-1].startswith("completed: 2 steps in ") and "\x1b[" not in done.stdout


def test_run_in_a_terminal_with_term_dumb_prints_the_plain_lines(tmp_path):
    from tests.helpers.printed import Terminal, wait_for

    config = write_run(tmp_path)
    terminal = Terminal(f"TERM=dumb {sys.executable} -m grpo_tui.tui.cli run {config}", ROOT)  # a real terminal
    try:
        wait_for(lambda: "completed: 2 steps" in terminal.text(), 120, "the plain lines")
        assert "grpo-tui: TERM=dumb, so no dashboard can be drawn; showing the --plain lines instead" in terminal.text()
        assert terminal.proc.wait(30) == 0
    finally:
        terminal.end()
