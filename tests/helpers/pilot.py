"""Waiting on a Textual app under Pilot until its background work has reached the screen."""

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
