"""What ``grpo-tui run`` / ``grpo-tui attach`` print when the dashboard closes, whatever the ending:
how the run ended, the exit code, the run folder, and the command that goes on from there (attach
again to a run that goes on, resume a run that stopped with a checkpoint, browse any run's store),
in backquotes as every command the program prints inside a sentence.

The screen is gone once these lines print: they are what stays in the terminal.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from grpo_tui.protocol.layout import list_checkpoints
from grpo_tui.protocol.outcome import Exit
from grpo_tui.tui.runs import store_of

ENDINGS = {
    Exit.DONE: "completed",
    Exit.CRASH: "crashed",
    Exit.MISTAKE: "stopped on a mistake to fix",
    Exit.NAN_STOP: "stopped itself after non-finite steps",
    Exit.STOPPED: "stopped",
    Exit.UNREWARDED: "stopped itself: no completion earned a reward",
    Exit.DOCTOR: "stopped by the run doctor",
}


def closing_lines(*, code: int, goes_on: bool, run_dir: str, config_path: str | None, steps: int,
                  total_steps: int, error: str = "") -> list[str]:
    """The lines for a dashboard that exits with ``code`` on the run in ``run_dir``; ``goes_on``: the run
    is still training (detached, or left running); ``config_path``: as the user typed it (None:
    attached, the config is the run's). ``steps`` of ``total_steps`` were trained."""
    folder = shlex.quote(run_dir)
    if goes_on:
        return [f"The run goes on in {run_dir} (step {steps}/{total_steps or '?'}); this dashboard exited {code}.",
                f"Attach again: grpo-tui attach {folder}"]
    ending = ENDINGS.get(Exit(code), f"ended with code {code}") if code in set(Exit) else f"ended with code {code}"
    said = f": {error}" if error and code not in (Exit.DONE, Exit.STOPPED) else ""
    lines = [f"Run {ending} at step {steps}/{total_steps or '?'}{said} (exit code {code}).", f"Run folder: {run_dir}"]
    if code != Exit.DONE and code != Exit.MISTAKE and config_path is not None and list_checkpoints(run_dir):
        lines.append(f"Resume it: `grpo-tui run {shlex.quote(config_path)} --resume latest`")
    if code == Exit.MISTAKE and config_path is not None:
        lines.append(f"Check the fix: `grpo-tui check {shlex.quote(config_path)}`")
    if store_of(Path(run_dir)).is_file():
        lines.append(f"Browse its steps and generations: `grpo-tui browse {folder}`")
    return lines
