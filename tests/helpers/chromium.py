"""A page in real headless Chromium (Debian's ``chromium``), driven over the DevTools protocol.

``--screenshot`` alone does not wait for a websocket app to draw (virtual time stops at the first
idle moment), so this opens the page, waits in real time until it shows what we want, and captures
it. Used by tests/tui/test_web.py and screenshots/make.py (``web`` shot).

xterm.js draws on a canvas, so the page's DOM text is empty; what the app drew is read from the
websocket instead: a script added before the page's own wraps ``WebSocket`` and keeps the text of
every screen update the app sent (``Page.drawn``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Installed before the page's scripts: keeps the last 256 KiB of the app's output, escapes removed.
TAP = r"""
(() => {
  const Native = window.WebSocket;
  const decoder = new TextDecoder();
  window.__drawn = "";
  window.WebSocket = function (...args) {
    const socket = new Native(...args);
    socket.addEventListener("message", (e) => {
      if (typeof e.data === "string") return;
      const text = decoder.decode(new Uint8Array(e.data), {stream: true}).replace(/\x1b\[[0-9;?<>=]*[ -\/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]|\x1b[=>]/g, "");
      window.__drawn = (window.__drawn + text).slice(-262144);
    });
    return socket;
  };
  window.WebSocket.prototype = Native.prototype;
  Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
})();
"""


class Page:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws, self.ids = ws, itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        number = next(self.ids)
        await self.ws.send_str(json.dumps({"id": number, "method": method, "params": params}))
        while True:
            reply = json.loads((await self.ws.receive()).data)
            if reply.get("id") == number:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    async def press(self, key: str) -> None:
        """Type one character into the page's terminal (xterm.js reads a hidden textarea)."""
        focus = "(() => { const t = document.querySelector('.xterm-helper-textarea'); t && t.focus(); " \
                "return !!t && document.activeElement === t; })()"
        if await self._value(focus) != "True":
            raise RuntimeError("the page's terminal cannot take keys (no focused xterm textarea)")
        code = {"code": f"Key{key.upper()}", "windowsVirtualKeyCode": ord(key.upper())} if key.isalpha() else {}
        await self.call("Input.dispatchKeyEvent", type="keyDown", key=key, text=key, unmodifiedText=key, **code)
        await self.call("Input.dispatchKeyEvent", type="keyUp", key=key, **code)

    async def text(self) -> str:
        """The page's DOM text (the intro dialog's; xterm.js draws the terminal on a canvas)."""
        return await self._value("document.body.innerText")

    async def drawn(self) -> str:
        """The text of what the app sent to the page's terminal (the newest 256 KiB, escapes removed)."""
        return await self._value("window.__drawn || ''")

    async def _value(self, expression: str) -> str:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return str(result.get("result", {}).get("value", ""))


async def screenshot(
    url: str, out: Path, *, ready: Callable[[str], bool], size: tuple[int, int] = (1600, 1000), timeout: float = 60.0,
    then: Callable[[Page], Any] | None = None,
) -> str:
    """Open ``url``, wait until ``ready(text the app drew)`` (``Page.drawn``), save a PNG to ``out``,
    then await ``then(page)`` if given; returns that text."""
    browser = find_chromium()
    if browser is None:
        raise FileNotFoundError("chromium is not installed (apt-get install chromium)")
    port = free_port()
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.Popen(
            [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={profile}",
             f"--remote-debugging-port={port}", f"--window-size={size[0]},{size[1]}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            async with aiohttp.ClientSession() as http:
                target = await _page_target(http, port, timeout)
                async with http.ws_connect(target, max_msg_size=0) as ws:
                    page = Page(ws)
                    await page.call("Page.enable")
                    await page.call("Page.addScriptToEvaluateOnNewDocument", source=TAP)
                    await page.call("Emulation.setFocusEmulationEnabled", enabled=True)  # focus as in a shown window
                    await page.call("Page.navigate", url=url)
                    deadline = time.monotonic() + timeout
                    text = ""
                    while not ready(text := await page.drawn()):
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"the page never showed what was expected; it shows: {text[:500]!r}")
                        await asyncio.sleep(0.5)
                    await asyncio.sleep(1.0)  # one more repaint of the terminal canvas
                    shot = await page.call("Page.captureScreenshot", format="png")
                    out.write_bytes(base64.b64decode(shot["data"]))
                    if then is not None:
                        await then(page)
                    return text
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait(10)


async def _page_target(http: aiohttp.ClientSession, port: int, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            async with http.get(f"http://127.0.0.1:{port}/json/list") as response:
                pages = [t for t in await response.json() if t.get("type") == "page"]
                if pages:
                    return str(pages[0]["webSocketDebuggerUrl"])
        except (aiohttp.ClientError, json.JSONDecodeError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("chromium did not open its DevTools port")
        await asyncio.sleep(0.2)
