"""How the dashboard reads a worker's end (``protocol/outcome.py``): what it says in the header,
the log and the dialog (the worker's fatal error frame, else its last stderr lines), where the
full log is, and the exit code of ``grpo-tui run``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.layout import RUN_LOG_FILE
from grpo_tui.protocol.outcome import Exit

TAIL_LINES = 3  # the last stderr lines a dialog quotes when the worker said nothing


@dataclass(frozen=True)
class Ending:
    code: int
    error: str  # one line for the header and the Logs tab
    reason: str  # what the dialog shows: the sentence, the error, or the last stderr lines
    log_path: str  # the run's log (run.jsonl), "" when the worker wrote none

    @property
    def mistake(self) -> bool:
        return self.code == Exit.MISTAKE


def read_ending(code: int, fatal: m.Error | None, stderr: Iterable[str], output_dir: str) -> Ending:
    tail = [line for line in stderr if line.strip()][-TAIL_LINES:]
    reason = fatal.message if fatal is not None else "\n".join(tail)
    log = Path(output_dir) / RUN_LOG_FILE
    log_path = fatal.log_path if fatal is not None and fatal.log_path else (str(log) if log.is_file() else "")
    if code == Exit.MISTAKE:
        return Ending(code, reason or "the worker stopped on a fixable mistake", reason, log_path)
    said = fatal.message if fatal is not None else (tail[-1] if tail else "")
    return Ending(code, f"worker exited with code {code}" + (f": {said}" if said else ""), reason, log_path)


def run_exit_code(worker_code: int | None, failed: bool) -> int:
    """``grpo-tui run``'s exit code: the worker's kind; a worker that died without a word, or never
    started while the dashboard shows an error, is a crash."""
    if worker_code is None or worker_code not in set(Exit):
        return Exit.CRASH if failed else Exit.DONE
    return worker_code
