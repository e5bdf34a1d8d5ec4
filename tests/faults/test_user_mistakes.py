"""The mistakes a user makes on a first run, each through the real program, as the user meets them.

The CLI half runs ``grpo-tui worker CONFIG --plain`` and asserts the exact sentence (once), the exit
code (2: a fixable mistake, ``protocol/outcome.py``) and no traceback anywhere on the terminal. The
dashboard half runs the real dashboard with the real worker (Pilot) and asserts that the mistake's
modal shows the sentence and that nothing restarts. The cases are in tests/helpers/mistake_cases.py; most
are caught before the model loads, so the suite stays fast.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_tui.protocol.config import ConfigError, load_config
from tests.helpers.mistake_cases import CASES, ROOT, Case, Setup, custom_reward, write_run

PREFIXES = ("[mistake] ", "grpo-tui: config error: ", "grpo-tui: ")
READY = [c for c in CASES if c.sentence(Path("/x"))]


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


def _setup(case: Case, folder: Path) -> Setup:
    return case.build(folder)


@pytest.mark.parametrize("case", READY, ids=[c.id for c in READY])
def test_a_mistake_is_one_sentence_exit_2_and_no_traceback(tmp_path, case):
    if case.root_can and os.geteuid() == 0:
        pytest.skip("root writes read-only folders")
    setup = _setup(case, tmp_path)
    done = grpo_tui("worker", str(setup.config), "--plain", *setup.args, env=setup.env)
    both = done.stdout + done.stderr
    sentence = case.sentence(tmp_path)
    assert done.returncode == case.code, both[-3000:]
    assert said(both).count(sentence) == 1, both[-3000:]
    assert "Traceback" not in both and 'File "' not in both


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


def test_a_config_saved_with_a_bom_loads(tmp_path):
    config = write_run(tmp_path)
    config.write_bytes(b"\xef\xbb\xbf" + config.read_bytes())
    done = grpo_tui("check", str(config))
    assert done.returncode == 0 and done.stdout.startswith(f"# {config}: valid."), done.stderr


def _loads(case: Case, folder: Path) -> bool:
    try:
        load_config(case.build(folder).config)
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


@pytest.mark.parametrize("case", [c for c in READY if c.kind == "output" and c.id != "output-locked"],
                         ids=lambda c: c.id)
def test_check_says_what_the_worker_would_stop_on_before_training(tmp_path, case):
    if case.root_can and os.geteuid() == 0:
        pytest.skip("root writes read-only folders")
    setup = case.build(tmp_path)
    done = grpo_tui("check", str(setup.config))
    assert done.returncode == 2 and said(done.stderr) == [case.sentence(tmp_path)], done.stderr
    assert not (tmp_path / "out").is_dir() or list((tmp_path / "out").iterdir())  # nothing created or moved


# The dashboard half: the real dashboard, the real worker, a few mistakes of each stage (the
# config loads; the worker finds the mistake at start, at load, or in a step).
DASHBOARD = ["output-locked", "no-prompt-column", "reward-wrong-count", "quantized-full-finetune", "memory-budget-too-small"]


@pytest.mark.parametrize("case", [c for c in READY if c.id in DASHBOARD], ids=lambda c: c.id)
async def test_the_dashboard_shows_the_sentence_and_never_restarts(tmp_path, case):
    from textual.widgets import Static

    from grpo_tui.tui.app import GrpoApp
    from grpo_tui.tui.screens.crash import CrashScreen, MistakeScreen

    setup = case.build(tmp_path)
    app = GrpoApp(str(setup.config), load_config(setup.config))
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(1200):  # up to 60 s
            if isinstance(app.screen, (MistakeScreen, CrashScreen)):
                break
            await pilot.pause(0.05)
        assert isinstance(app.screen, MistakeScreen), app.state.error
        await pilot.pause(0.3)  # composed
        shown = str(app.screen.query_one("#mistake-text", Static).render())
        assert " ".join(case.sentence(tmp_path).split()) in " ".join(shown.split())
        assert "Traceback" not in shown
        await pilot.pause(0.5)
        assert isinstance(app.screen, MistakeScreen) and app.restarts == 0 and app.worker_code == 2
        await pilot.press("escape", "q")
