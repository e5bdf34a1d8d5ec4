"""``grpo-tui attach RUN_DIR --web``: the same dashboard in a browser, through textual-serve.

Each browser tab runs its own ``grpo-tui attach RUN_DIR`` (a viewer of the run like any other, with
every key). Anyone who can open the page can steer the run, so:

- it binds 127.0.0.1 unless ``--host`` says otherwise; for SSH, forward the port
  (``ssh -L 8000:127.0.0.1:8000 host``, docs/long-runs.md);
- on any other address a token is required (``--token``, or a random one printed in the URL): the
  page asks for ``?token=...`` once and keeps it in a same-site cookie;
- the websocket that drives the dashboard only accepts pages served from this same address (its
  ``Origin`` must match), so another web site open in the browser cannot steer the run.
"""

from __future__ import annotations

import hmac
import secrets
import shlex
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

from grpo_tui.common.install_hint import pip_install

LOOPBACK = ("127.0.0.1", "localhost", "::1")
COOKIE = "grpo_tui_token"
WARNING = (
    "warning: serving on {host}: anyone who can reach port {port} can watch and steer this run "
    "(pause, stop, save). A token is required: open the URL below once; keep it private."
)


def attach_command(folder: Path) -> str:
    return shlex.join([sys.executable, "-m", "grpo_tui.tui.cli", "attach", str(folder)])


def serve(folder: Path, *, host: str = "127.0.0.1", port: int = 8000, token: str | None = None) -> int:
    try:
        from aiohttp import web
        from textual_serve.server import Server
    except ImportError:
        print(f"grpo-tui: --web needs textual-serve: {pip_install('textual-serve')}.", file=sys.stderr)
        return 2
    if host not in LOOPBACK and not token:
        token = secrets.token_urlsafe(18)
    if host not in LOOPBACK:
        print(WARNING.format(host=host, port=port), file=sys.stderr)

    class RunServer(Server):
        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            app.middlewares.append(guard)
            return app

    server = RunServer(attach_command(folder), host=host, port=port, title=f"grpo-tui · {folder.name}")

    Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith("/static/"):
            return await handler(request)
        if token is not None:
            given = request.query.get("token") or request.cookies.get(COOKIE) or ""
            if not hmac.compare_digest(given.encode(), token.encode()):
                return web.Response(status=403, text="grpo-tui: this run needs its token: open the URL with ?token=...\n")
        if request.path == "/ws":
            origin = request.headers.get("Origin", "")
            if origin and urlsplit(origin).netloc != request.host:
                return web.Response(status=403, text="grpo-tui: cross-origin connection refused\n")
        if request.path == "/":
            # the page's websocket URL: the address the browser used (an SSH tunnel's localhost:PORT too)
            server.public_url = f"{request.scheme}://{request.host}"
        response = await handler(request)
        if token is not None and request.path == "/" and request.query.get("token"):
            response.set_cookie(COOKIE, token, httponly=True, samesite="Strict")
        return response

    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    print(f"Serving the dashboard of {folder} at {url}", flush=True)
    server.serve()
    return 0
