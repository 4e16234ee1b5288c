"""Issue 39's scale figures: the fleet at 32 hosts x 8 GPUs at 1 Hz, and 256 hosts.

  query    one Prometheus query round (PrometheusReader.read) against a real Prometheus scraping 32 demo hosts:
           median and p90 over ROUNDS rounds, and how much of it is ours (the answer's decoding and fold, timed
           on the same answers) -- target <= 50 ms a round
  view     `kimitui fleet --demo 32` (and `--prometheus auto`) on a 120x40 pty for SECONDS: the CPU of the
           kimitui process alone (the demo hosts and Prometheus are processes of their own, counted apart) --
           target <= 5 % of a core
  big      the fleet app (Textual, headless) on 256 hosts x 8 GPUs read directly: each round's redraw, and the
           keys that scroll and sort -- target: no frame over 100 ms

Needs Prometheus (scripts/ci_prometheus_deps.sh). Run: ``python benchmarks/fleet.py [--only query,view,big]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pty
import select
import statistics
import struct
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.telemetry import cpu_seconds  # noqa: E402
from kimitui.fleet.demo import DemoFleet, DemoReader  # noqa: E402
from kimitui.fleet.prometheus import PrometheusReader, parse_answer  # noqa: E402
from kimitui.fleet.prometheus_server import ScrapeTarget, start_prometheus_async  # noqa: E402


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def query(hosts: int, rounds: int) -> None:
    async with DemoFleet(hosts) as fleet:
        server = await start_prometheus_async([ScrapeTarget(a.name, f"127.0.0.1:{a.port}") for a in fleet.hosts])
        reader = PrometheusReader(server.url)
        try:
            await reader.read(5.0)  # the first round also reads /api/v1/targets
            took, ours = [], []
            for _ in range(rounds):
                began = time.perf_counter()
                await reader.read(5.0)
                took.append((time.perf_counter() - began) * 1000)
                await asyncio.sleep(max(0.0, 1.0 - took[-1] / 1000))
            from kimitui.fleet.prometheus import QUERY

            payload = (await reader.client.post(server.url + "/api/v1/query", data={"query": QUERY})).json()
            for _ in range(20):
                began = time.perf_counter()
                reader.fold(parse_answer(payload))
                ours.append((time.perf_counter() - began) * 1000)
            size = len((await reader.client.post(server.url + "/api/v1/query", data={"query": QUERY})).content)
        finally:
            await reader.close()
            await server.aclose()
    med = statistics.median(took)
    print(f"  query  {hosts} hosts x 8 GPUs: a round {med:.1f} ms median, p90 {pct(took, 0.9):.1f} ms "
          f"({rounds} rounds at 1 Hz; answer {size / 1e3:.0f} KB); decoding and fold {statistics.median(ours):.1f} ms "
          f"of it   target <= 50 ms {'ok' if med <= 50 else 'MISS'}")


def view(hosts: int, seconds: float, prometheus: bool) -> None:
    argv = [sys.executable, "-m", "kimitui", "fleet", "--demo", str(hosts)] + (
        ["--prometheus", "auto"] if prometheus else [])
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "xterm-256color"
        os.chdir(ROOT)
        os.execv(sys.executable, argv)
    import fcntl
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    written = 0

    def drain(until: float) -> None:
        nonlocal written
        while time.monotonic() < until:
            r, _, _ = select.select([fd], [], [], 0.05)
            if r:
                try:
                    written += len(os.read(fd, 65536))
                except OSError:
                    return

    drain(time.monotonic() + (25.0 if prometheus else 10.0))  # started, the first rounds drawn
    before, bytes_before, t0 = cpu_seconds(pid), written, time.monotonic()
    drain(t0 + seconds)
    used = cpu_seconds(pid) - before
    span = time.monotonic() - t0
    os.write(fd, b"q")
    drain(time.monotonic() + 5.0)
    os.waitpid(pid, 0)
    share = 100 * used / span
    how = "through Prometheus" if prometheus else "read directly"
    print(f"  view   {hosts} hosts x 8 GPUs {how}, 1 Hz, 120x40 pty, {span:.0f} s: CPU {share:.2f} % of a core "
          f"(kimitui alone), {(written - bytes_before) / span * 30 / 1e3:.1f} KB drawn per 30 s   "
          f"target <= 5 % {'ok' if share <= 5 else 'MISS'}")


async def big(hosts: int, rounds: int) -> None:
    from kimitui.commands.fleet import FleetRounds
    from kimitui.core.session import Session
    from kimitui.tui.fleet_app import FleetApp

    async with DemoFleet(hosts) as fleet:
        reader = DemoReader(fleet.hosts)
        session = Session()
        app = FleetApp(session, sources=[FleetRounds(reader, 1.0, rounds)])
        frames: list[float] = []
        keys: dict[str, float] = {}
        real = app.redraw

        def timed() -> None:
            began = time.perf_counter()
            real()
            frames.append((time.perf_counter() - began) * 1000)

        app.redraw = timed  # type: ignore[method-assign]
        stalls: list[float] = []
        watching = True

        async def watch() -> None:  # the event loop's longest stall: a frame (or a key) that held the app
            last = time.perf_counter()
            while watching:
                await asyncio.sleep(0.005)
                now = time.perf_counter()
                stalls.append((now - last) * 1000 - 5.0)
                last = now

        async with app.run_test(size=(160, 50)) as pilot:
            while session.state.fleet is None or session.state.fleet.rounds < 2:  # started, the first rows made
                await asyncio.sleep(0.1)
            watcher = asyncio.ensure_future(watch())
            while session.state.fleet.rounds < rounds:
                await asyncio.sleep(0.1)
            rounds_stall = max(stalls)
            stalls.clear()
            for key in ("end", "pageup", "home", "enter", "s", "s", "down", "enter"):
                before = len(stalls)
                await pilot.press(key)
                await pilot.pause(0.2)
                keys[key] = max(stalls[before:], default=0.0)
            watching = False
            await watcher
        await reader.close()
    worst = max(rounds_stall, *keys.values())
    print(f"  big    {hosts} hosts x 8 GPUs, {rounds} rounds: redraw {statistics.median(frames):.1f} ms median, "
          f"{max(frames):.1f} ms worst; the event loop's longest stall {rounds_stall:.0f} ms in the later rounds, "
          f"{max(keys.values()):.0f} ms at a key ({', '.join(f'{k} {v:.0f}' for k, v in keys.items())})   "
          f"target: no frame over 100 ms {'ok' if worst <= 100 else 'MISS'}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="query,view,big")
    p.add_argument("--hosts", type=int, default=32)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--seconds", type=float, default=30.0)
    args = p.parse_args()
    parts = args.only.split(",")
    print(f"== fleet scale ({os.cpu_count()} cores)")
    if "query" in parts:
        asyncio.run(query(args.hosts, args.rounds))
    if "view" in parts:
        view(args.hosts, args.seconds, prometheus=False)
        view(args.hosts, args.seconds, prometheus=True)
    if "big" in parts:
        asyncio.run(big(256, 10))
    return 0


if __name__ == "__main__":
    sys.exit(main())
