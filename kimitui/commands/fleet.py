"""``kimitui fleet``: many GPU hosts at once, in the fleet view or headless (``--json --count N``).

Sources (kimitui/fleet): SSH (``kimitui fleet HOST...`` or ``--hosts-file FILE``: our agent on each host),
Prometheus (``--prometheus URL``: the DCGM exporter's and vLLM's metrics it scrapes), the demo (``--demo N``
simulated hosts, read directly, or through a real Prometheus with ``--prometheus auto``). Every round is recorded
like any session (``kimitui replay RUN`` shows it again).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimitui.commands.output import CliError
from kimitui.core.events import Event, FleetSample
from kimitui.core.fleet_state import attention
from kimitui.core.printable import printable

if TYPE_CHECKING:
    from kimitui.hosts.sim.layout import GpuFaults

MAX_DEMO = 1024
DEFAULT_INTERVAL_S = 1.0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fleet", help="many GPU hosts at once: over SSH, through Prometheus (DCGM exporter), or "
                                     "the demo's simulated hosts")
    p.add_argument("hosts", nargs="*", metavar="HOST",
                   help="[user@]host[:port] or ~/.ssh/config aliases: our agent on each, over SSH")
    p.add_argument("--hosts-file", type=Path, metavar="FILE", help="hosts one a line (# starts a comment)")
    p.add_argument("--prometheus", metavar="URL",
                   help="read the fleet through Prometheus' HTTP API (DCGM exporter metrics); with --demo, `auto` "
                        "starts a real Prometheus scraping the simulated hosts")
    p.add_argument("--demo", type=int, metavar="N", help="N simulated 8-GPU hosts (they serve DCGM-exporter metrics)")
    p.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S, help="seconds between rounds (default 1)")
    p.add_argument("--json", action="store_true", help="headless: one JSON object a round on stdout")
    p.add_argument("--count", type=int, default=0, help="with --json: stop after N rounds (default: until stopped)")
    p.add_argument("--accept-new-host-key", action="store_true",
                   help="accept and remember the host key of a host not yet in known_hosts")
    p.add_argument("--remote-python", metavar="PATH",
                   help="the python (3.8 or newer) that runs kimitui's agent on each SSH host (default python3)")
    p.add_argument("--theme", default=None, help="a theme by name")


def read_hosts_file(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise CliError(f"--hosts-file {path}: {exc.strerror or exc}") from None
    hosts = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    return [h for h in hosts if h]


def check(args: argparse.Namespace) -> list[str]:
    """The SSH hosts named (maybe none); CliError (one line) for a command line that names no fleet or two."""
    hosts = list(args.hosts) + (read_hosts_file(args.hosts_file) if args.hosts_file is not None else [])
    if len(set(hosts)) != len(hosts):
        dup = next(h for h in hosts if hosts.count(h) > 1)
        raise CliError(f"fleet: host {printable(dup)} is named twice")
    if args.prometheus == "auto" and args.demo is None:
        raise CliError("fleet: --prometheus auto starts a Prometheus for the demo's hosts: add --demo N (a fleet "
                       "of your own: --prometheus URL of its Prometheus)")
    given = [bool(hosts), args.prometheus is not None and args.prometheus != "auto", args.demo is not None]
    if sum(given) != 1:
        raise CliError("fleet: name one fleet: HOST... (or --hosts-file), --prometheus URL, or --demo N "
                       "(with --prometheus auto to read it through a real Prometheus)")
    if args.prometheus not in (None, "auto"):
        from urllib.parse import urlsplit

        url = urlsplit(args.prometheus)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise CliError(f"fleet: --prometheus {printable(args.prometheus)[:80]}: not an http(s) URL "
                           "(http://prometheus:9090)")
    if args.demo is not None and not 1 <= args.demo <= MAX_DEMO:
        raise CliError(f"fleet: --demo {args.demo}: 1 to {MAX_DEMO} hosts")
    if not 0.1 <= args.interval <= 60:
        raise CliError(f"fleet: --interval {args.interval:g} is out of range (0.1 to 60 s)")
    if args.count < 0:
        raise CliError("fleet: --count must be 0 (until stopped) or more")
    return hosts


class FleetRounds:
    """A reader's rounds as a session source."""

    def __init__(self, reader: Any, interval: float, count: int | None = None) -> None:
        self.reader, self.interval, self.count = reader, interval, count

    async def events(self) -> AsyncIterator[Event]:
        from kimitui.fleet.reader import rounds

        async for ev in rounds(self.reader, self.interval, self.count):
            yield ev


def json_round(ev: FleetSample) -> str:
    """One round as a JSON line: the sample's fields, each host's with what needs the operator (``needs``)."""
    out = ev.to_dict()
    out.pop("type", None)
    for host, row in zip(ev.hosts, out["hosts"], strict=True):
        row["needs"] = attention(host)[1]
    return json.dumps(out, separators=(",", ":"), allow_nan=False)


def demo_faults(count: int) -> dict[str, GpuFaults]:
    """The demo fleet's hosts (``fleet.demo_model``, as ``DemoFleet`` makes them) by name, with what their drivers
    report wrong: the XIDs and the slow links, which a host's dashboard (``kimitui demo``) then shows too."""
    from kimitui.fleet.demo_model import MAX_LINK, demo_hosts
    from kimitui.hosts.sim.layout import GpuFaults

    return {h.name: GpuFaults(xid={g.index: g.xid for g in h.gpus if g.xid},
                              pcie_best={g.index: g.link for g in h.gpus if tuple(g.link) != tuple(MAX_LINK)})
            for h in demo_hosts(count)}


@contextlib.asynccontextmanager
async def open_reader(args: argparse.Namespace, hosts: list[str]) -> AsyncIterator[tuple[Any, str, Callable[
        [str], list[str] | None]]]:
    """(reader, what it is in words, a host's dashboard argv) for the command line; everything it started ends on
    exit."""
    me = [sys.executable, "-m", "kimitui"]
    if args.demo is not None:
        from kimitui.fleet.demo import DemoFleet, DemoReader

        print(f"starting {args.demo} simulated hosts ...", file=sys.stderr)
        async with DemoFleet(args.demo) as fleet:
            faults = demo_faults(args.demo)

            def demo_dashboard(name: str) -> list[str]:
                # a simulated host of its own, as each of these is, whose driver reports the row's XID and link
                return [*me, "demo", "--interval", "0.5", *(faults[name].words() if name in faults else [])]

            if args.prometheus == "auto":
                from kimitui.fleet.prometheus import PrometheusReader
                from kimitui.fleet.prometheus_server import (
                    PrometheusFailed,
                    PrometheusMissing,
                    ScrapeTarget,
                    start_prometheus_async,
                )

                print("starting Prometheus to scrape them ...", file=sys.stderr)
                try:
                    server = await start_prometheus_async([ScrapeTarget(a.name, f"127.0.0.1:{a.port}")
                                                           for a in fleet.hosts])
                except (PrometheusMissing, PrometheusFailed) as exc:
                    raise CliError(f"fleet: {exc}") from None
                reader = PrometheusReader(server.url)
                try:
                    print(f"Prometheus at {server.url} (pid {server.pid})", file=sys.stderr)
                    yield reader, f"{args.demo} simulated hosts through Prometheus", demo_dashboard
                finally:
                    await reader.close()
                    await server.aclose()
            else:
                reader = DemoReader(fleet.hosts)
                try:
                    yield reader, f"{args.demo} simulated hosts", demo_dashboard
                finally:
                    await reader.close()
        return
    if args.prometheus is not None:
        from kimitui.fleet.prometheus import PrometheusReader

        reader = PrometheusReader(args.prometheus)
        try:
            # Prometheus names hosts as DCGM does (their hostnames): the SSH dashboard of that name, where reachable
            yield reader, f"Prometheus at {args.prometheus}", lambda name: [*me, "connect", name]
        finally:
            await reader.close()
        return
    from kimitui.fleet.ssh_reader import SshFleetReader
    from kimitui.hosts.ssh import SshHost
    from kimitui.hosts.telemetry import TelemetrySource

    streams = {}
    for target in hosts:
        try:
            host = SshHost(target, accept_new_host_key=args.accept_new_host_key,
                           python=args.remote_python or "python3")
        except ValueError as exc:
            raise CliError(f"fleet: {printable(str(exc))}") from None
        streams[target] = TelemetrySource(host, interval=min(args.interval, 2.0))
    reader = SshFleetReader(streams, args.interval)
    try:
        yield reader, f"{len(hosts)} hosts over SSH", lambda name: [*me, "connect", name]
    finally:
        await reader.close()


async def run_fleet(args: argparse.Namespace) -> int:
    from kimitui.core.session import recorded_session

    hosts = check(args)
    async with open_reader(args, hosts) as (reader, words, dashboard):
        session = recorded_session("fleet", meta={"command": "fleet", "source": reader.source, "where": words})
        assert session.recorder is not None
        print(f"recording this session to {session.recorder.path}", file=sys.stderr)
        try:
            if args.json:
                source = FleetRounds(reader, args.interval, args.count or None)
                said = ""
                async with contextlib.aclosing(source.events()) as events:
                    async for ev in events:
                        session.publish(ev)
                        if isinstance(ev, FleetSample):
                            print(json_round(ev), flush=True)
                            if ev.error != said:  # the source's trouble said once, on stderr too
                                said = ev.error
                                print(f"kimitui: fleet: {printable(said) or 'the source answers again'}",
                                      file=sys.stderr)
                return 1 if said else 0  # the last round could not read the source
            from kimitui.tui.fleet_app import FleetApp

            app = FleetApp(session, sources=[FleetRounds(reader, args.interval)], open_host=dashboard,
                           title=f"kimitui fleet: {words}", theme=args.theme)
            await app.run_async()
            return app.return_code or 0
        finally:
            session.close()
            print(f"session recorded to {session.recorder.path} (replay: kimitui replay {session.recorder.path})",
                  file=sys.stderr)


def cmd_fleet(args: argparse.Namespace) -> int:
    from kimitui.live.targets import run_command

    return run_command(lambda: run_fleet(args))


class ReplayedRounds:
    """A recorded fleet run's events at their recorded pace (SPEED times faster)."""

    def __init__(self, reader: Any, speed: float) -> None:
        self.reader, self.speed = reader, speed

    async def events(self) -> AsyncIterator[Event]:
        import asyncio

        last: float | None = None
        for ev in self.reader.events():
            if last is not None and ev.t > last:
                await asyncio.sleep(min(10.0, (ev.t - last) / self.speed))
            last = ev.t
            yield ev


def is_fleet_run(reader: Any) -> bool:
    return FleetSample.type in reader.types


def replay_fleet(reader: Any, speed: float, theme: str | None) -> int:
    """A recorded fleet run in the fleet view, at its pace; a host's dashboard cannot be opened from a replay."""
    from kimitui.core.session import Session
    from kimitui.tui.fleet_app import FleetApp

    app = FleetApp(Session(), sources=[ReplayedRounds(reader, speed)], open_host=lambda _name: None,
                   title=f"kimitui fleet: replay of {reader.path.name}", theme=theme)
    app.run()
    return app.return_code or 0
