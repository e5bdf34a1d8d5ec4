"""``grpo-tui attach RUN_DIR --web``: the dashboard in a real headless browser (Debian's Chromium),
and the guard on any address but 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from grpo_tui.protocol import codec
from grpo_tui.protocol import control as c
from grpo_tui.protocol import messages as m
from tests.helpers.chromium import Page, find_chromium, free_port, screenshot
from tests.helpers.other_user import as_nobody
from tests.helpers.runs import CLI, record_step, start_detached, wait_for
from tests.helpers.worker_harness import tiny_model

from .conftest import make_config


__all__ = ["tiny_model"]


def serve(out: Path, *options: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``attach --web``; returns it and the URL it printed."""
    proc = subprocess.Popen(
        [*CLI, "attach", str(out), "--web", *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("Serving the dashboard of"), line
    url = line.split(" at ", 1)[1].strip()
    deadline = time.monotonic() + 30
    while True:  # the port answers
        try:
            urllib.request.urlopen(url, timeout=2).close()
            break
        except urllib.error.HTTPError:
            break
        except OSError:
            assert time.monotonic() < deadline, "the web server never answered"
            time.sleep(0.2)
    return proc, url


def stop(proc: subprocess.Popen[str]) -> str:
    os.killpg(proc.pid, 15)
    _, err = proc.communicate(timeout=20)
    return err


@pytest.mark.slow
@pytest.mark.skipif(find_chromium() is None, reason="needs Debian's chromium (apt-get install chromium; .ci/run installs it)")
def test_the_browser_shows_the_run_and_steers_it(tmp_path, tiny_model):
    """Headless Chromium shows the run and its `p` pauses it.

    `p` is a key of a running run: the dashboard offers it once it has folded the run's history and
    shows the run running. A key typed before that (the page is up, the browser tab's own `attach`
    still reading run.jsonl) does nothing, as it would for a person. So the test types it once the
    page has drawn the running run, read from what the app sent to the page's terminal. (One run in
    five on the loaded machine still lost that p: it is typed again after 20 s.)"""
    out, _ = start_detached(tmp_path, tiny_model, steps=100_000)  # never ends by itself before the pause
    wait_for(lambda: record_step(out) >= 3)
    port = free_port()
    web, url = serve(out, "--port", str(port))
    assert url.startswith(f"http://127.0.0.1:{port}/?token=")

    def running(drawn: str) -> bool:  # the header of a dashboard that has folded the history, and p works
        return "▶ running" in drawn and " · step " in drawn

    async def pause(page: Page) -> None:
        for _ in range(3):  # one p normally does it; a second is harmless (p is not a key of a paused run)
            await page.press("p")
            for _ in range(40):
                await asyncio.sleep(0.5)
                if (r := c.read_record(out)) is not None and r.status == "paused":
                    return

    shot = tmp_path / "web.png"
    try:
        drawn = asyncio.run(screenshot(url, shot, ready=running, then=pause, timeout=120))
        wait_for(lambda: (r := c.read_record(out)) is not None and r.status == "paused", timeout=60)  # the page steers
    finally:
        stop(web)
    assert "grpo-tui" in drawn and "reward" in drawn
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 40_000  # a dashboard, not a blank page


def test_another_address_warns_and_requires_the_token(tmp_path):
    init = m.Init(model="tiny", model_path="tiny", config=make_config(tmp_path).to_dict())
    (tmp_path / "run.jsonl").write_bytes(codec.encode(init))  # a finished run's folder
    port = free_port()
    web, url = serve(tmp_path, "--host", "0.0.0.0", "--port", str(port), "--token", "s3cret")
    try:
        assert url == f"http://127.0.0.1:{port}/?token=s3cret"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
        assert refused.value.code == 403
        with urllib.request.urlopen(url, timeout=10) as page:
            assert page.status == 200 and "grpo_tui_token=s3cret" in page.headers.get("Set-Cookie", "")
        request = urllib.request.Request(f"http://127.0.0.1:{port}/ws", headers={"Origin": "http://evil.example"})
        request.add_header("Cookie", "grpo_tui_token=s3cret")
        with pytest.raises(urllib.error.HTTPError) as cross:
            urllib.request.urlopen(request, timeout=10)
        assert cross.value.code == 403
    finally:
        err = stop(web)
    assert "anyone who can reach port" in err and "steer this run" in err


# What another local user (or a DNS-rebinding page) sends: status of GET PATH with these headers.
PROBE = """
import sys, urllib.request, urllib.error
port, path, host, origin, cookie = sys.argv[1:6]
request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Host": host})
if origin:
    request.add_header("Origin", origin)
if cookie:
    request.add_header("Cookie", cookie)
try:
    print(urllib.request.urlopen(request, timeout=10).status)
except urllib.error.HTTPError as e:
    print(e.code)
"""


def test_another_user_or_a_rebound_page_cannot_open_the_view_on_loopback(tmp_path):
    """Issue 57.1: on 127.0.0.1 too, the view needs its token and a Host that is this machine: a
    DNS-rebinding page (Host and Origin evil.example) and another local user without the token get 403."""
    init = m.Init(model="tiny", model_path="tiny", config=make_config(tmp_path).to_dict())
    (tmp_path / "run.jsonl").write_bytes(codec.encode(init))
    port = free_port()
    web, url = serve(tmp_path, "--port", str(port))
    token = url.split("?token=", 1)[1]
    assert len(token) >= 20

    def probe(path: str, host: str, origin: str = "", cookie: str = "") -> int:
        ran = as_nobody(sys.executable, "-c", PROBE, str(port), path, host, origin, cookie, timeout=30)
        assert ran.returncode == 0, ran.stderr
        return int(ran.stdout.strip())

    try:
        evil = f"evil.example:{port}"
        assert probe("/ws", evil, f"http://{evil}") == 403  # the rebinding page: no token
        assert probe(f"/?token={token}", evil, f"http://{evil}") == 403  # even with it: not this machine
        assert probe("/ws", evil, f"http://{evil}", f"grpo_tui_token={token}") == 403
        assert probe("/", f"127.0.0.1:{port}") == 403  # another user without the token
        assert probe("/ws", f"127.0.0.1:{port}", f"http://127.0.0.1:{port}") == 403
        assert probe(f"/?token={token}", f"localhost:{port}") == 200  # the owner's URL, through a tunnel's name too
        assert probe("/", f"127.0.0.1:{port}", "http://127.0.0.1:9999", f"grpo_tui_token={token}") == 403  # another port's page
    finally:
        stop(web)
