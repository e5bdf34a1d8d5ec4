"""``grpo-tui attach RUN_DIR --web``: the same dashboard in a browser, through textual-serve.

Each browser tab runs its own ``grpo-tui attach RUN_DIR`` (a viewer of the run like any other, with
every key). Anyone who can open the page can steer the run, so (docs/security.md, "The web view"):

- it binds 127.0.0.1 unless ``--host`` says otherwise; for SSH, forward the port
  (``ssh -L 8000:127.0.0.1:8000 host``, docs/long-runs.md);
- a token is always required (``--token``, or a random one printed in the URL, as Jupyter does): any
  local user can reach a port on 127.0.0.1, the 0600 control socket is what keeps them out of the run,
  and the token keeps the page as private as that socket. The page takes ``?token=...`` once and keeps
  it in a same-site cookie;
- the ``Host`` a request names must be this machine (a loopback name, an address, the machine's own
  name or ``--host``): a page of another site whose name was re-pointed at 127.0.0.1 (DNS rebinding)
  names its own site and is refused;
- a request that carries an ``Origin`` (a browser's) must come from the address it was sent to, so
  another web site open in the browser cannot drive the dashboard's websocket.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import shlex
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

from grpo_tui.common.install_hint import pip_install

LOOPBACK = ("127.0.0.1", "localhost", "::1")
COOKIE = "grpo_tui_token"
WARNING = (
    "warning: serving on {host}: anyone who can reach port {port} can watch and steer this run "
    "(pause, stop, save) with the token: open the URL below once; keep it private."
)


def attach_command(folder: Path) -> str:
    return shlex.join([sys.executable, "-m", "grpo_tui.tui.cli", "attach", str(folder)])


def machine_names(host: str) -> set[str]:
    """The names a request's ``Host`` may give besides an address: loopback, this machine's, ``--host``."""
    names = {"localhost", host.lower()}
    for name in (socket.gethostname(), socket.getfqdn()):
        names.add(name.lower())
    return names


def host_allowed(header: str, names: set[str]) -> bool:
    """A ``Host`` header (``name[:port]``) that is an address or one of ``names``; any port (an SSH
    tunnel's local port may differ from ours). A DNS-rebinding page names its own domain: refused."""
    name = urlsplit(f"//{header}").hostname or ""
    if name in names:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def serve(folder: Path, *, host: str = "127.0.0.1", port: int = 8000, token: str | None = None) -> int:
    try:
        from aiohttp import web
        from textual_serve.server import Server
    except ImportError:
        print(f"grpo-tui: --web needs textual-serve: {pip_install('textual-serve')}.", file=sys.stderr)
        return 2
    secret = token or secrets.token_urlsafe(18)  # per run of `attach --web`, printed in its URL
    names = machine_names(host)
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
        if not host_allowed(request.host, names):
            return web.Response(status=403, text="grpo-tui: refused: the Host of this request is not this machine\n")
        origin = request.headers.get("Origin", "")
        if origin and urlsplit(origin).netloc.lower() != request.host.lower():
            return web.Response(status=403, text="grpo-tui: cross-origin connection refused\n")
        if request.path.startswith("/static/"):  # textual-serve's own scripts and fonts: nothing of the run
            return await handler(request)
        given = request.query.get("token") or request.cookies.get(COOKIE) or ""
        if not hmac.compare_digest(given.encode(), secret.encode()):
            return web.Response(status=403, text="grpo-tui: this run needs its token: open the URL with ?token=...\n")
        if request.path == "/":
            # the page's websocket URL: the address the browser used (an SSH tunnel's localhost:PORT too)
            server.public_url = f"{request.scheme}://{request.host}"
        response = await handler(request)
        if request.path == "/" and request.query.get("token"):
            response.set_cookie(COOKIE, secret, httponly=True, samesite="Strict")
        return response

    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    url = f"http://{shown}:{port}/?token={secret}"
    print(f"Serving the dashboard of {folder} at {url}", flush=True)
    server.serve()
    return 0
