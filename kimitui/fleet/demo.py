"""The demo fleet (``kimitui fleet --demo N``): its simulated hosts in a process of their own
(``demo_hosts``: their CPU is theirs, as remote hosts' would be), and the reader of them (``DemoReader``: each
host's ``/kimitui/sample``, all at once, what our agent over SSH would say of it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass, replace

import httpx

from kimitui.core.events.fleet import FleetHost, FleetSource
from kimitui.core.typed import FieldTypeError, build
from kimitui.resources import package_root

_PKG_ROOT = package_root()
START_S = 30.0


@dataclass(frozen=True, slots=True)
class DemoAddress:
    name: str
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class DemoFleet:
    """``async with DemoFleet(8) as fleet``: the hosts process started, ``fleet.hosts`` their addresses;
    ``await fleet.tell("down demo-03")`` changes one (answered once done); the process ends on exit."""

    def __init__(self, count: int, seed: int = 0) -> None:
        self.count, self.seed = count, seed
        self.proc: asyncio.subprocess.Process | None = None
        self.hosts: list[DemoAddress] = []

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    async def __aenter__(self) -> DemoFleet:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_PKG_ROOT, os.environ.get("PYTHONPATH")]))}
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "kimitui.fleet.demo_hosts", "--count", str(self.count), "--seed", str(self.seed),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env, start_new_session=True)
        try:
            assert self.proc.stdout is not None
            line = await asyncio.wait_for(self.proc.stdout.readline(), START_S)
            self.hosts = [DemoAddress(str(h["name"]), int(h["port"])) for h in json.loads(line)["hosts"]]
        except (TimeoutError, ValueError, KeyError, TypeError) as exc:
            await self.close()
            raise RuntimeError(f"the demo hosts did not start: {type(exc).__name__}") from None
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def tell(self, line: str) -> None:
        """Send one control line (``down NAME``, ``up NAME``, ``slow NAME S``) and wait until it is done."""
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()
        answer = await asyncio.wait_for(self.proc.stdout.readline(), START_S)
        if json.loads(answer).get("done") != line.strip():
            raise RuntimeError(f"the demo hosts answered {answer!r} to {line!r}")

    async def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 5.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


class DemoReader:
    """The demo's hosts read directly, each on its own connection, all at once: within a round's deadline a
    host answers (up), refuses (down) or does not answer (slow: its last figures kept, said so)."""

    source: FleetSource = "demo"

    def __init__(self, hosts: list[DemoAddress], where: str = "") -> None:
        self.hosts = hosts
        self.where = where or f"{len(hosts)} simulated hosts"
        # a client (a connection pool) a host: one pool for them all assigns its queued requests to connections
        # in time that grows with their square (httpcore): 3.6 s a round at 256 hosts, 0.11 s this way
        self.clients = {h.name: httpx.AsyncClient(limits=httpx.Limits(max_connections=1)) for h in hosts}
        self.last: dict[str, FleetHost] = {}
        self.seen: dict[str, float] = {}

    async def _one(self, h: DemoAddress, deadline_s: float) -> FleetHost:
        last = self.last.get(h.name)
        try:
            resp = await self.clients[h.name].get(h.url + "/kimitui/sample", timeout=0.9 * deadline_s)
            resp.raise_for_status()
            host = build(FleetHost, resp.json())
        except httpx.TimeoutException:
            age = time.monotonic() - self.seen[h.name] if h.name in self.seen else None
            return replace(last or FleetHost(h.name), state="slow", age_s=age,
                           detail=f"no answer within {0.9 * deadline_s:.1f} s")
        except httpx.HTTPError as exc:
            return FleetHost(h.name, state="down", detail=_one_line(exc))
        except (ValueError, FieldTypeError) as exc:
            return FleetHost(h.name, state="down", detail=f"bad answer: {_one_line(exc)}")
        host = replace(host, name=h.name)
        self.last[h.name], self.seen[h.name] = host, time.monotonic()
        return host

    async def read(self, deadline_s: float) -> list[FleetHost]:
        return list(await asyncio.gather(*(self._one(h, deadline_s) for h in self.hosts)))

    async def close(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self.clients.values()))


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, httpx.ConnectError):
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, ConnectionRefusedError):
            cause = cause.__cause__ or cause.__context__
        return "connection refused" if cause is not None else "cannot connect: " + (str(exc) or "no route")[:120]
    return (" ".join(str(exc).split()) or type(exc).__name__)[:160]


__all__ = ["DemoAddress", "DemoFleet", "DemoReader"]
