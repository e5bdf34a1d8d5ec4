"""Waiting on a Textual app under Pilot until its background work has reached the screen."""

import asyncio
from collections.abc import Callable

from textual.app import App
from textual.worker import WorkerCancelled


async def settle(pilot, rounds: int = 4) -> None:
    """Let query workers finish and their results (and the queries those trigger) reach the widgets."""
    for _ in range(rounds):
        try:
            await pilot.app.workers.wait_for_complete()
        except WorkerCancelled:  # a query replaced by a newer one (exclusive workers): wait again
            continue
        finally:
            await pilot.pause()


async def until(pilot, condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"not seen in {timeout:g} s: {what}")
        await pilot.pause(0.02)


def screen_text(app: App) -> str:  # type: ignore[type-arg]
    """What the terminal shows now, line by line (the compositor's strips)."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())
