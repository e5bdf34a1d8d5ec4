"""The browser view's screenshot: the quickstart detached, ``grpo-tui attach --web``, headless Chromium.

    python screenshots/web.py            # writes screenshots/web-attach.png (needs Debian's chromium)

The run is the quickstart in a temporary folder; the page is shot once its own ``attach`` has drawn
the run (tests/helpers/chromium.py drives the browser over the DevTools protocol).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.tui_overhead import fresh_config  # noqa: E402
from grpo_tui.protocol import control as c  # noqa: E402
from tests.helpers.chromium import free_port, screenshot  # noqa: E402

CLI = [sys.executable, "-m", "grpo_tui.tui.cli"]


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="web-shot-"))
    web = None
    try:
        config = fresh_config(HERE.parent / "examples" / "quickstart.toml", folder, max_steps=2000)
        out = folder / "out"
        subprocess.run([*CLI, "run", str(config), "--detach"], check=True)
        while (r := c.read_record(out)) is None or r.step < 60:
            time.sleep(0.5)
        port = free_port()
        web = subprocess.Popen([*CLI, "attach", str(out), "--web", "--port", str(port)], start_new_session=True)
        while True:  # the server answers
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).close()
                break
            except OSError:
                time.sleep(0.2)

        def drawn(text: str) -> bool:  # the dashboard shows the running run (tests/helpers/chromium.py)
            return "▶ running" in text and " · step " in text

        path = HERE / "web-attach.png"
        asyncio.run(screenshot(f"http://127.0.0.1:{port}/", path, ready=drawn, size=(1600, 960)))
        print(f"wrote {path}")
    finally:
        if web is not None:
            os.killpg(web.pid, signal.SIGTERM)
            web.wait(20)
        record = c.read_record(folder / "out")
        if record is not None and c.pid_alive(record.pid):
            os.kill(record.pid, signal.SIGTERM)
            while c.pid_alive(record.pid):
                time.sleep(0.2)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
