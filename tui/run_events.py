"""What the dashboard itself learns about its run, as events beside the worker's frames: the link
lost or refused, a restart begun, a worker ended, a stop asked for, a finished run opened
read-only, how long the run has gone on. No Textual here.

The run link (tui/run_link.py) decides them and the app folds them, in the same stream and order as
the worker's frames, into ``RunState.apply`` (tui/state.py), the one writer of the dashboard's
state (docs/architecture.md, "Dashboard").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True, slots=True)
class RunFailed:
    """The run's error (it did not start, no run answers, the worker was refused, or it ended and
    is not restarted): in the header, the logs and a notification."""

    message: str


@dataclass(frozen=True, slots=True)
class WorkerEnded:
    """A worker ended before its run completed (a crash, a mistake): ``error`` is the header's line."""

    error: str


@dataclass(frozen=True, slots=True)
class RestartBegan:
    """The restart (``attempt``) or the mistake's retry (``retry``) that was asked for has happened:
    its worker said hello."""

    attempt: int
    retry: bool


@dataclass(frozen=True, slots=True)
class StopAsked:
    """This dashboard asked the run to stop; it waits for the final checkpoint."""


@dataclass(frozen=True, slots=True)
class PauseAsked:
    """This dashboard asked the run to pause: the header says so until the worker's ``paused`` (it
    pauses at the end of the running step)."""


@dataclass(frozen=True, slots=True)
class WorkerSilent:
    """The running worker has sent nothing for ``seconds`` (longer than its steps take): stopped,
    hung, or lost. ``process``: what its process is doing, when that can be told (tui/process_state.py)."""

    seconds: float
    process: str = ""


@dataclass(frozen=True, slots=True)
class OpenedReadOnly:
    """No run answers: its history was read back from run.jsonl, and nothing runs."""


@dataclass(frozen=True, slots=True)
class RunAge:
    """How long the run had gone on when this dashboard attached (its record's start to now, or to
    its end): the elapsed time counts from the run's start, not the dashboard's."""

    seconds: float


@dataclass(frozen=True, slots=True)
class DashboardNote:
    """A line for the Logs tab only (nothing in the run changed)."""

    level: str
    message: str


DashboardEvent = Union[
    RunFailed, WorkerEnded, RestartBegan, StopAsked, PauseAsked, WorkerSilent, OpenedReadOnly, RunAge, DashboardNote,
]
