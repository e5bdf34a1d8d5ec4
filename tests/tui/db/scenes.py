"""States of the Database view reached by driving ``grpo-tui browse`` on the fixture store.

Shared by the SVG snapshot tests and the screenshot (``python -m tests.tui.db.scenes``), so the
screenshot in ``screenshots/`` is exactly a state the tests pin.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from textual.worker import WorkerCancelled

from grpo_tui.tui.browse import BrowseApp

from .make_store import build_store

SIZE = (150, 45)


async def settle(pilot, rounds: int = 4) -> None:
    for _ in range(rounds):
        try:
            await pilot.app.workers.wait_for_complete()
        except WorkerCancelled:
            continue
        finally:
            await pilot.pause()


async def generations(pilot) -> None:
    """Run 1's generations filtered to steps 1-2 with a tool call; the detail of the first."""
    await settle(pilot)
    await pilot.press("a")
    await settle(pilot)
    await pilot.press("slash", *"banana", "enter")
    await settle(pilot)
    await pilot.press("o", "o")  # sorted by reward, best first
    await settle(pilot)
    await pilot.press("down")
    await settle(pilot)


async def hostile(pilot) -> None:
    """The completion holding markup and escape sequences, shown literally."""
    await settle(pilot)
    await pilot.press("a", "slash", *"pwned", "enter")
    await settle(pilot)


async def compare(pilot) -> None:
    await settle(pilot)
    await pilot.press("c")
    await pilot.pause(0.3)


SCENES = {"generations": generations, "hostile": hostile, "compare": compare}


def make_app(folder: Path) -> BrowseApp:
    """The browser on a fresh fixture store in ``folder``, opened by a relative path (stable titles)."""
    build_store(folder / "outputs.db")
    os.chdir(folder)
    return BrowseApp("outputs.db", run_id=1)


async def _screenshot(out: Path, scene: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        app = make_app(Path(tmp))
        try:
            async with app.run_test(size=SIZE) as pilot:
                await SCENES[scene](pilot)
                svg = app.export_screenshot(title="grpo-tui browse outputs.db")
        finally:
            os.chdir(cwd)
    out.write_text(svg)


if __name__ == "__main__":
    os.environ["TZ"] = "UTC"
    time.tzset()
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "screenshots/database.svg")
    asyncio.run(_screenshot(target, sys.argv[2] if len(sys.argv) > 2 else "generations"))
    print(f"wrote {target}")
