"""The demo fleet's hosts as a process: ``python -m kimitui.fleet.demo_hosts --count N``.

Each simulated host (``demo_model``) listens on a loopback port of its own, as a host's exporters do:

- ``GET /metrics``: its GPUs in the DCGM exporter's text (``dcgm_text``), for a Prometheus to scrape;
- ``GET /vllm/metrics``: its vLLM's request gauges; 503 while its service is stopped;
- ``GET /kimitui/sample``: the host as a ``FleetHost`` (JSON): what our agent would say of it over SSH (its
  processes counted by GPU, the service's among them), read by ``demo_reader``.

It prints one JSON line, ``{"hosts": [{"name": "demo-01", "port": P}, ...]}``, then serves until its standard
input closes. Lines on standard input change a host: ``down NAME`` (its port closes: connections are refused),
``up NAME`` (it listens again on the same port), ``slow NAME SECONDS`` (every answer waits that long; 0 ends it).
A bad line is answered on standard error and changes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import sys
import time

from kimitui.fleet.dcgm_text import dcgm_text, vllm_text
from kimitui.fleet.demo_model import MAX_LINK, MODEL, DemoHost, demo_hosts
from kimitui.hosts.sim.http11 import HttpServer, Request, Responder


class ServedHost:
    """One host's server: its model, its port, down or slow as told."""

    def __init__(self, host: DemoHost, port: int = 0) -> None:
        self.host = host
        self.port = port
        self.slow_s = 0.0
        self.server: HttpServer | None = None

    async def up(self) -> None:
        if self.server is None:
            self.server = HttpServer(self.handle, port=self.port)
            await self.server.start()
            self.port = self.server.port

    async def down(self) -> None:
        if self.server is not None:
            server, self.server = self.server, None
            await server.close()

    async def handle(self, request: Request, out: Responder) -> None:
        if self.slow_s > 0:
            await asyncio.sleep(self.slow_s)
        path = request.path.split("?", 1)[0]
        now = self.host.at(time.time())
        if path == "/metrics":
            bus = {g.index: g.bus_id for g in self.host.gpus}
            links = {g.index: (*g.link, *MAX_LINK) for g in self.host.gpus}
            await out.send(200, dcgm_text(now, bus, links), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/vllm/metrics":
            if self.host.service:
                await out.send(200, vllm_text(now, MODEL), "text/plain; version=0.0.4; charset=utf-8")
            else:
                await out.send(503, b"service stopped\n", "text/plain")
        elif path == "/kimitui/sample":
            await out.send_json(200, dataclasses.asdict(now))
        else:
            await out.send(404, b"not found\n", "text/plain")


async def command(line: str, hosts: dict[str, ServedHost]) -> str:
    """One control line applied; "" when done, else why not (one line)."""
    words = line.split()
    if not words:
        return ""
    if words[0] not in ("down", "up", "slow") or len(words) < 2 or words[1] not in hosts:
        return f"not a command: {line.strip()[:80]!r} (down NAME, up NAME, slow NAME SECONDS)"
    served = hosts[words[1]]
    if words[0] == "down":
        await served.down()
    elif words[0] == "up":
        await served.up()
    else:
        try:
            served.slow_s = max(0.0, float(words[2]))
        except (IndexError, ValueError):
            return f"slow needs seconds: {line.strip()[:80]!r}"
    return ""


async def serve(count: int, seed: int) -> None:
    hosts = {h.name: ServedHost(h) for h in demo_hosts(count, seed)}
    for served in hosts.values():
        await served.up()
    print(json.dumps({"hosts": [{"name": n, "port": s.port} for n, s in hosts.items()]}), flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        while line := (await reader.readline()).decode(errors="replace"):
            if why := await command(line, hosts):
                print(f"demo_hosts: {why}", file=sys.stderr, flush=True)
            else:
                print(json.dumps({"done": line.strip()}), flush=True)
    finally:
        for served in hosts.values():
            with contextlib.suppress(Exception):
                await served.down()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kimitui.fleet.demo_hosts", description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if not 1 <= args.count <= 4096:
        p.error("--count: 1 to 4096 hosts")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.count, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
