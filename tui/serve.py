"""`ddptui serve RUN_DIR | --runs-dir D`: the dashboard in a browser through textual-serve, one viewer process per tab
(tui/viewer.py), on 127.0.0.1 unless asked, every URL behind a one-time token."""
from __future__ import annotations

import argparse
import asyncio
import hmac
import ipaddress
import secrets
import shlex
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import web
from textual_serve.server import Server

from ..runners.edge import control

TAB_STOP_SECONDS = 10.0  # each tab's app is told to quit, then waited for, when serving ends
USAGE = "ddptui serve (RUN_DIR | --runs-dir D) [--port P] [--host H]"
DESCRIPTION = """\
The dashboard of RUN_DIR in a browser: each browser tab runs its own viewer (followed while the run is live, replayed
once it ended). With --runs-dir D each tab opens on the Runs screen of D instead: enter opens a record so, q there
goes back to the list. A tab never launches a run; it stops one only when its user presses s and says yes. Bound to
127.0.0.1; the URL printed carries a one-time token, and a request without it gets 403. Ctrl-C stops serving (and
every tab's viewer), never the run."""


def tab_command(run_dir: Path | None = None, runs_dir: Path | None = None) -> str:
    """The shell command textual-serve starts per browser tab (exec: the viewer is the process it waits for): the
    viewer of a record, or of a runs folder's Runs screen."""
    shown = [str(run_dir.resolve())] if run_dir is not None else ["--runs-dir", str(Path(runs_dir or "runs").resolve())]
    return "exec " + shlex.join([sys.executable, "-m", "ddptui.tui.viewer", *shown])


def exposure_warning(host: str) -> str | None:
    """The line said when --host opens the viewer beyond this machine's loopback; None on loopback."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: it may resolve to any address
        loopback = False
    if loopback:
        return None
    return (f"ddptui: serve: warning: listening on {host}, not only on this machine: whoever reaches it with the URL "
            "below (its token) can watch this run and, with s, stop it")


def token_ok(path: str, token: str) -> bool:
    """Whether a request's path starts with /TOKEN/ (compared in constant time)."""
    first = path.split("/", 2)[1] if path.startswith("/") and path.count("/") >= 2 else ""
    return hmac.compare_digest(first.encode(), token.encode())


class TokenServer(Server):
    """textual-serve's Server with every route under /TOKEN/ (403 elsewhere), URLs built from the request's own host
    (it may be reached by a name other than the one bound), and a stop that ends each tab's viewer."""

    def __init__(self, command: str, host: str, port: int, token: str, title: str) -> None:
        super().__init__(command, host=host, port=port, title=title)
        self.token = token
        self.tabs: set[asyncio.Task] = set()

    async def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._only_with_token])
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(self.templates_path))
        p = f"/{self.token}"
        app.add_routes([web.get(p + "/", self.handle_index, name="index"),
                        web.get(p + "/ws", self.handle_websocket, name="websocket"),
                        web.get(p + "/download/{key}", self.handle_download, name="download"),
                        web.static(p + "/static", self.statics_path, name="static")])
        return app

    @web.middleware
    async def _only_with_token(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        if not token_ok(request.path, self.token):
            raise web.HTTPForbidden(text="ddptui serve: open the URL that ddptui serve printed (it carries a token)\n")
        return await handler(request)

    @aiohttp_jinja2.template("app_index.html")
    async def handle_index(self, request: web.Request) -> dict[str, Any]:
        origin = f"{request.scheme}://{request.host}"
        router = request.app.router
        ws = ("wss://" if request.scheme == "https" else "ws://") + request.host
        return {"font_size": 16,
                "app_websocket_url": ws + str(router["websocket"].url_for()),
                "config": {"static": {"url": origin + str(router["static"].url_for(filename="/")).rstrip("/") + "/"}},
                "application": {"name": self.title}}

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        task = asyncio.current_task()
        assert task is not None, "aiohttp runs each request in a task"
        self.tabs.add(task)
        try:
            return await super().handle_websocket(request)
        finally:
            self.tabs.discard(task)

    async def run(self, said: Callable[[str], None], stop: asyncio.Event) -> None:
        """Serve until `stop` is set; `said` gets the URL once the port is bound."""
        runner = web.AppRunner(await self._make_app(), handle_signals=False, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port)
            await site.start()
            host, port = runner.addresses[0][:2]
            shown = f"[{host}]" if ":" in host else host
            said(f"http://{shown}:{port}/{self.token}/")
            await stop.wait()
            tabs = list(self.tabs)
            for t in tabs:  # textual-serve then tells the tab's viewer to quit and waits for it
                t.cancel()
            if tabs:
                await asyncio.wait(tabs, timeout=TAB_STOP_SECONDS)
        finally:
            await runner.cleanup()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ddptui serve", usage=USAGE, description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", nargs="?", help="a ddptui run's record (live or finished)")
    p.add_argument("--runs-dir", help="a runs folder instead: each tab opens on its Runs screen")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0: any free one)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; another opens it to whoever reaches it)")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if (args.run_dir is None) == (args.runs_dir is None):
        print("ddptui: serve: give one record (RUN_DIR) or one runs folder (--runs-dir D)", file=sys.stderr)
        return 2
    shown = Path(args.run_dir or args.runs_dir)
    if args.runs_dir is not None:
        if not shown.is_dir():
            print(f"ddptui: serve: --runs-dir {shown}: no runs folder there", file=sys.stderr)
            return 2
    else:
        state = control.state_of(shown)
        if state.state not in ("live", "finished", "dead"):
            print(f"ddptui: serve: {state.line}", file=sys.stderr)
            return 2
    if not 0 <= args.port <= 65535:
        print(f"ddptui: serve: --port {args.port}: a TCP port is 0 to 65535", file=sys.stderr)
        return 2
    warning = exposure_warning(args.host)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    command = tab_command(runs_dir=shown) if args.runs_dir is not None else tab_command(shown)
    server = TokenServer(command, args.host, args.port, secrets.token_urlsafe(18), f"ddptui {shown.resolve().name}")

    def said(url: str) -> None:
        what = f"the runs in {shown}" if args.runs_dir is not None else str(shown)
        print(f"ddptui: serving {what} at {url}\n(one viewer per browser tab; Ctrl-C stops serving, never the run)",
              flush=True)

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(s, stop.set)
        await server.run(said, stop)

    try:
        asyncio.run(serve())
    except OSError as e:  # the port is taken, the address is not this machine's
        print(f"ddptui: serve: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
        return 2
    return 0
