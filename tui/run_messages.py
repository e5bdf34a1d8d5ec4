"""What a dashboard hears about the run: typed items (``WorkerEvent``, ``WorkerStderr``,
``WorkerBadLine``, ``WorkerExited``) that travel in two Textual messages, ``WorkerFrames`` (the live
frames of one read from the socket) and ``WorkerHistory`` (what came before it connected).

tui/connection.py posts them from the run's control socket and ``run.jsonl``; the app buffers them
and flushes them to widgets on a timer (docs/architecture.md, "Processes" and "Dashboard"). One
message per read, not per frame: a fast run's frames cost the dashboard one wake-up per batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from grpo_tui.protocol import messages as m
from grpo_tui.tui.run_events import DashboardEvent


@dataclass(eq=False, slots=True)
class WorkerEvent:
    """One protocol frame from the worker."""

    event: m.Event


@dataclass(eq=False, slots=True)
class WorkerStderr:
    """One line the worker wrote to stderr."""

    line: str


@dataclass(eq=False, slots=True)
class WorkerBadLine:
    """A stdout line that is not a protocol frame (already described for the log)."""

    text: str


@dataclass(eq=False, slots=True)
class WorkerExited:
    """The worker is gone, after its last frame and stderr line: the supervisor's ``worker_exit``
    (protocol/messages.py says what it carries: a restart's countdown, or ``final``)."""

    exit: m.WorkerExit


WorkerOutput = WorkerEvent | WorkerStderr | WorkerBadLine | WorkerExited
RunItem = WorkerOutput | DashboardEvent  # the app's one stream: the run's output and the dashboard's own events


@dataclass(eq=False)
class WorkerHistory(Message):
    """What happened before this viewer connected (or while it was cut off), from run.jsonl, in order."""

    items: list[WorkerOutput]


@dataclass(eq=False)
class WorkerFrames(Message):
    """Live output, in order: what one read from the control socket brought."""

    items: list[WorkerOutput]


