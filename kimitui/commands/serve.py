"""``kimitui serve``: the dashboard in a browser, through textual-serve (each visitor's page runs its own
``python -m kimitui connect TARGET`` or ``replay RUN`` over a websocket).

Read-only by default: each visitor's app gets ``KIMITUI_READ_ONLY=1`` (``kimitui.tui.keys.make_read_only``),
because textual-serve checks no one. It binds 127.0.0.1 and prints the ``ssh -L`` line that reaches it.
``--allow-actions`` needs the bind to stay on loopback, or ``--token``: then every page and websocket needs
the token (in the URL once, then a cookie). A websocket from another site's page is refused (its Origin is
not this server), and on loopback so is a request naming another host (a DNS rebinding).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import hmac
import ipaddress
import logging
import os
import re
import shlex
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kimitui.commands.extras import install_command
from kimitui.core.printable import printable

if TYPE_CHECKING:
    from aiohttp import web

TOKEN_ENV = "KIMITUI_SERVE_TOKEN"
"""The token, when not given on the command line (where other users of the host can read it in ps)."""
COOKIE = "kimitui_token_{port}"
"""The cookie that carries the token after the first page (cookies are per host, not per port)."""
HOST_HEADER = re.compile(r"[A-Za-z0-9.\-]+(:[0-9]+)?|\[[0-9A-Fa-f:.]+\](:[0-9]+)?")
"""What a Host header may be: it is written into the page (its websocket's address)."""
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


class ServeError(Exception):
    """What cannot be served: one line, exit status 2."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "serve", help="the dashboard in a browser (read-only unless --allow-actions), through textual-serve",
        description="Serve the dashboard to a browser: each visitor gets their own dashboard on the host (or the "
                    "replay). Read-only by default: no cleanup, signal, restart, sweep or micro run can start "
                    "from the browser. Exit status 2 for a usage error.")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--host", metavar="TARGET", default=None,
                      help="local, demo, or [ssh://][user@]host[:port] (default demo: the simulated 8-GPU host, "
                           "one per visitor); an SSH host's key must already be known")
    what.add_argument("--replay", metavar="RUN", type=Path, help="a run file, or a bundled run's name")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    p.add_argument("--bind", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: reach it through the printed ssh -L line)")
    p.add_argument("--allow-actions", action="store_true",
                   help="let the browser start actions on the host (cleanup, signals, restart, sweep, micro): only "
                        "with a loopback --bind, or with --token")
    p.add_argument("--token", metavar="T", default=None,
                   help=f"every page and websocket needs ?token=T (default ${TOKEN_ENV}, when set)")
    p.add_argument("--public-url", metavar="URL", default=None,
                   help="the address the browser's page uses to reach this server (default: the one it was "
                        "opened with)")
    p.add_argument("--interval", type=float, default=0.5, help="live sampling interval in seconds")
    p.add_argument("--remote-python", metavar="PATH",
                   help="the python (3.8 or newer) that runs kimitui's agent on an SSH host (default python3)")
    p.add_argument("--theme", default=None, help="dashboard theme")
    return p


def is_loopback(bind: str) -> bool:
    if bind in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False


def visitor_command(args: argparse.Namespace, read_only: bool) -> str:
    """The shell command textual-serve runs for each visitor: this python, this kimitui."""
    argv = [sys.executable, "-m", "kimitui"]
    if args.replay is not None:
        from kimitui.resources import find_run

        argv += ["replay", str(find_run(args.replay).resolve())]
    else:
        argv += ["connect", args.host or "demo", "--interval", str(args.interval)]
        if args.remote_python:
            argv += ["--remote-python", args.remote_python]
    if args.theme:
        argv += ["--theme", args.theme]
    from kimitui.tui.keys import READ_ONLY_ENV

    return " ".join([f"{READ_ONLY_ENV}={'1' if read_only else '0'}", *(shlex.quote(a) for a in argv)])


def check_args(args: argparse.Namespace) -> str | None:
    """The token in force (None: none); ServeError (one line) for what cannot be served."""
    if not 1 <= args.port <= 65535:
        raise ServeError(f"--port {args.port}: not a TCP port (1 to 65535)")
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    if token is not None and (len(token) < 8 or not token.isascii() or not token.isprintable() or " " in token):
        raise ServeError("--token: at least 8 printable ASCII characters, no spaces")
    if args.allow_actions and not is_loopback(args.bind) and token is None:
        raise ServeError(f"--allow-actions with --bind {args.bind}: anyone who reaches it could act on the host; "
                       "bind to 127.0.0.1 (and use ssh -L) or give --token")
    if args.host not in (None, "local", "demo"):
        from kimitui.hosts.ssh_target import parse_target

        try:
            parse_target(args.host)
        except ValueError as exc:
            raise ServeError(f"--host: {exc}") from None
    if not 0.1 <= args.interval <= 10:
        raise ServeError(f"--interval {args.interval} is out of range (0.1 to 10)")
    return token


def shown_host(bind: str) -> str:
    """The host of the URL printed for ``bind``: 127.0.0.1 on loopback, this machine's name for every address."""
    if is_loopback(bind):
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(bind)
    except ValueError:
        return bind
    if address.is_unspecified:
        return socket.getfqdn()
    return f"[{bind}]" if address.version == 6 else bind


def ssh_line(port: int) -> str:
    name = socket.getfqdn()
    if name.startswith("localhost") or "." not in name:
        name = socket.gethostname()  # no domain known: the name the operator's ssh config most likely has
    return f"ssh -L {port}:127.0.0.1:{port} {getpass.getuser()}@{name}"


def _same_origin(origin: str, host: str) -> bool:
    return urlsplit(origin).netloc.lower() == host.lower()


def guard(token: str | None, names: frozenset[str] | None, cookie: str) -> Any:
    """The aiohttp middleware in front of textual-serve's routes; ``names``: the only host names a request may
    give (None: any)."""
    from aiohttp import web

    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        host = request.host
        if not HOST_HEADER.fullmatch(host):
            raise web.HTTPBadRequest(text="kimitui: a Host header that is not a host name\n")
        name = (urlsplit(f"//{host}").hostname or "").lower()
        if names is not None and name not in names:
            raise web.HTTPForbidden(text=f"kimitui: {printable(name)} is not this server's name\n")
        origin = request.headers.get("Origin")
        if request.path == "/ws" and origin is not None and not _same_origin(origin, host):
            raise web.HTTPForbidden(text="kimitui: a websocket from another site's page\n")
        given = None
        if token is not None and not request.path.startswith("/static/"):
            given = request.query.get("token")
            presented = given if given is not None else request.cookies.get(cookie, "")
            if not hmac.compare_digest(presented.encode(), token.encode()):
                raise web.HTTPForbidden(text="kimitui: this server needs its token: open the URL it printed\n")
        response = await handler(request)
        if given is not None and request.path == "/":
            response.set_cookie(cookie, given, httponly=True, samesite="Strict", path="/")
        return response

    return middleware


VISITOR_QUIT_S = 5.0
"""How long a visitor's dashboard has to quit when the server ends (textual-serve tells it to) before its
process group is sent SIGTERM."""
VISITOR_TERM_S = 3.0
"""Then how long before SIGKILL."""


class Visitors:
    """Each visitor's dashboard, started in a session of its own (its process group: the shell textual-serve
    starts, the dashboard, what the dashboard started in that group), so that a signal meant for the server
    (a Ctrl-C in its terminal) does not reach them directly, and ended as a group when the server ends."""

    def __init__(self) -> None:
        self.groups: set[int] = set()

    def service_class(self) -> type:
        """textual-serve's AppService, its process started in a session of its own and remembered."""
        from textual_serve.app_service import AppService

        visitors = self

        class VisitorService(AppService):  # type: ignore[misc]
            async def _open_app_process(self, width: int = 80, height: int = 24) -> asyncio.subprocess.Process:
                environment = self._build_environment(width=width, height=height)
                self._process = process = await asyncio.create_subprocess_shell(
                    self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE, env=environment, start_new_session=True)
                assert process.stdin is not None
                self._stdin = process.stdin
                visitors.alive()  # forget the groups that ended: their numbers may be used again
                visitors.groups.add(process.pid)  # its own session: its pid is its group's
                return process

            async def run(self) -> None:
                try:
                    await super().run()
                finally:
                    visitors.alive()

        return VisitorService

    def alive(self) -> list[int]:
        """The groups that still have a process (a group whose leader exited may still have members)."""
        left = []
        for group in self.groups:
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                continue
            except PermissionError:
                pass
            left.append(group)
        self.groups = set(left)
        return left

    def signal(self, sig: int) -> None:
        for group in self.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, sig)

    async def end(self) -> None:
        """SIGTERM to every group still there, SIGKILL to what is left after ``VISITOR_TERM_S``."""
        if not self.alive():
            return
        self.signal(signal.SIGTERM)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + VISITOR_TERM_S
        while self.alive() and loop.time() < deadline:
            await asyncio.sleep(0.05)
        self.signal(signal.SIGKILL)

    def end_now(self) -> None:
        """The same, outside the event loop (the server ended some other way): SIGTERM, a short wait, SIGKILL."""
        import time

        if not self.alive():
            return
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + VISITOR_TERM_S
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.signal(signal.SIGKILL)


def make_server(command: str, args: argparse.Namespace, token: str | None, read_only: bool,
                visitors: Visitors | None = None) -> Any:
    import textual_serve.server as textual_server
    from textual_serve.server import Server

    if visitors is not None:  # the server module makes each visitor's AppService by this name
        textual_server.AppService = visitors.service_class()  # type: ignore[attr-defined]

    loopback = is_loopback(args.bind)
    names = None
    if loopback:
        names = LOOPBACK_NAMES | {args.bind.lower()}
        if args.public_url:
            names |= {(urlsplit(args.public_url).hostname or "").lower()}

    class KimituiServer(Server):
        def initialize_logging(self) -> None:
            super().initialize_logging()
            logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # not a line per request

        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            app.middlewares.append(guard(token, names, COOKIE.format(port=args.port)))
            return app

        visitors: set[asyncio.Task[Any]] = set()

        async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
            task = asyncio.current_task()
            assert task is not None
            self.visitors.add(task)
            try:
                return await super().handle_websocket(request)
            finally:
                self.visitors.discard(task)

        async def on_shutdown(self, app: web.Application) -> None:
            # Each visitor's dashboard is told to quit (textual-serve does that when its handler is cancelled),
            # and waited for: a host's session ends and is recorded whole, the simulated host is torn down. One
            # that does not quit in VISITOR_QUIT_S (stuck, deaf to the quit) is ended with its process group.
            for task in self.visitors:
                task.cancel()
            if self.visitors:
                await asyncio.wait(set(self.visitors), timeout=VISITOR_QUIT_S)
            if visitors is not None:
                await visitors.end()
            if self.visitors:
                await asyncio.wait(set(self.visitors), timeout=VISITOR_TERM_S)

        async def handle_index(self, request: web.Request) -> Any:
            # textual-serve writes the page's own address into it (the websocket's URL): the one this page was
            # opened with, so an ssh -L to any local port works. The base method does not await before it
            # reads it: no other request runs between.
            self.public_url = args.public_url or f"http://{request.host}"
            return await super().handle_index(request)

        async def on_startup(self, app: web.Application) -> None:
            url = f"http://{shown_host(args.bind)}:{args.port}/"
            if token is not None:
                url += "?token=<the token>" if args.token is None else f"?token={token}"
            mode = "read-only" if read_only else "actions ALLOWED from the browser"
            print(f"kimitui serve: {url} ({mode}; each visitor runs: {command})", flush=True)
            if loopback:
                print(f"from another machine: {ssh_line(args.port)}  then open http://127.0.0.1:{args.port}/",
                      flush=True)
            elif token is None:
                print(f"kimitui serve: anyone who reaches {args.bind}:{args.port} sees the dashboard (read-only); "
                      "--token asks for a token", flush=True)

    return KimituiServer(command, host=args.bind, port=args.port, title="kimitui")


def _check_bindable(bind: str, port: int) -> None:
    try:
        family = socket.getaddrinfo(bind, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp's own listener does
            probe.bind((bind, port))
    except OSError as exc:
        raise ServeError(f"--bind {bind} --port {port}: {exc.strerror or exc}") from None


def _check_target(args: argparse.Namespace) -> None:
    """A host reached once before serving (an unknown host key, a refused connection, no driver: one line now,
    not a blank page for each visitor); the simulated host is started per visitor only."""
    if args.replay is not None or args.host in (None, "demo"):
        return
    from kimitui.live.targets import TargetError, open_target

    async def probe() -> None:
        async with open_target(args.host, remote_python=args.remote_python):
            pass

    try:
        asyncio.run(probe())
    except TargetError as exc:
        raise ServeError(f"--host {args.host}: {exc}") from None


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        return _serve(args)
    except ServeError as exc:
        print(f"kimitui: {printable(str(exc))}", file=sys.stderr)
        return 2


def _serve(args: argparse.Namespace) -> int:
    token = check_args(args)
    try:
        import textual_serve.server  # noqa: F401
    except ImportError:
        raise ServeError(f"kimitui serve needs textual-serve, which is not installed: {install_command('serve')}") \
            from None
    _check_bindable(args.bind, args.port)  # before the lines that say where it serves
    _check_target(args)
    read_only = not args.allow_actions
    command = visitor_command(args, read_only)
    visitors = Visitors()
    server = make_server(command, args, token, read_only, visitors)
    try:
        server.serve()
    except OSError as exc:  # the port taken, an address not of this machine
        raise ServeError(f"serve on {args.bind}:{args.port}: {exc.strerror or exc}") from None
    finally:  # however the server ended (its shutdown ends them already when it runs): no visitor stays
        visitors.end_now()
    return 0
