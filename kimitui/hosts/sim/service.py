"""The simulated vLLM API server process: ``python -m kimitui.hosts.sim.service --model M
--tensor-parallel-size N --sim-dir DIR ...``.

It writes its pidfile (``DIR/run/vllm.pid``), binds the HTTP port (written to ``DIR/run/api.port``), then
starts one TP worker per GPU as its own children (the real process tree: api server -> workers). /health
answers 200 once every worker holds its memory and 503 before, or after a worker died. GPU utilisation
follows the batch size through ``DIR/load.json``.

On SIGTERM or SIGINT it sends SIGTERM to its workers and exits at once, removing its pidfile: well-behaved
workers exit, the stuck ones (ranks listed in ``KIMITUI_SIM_STUCK_RANKS``, e.g. ``6,7``) ignore it and
stay behind as orphans holding their GPUs, as vLLM's do (vllm issue 55510). If the API server is killed
outright, its workers get SIGTERM from the kernel (PR_SET_PDEATHSIG) with the same outcome.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kimitui.hosts.sim.http11 import HttpServer
from kimitui.hosts.sim.layout import SimLayout, write_atomic
from kimitui.hosts.sim.openai_server import (
    DEFAULT_MODEL,
    FAULT_MODES,
    FaultPlan,
    OpenAIApp,
    add_batching_args,
    batching_from_args,
    quirks_arg,
)
from kimitui.hosts.sim.quirks import EngineQuirks
from kimitui.hosts.sim.watchdog import owner_alive, owner_from_env
from kimitui.hosts.sim.worker import IGNORE_SIGTERM_ENV

STUCK_RANKS_ENV = "KIMITUI_SIM_STUCK_RANKS"
DEFAULT_WORKER_MEM_MIB = int(96.9e9 / 2**20)  # 92,411 MiB: what vLLM held per GPU on the reference host
LOAD_WRITE_INTERVAL_S = 0.2
OWNER_CHECK_S = 0.5


def util_for_batch(batch: int, max_batch: int) -> int:
    """Simulated GPU utilisation: 0 when idle, 35 % with one stream, 100 % at the full batch."""
    if batch <= 0:
        return 0
    return min(100, round(35 + 65 * batch / max(1, max_batch)))


class LoadFile:
    """Writes ``{"util": N}`` to load.json at most every LOAD_WRITE_INTERVAL_S; the last value always lands."""

    def __init__(self, path: Path, max_batch: int) -> None:
        self._path = path
        self._max_batch = max_batch
        self._written = -1
        self._wanted = 0
        self._last = 0.0
        self._pending: asyncio.TimerHandle | None = None

    def on_batch(self, batch: int) -> None:
        self._wanted = util_for_batch(batch, self._max_batch)
        if self._pending is not None:
            return
        wait = self._last + LOAD_WRITE_INTERVAL_S - time.monotonic()
        if wait <= 0:
            self._flush()
        else:
            self._pending = asyncio.get_running_loop().call_later(wait, self._flush)

    def _flush(self) -> None:
        self._pending = None
        if self._wanted != self._written:
            with contextlib.suppress(OSError):
                write_atomic(self._path, json.dumps({"util": self._wanted}))
            self._written = self._wanted
            self._last = time.monotonic()


@dataclass
class SimRank:
    rank: int
    proc: subprocess.Popen[bytes]
    ready: bool = False
    buf: bytes = b""
    pidfd: int = -1
    exited: bool = False


@dataclass
class ApiServer:
    layout: SimLayout
    ns: argparse.Namespace
    workers: list[SimRank] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def ready(self) -> bool:
        return bool(self.workers) and all(w.ready and not w.exited for w in self.workers)

    def _spawn(self, rank: int, stuck: bool) -> SimRank:
        env = dict(os.environ)
        env.pop(IGNORE_SIGTERM_ENV, None)
        if stuck:
            env[IGNORE_SIGTERM_ENV] = "1"
        argv = [sys.executable, "-S", "-m", "kimitui.hosts.sim.worker", "tp-worker", "--title",
                f"VLLM::Worker_TP{rank}",
                "--sim-dir", str(self.layout.root), "--gpu", str(rank), "--mem-mib", str(self.ns.worker_mem_mib),
                "--load-time", str(self.ns.load_time), "--parent-pid", str(os.getpid())]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env)
        return SimRank(rank, proc)

    def start_workers(self) -> None:
        loop = asyncio.get_running_loop()
        stuck = {int(r) for r in os.environ.get(STUCK_RANKS_ENV, "").split(",") if r.strip().isdigit()}
        for rank in range(self.ns.tensor_parallel_size):
            w = self._spawn(rank, rank in stuck)
            self.workers.append(w)
            assert w.proc.stdout is not None
            fd = w.proc.stdout.fileno()
            os.set_blocking(fd, False)
            loop.add_reader(fd, self._on_output, w)
            w.pidfd = os.pidfd_open(w.proc.pid)
            loop.add_reader(w.pidfd, self._on_exit, w)

    def _on_output(self, w: SimRank) -> None:
        assert w.proc.stdout is not None
        fd = w.proc.stdout.fileno()
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        if not data:
            asyncio.get_running_loop().remove_reader(fd)
            return
        w.buf += data
        if b"ready\n" in w.buf:
            w.ready = True

    def _on_exit(self, w: SimRank) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(w.pidfd)
        os.close(w.pidfd)
        w.pidfd = -1
        w.proc.poll()
        w.exited = True
        print(f"worker TP{w.rank} (pid {w.proc.pid}) exited with {w.proc.returncode}", file=sys.stderr,
              flush=True)

    def signal_workers(self, sig: int) -> None:
        for w in self.workers:
            if w.exited or w.pidfd < 0:
                continue
            with contextlib.suppress(ProcessLookupError):
                # through the pidfd: a pid reused after the worker was reaped cannot be hit
                signal.pidfd_send_signal(w.pidfd, sig)

    async def watch_owner(self) -> None:
        owner = owner_from_env()
        while owner is not None:
            if not owner_alive(owner):
                # the owner was killed before it could tear the sim down: do it for it
                self.signal_workers(signal.SIGKILL)
                shutil.rmtree(self.layout.root, ignore_errors=True)
                self.stop.set()
                return
            await asyncio.sleep(OWNER_CHECK_S)


def _write_pidfile(layout: SimLayout) -> None:
    write_atomic(layout.pidfile, f"{os.getpid()}\n")


def _remove_pidfile(layout: SimLayout) -> None:
    with contextlib.suppress(OSError, ValueError):
        if int(layout.pidfile.read_text().strip()) == os.getpid():
            layout.pidfile.unlink()


async def _serve(ns: argparse.Namespace) -> None:
    layout = SimLayout(Path(ns.sim_dir))
    server = ApiServer(layout, ns)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.stop.set)
    _write_pidfile(layout)
    batching = batching_from_args(ns)
    load = LoadFile(layout.load_json, batching.max_batch)
    app = OpenAIApp(model=ns.model, batching=batching, faults=FaultPlan(ns.fault, ns.fault_every),
                    ready=server.ready, on_batch=load.on_batch, max_model_len=ns.max_model_len, quirks=ns.quirks)
    app.start()
    if ns.quirks.listen_delay_s:
        await asyncio.sleep(ns.quirks.listen_delay_s)  # an engine that opens its port once loaded
    http = HttpServer(app.handle, ns.host, ns.port)
    await http.start()
    write_atomic(layout.port_file, f"{http.port}\n")
    print(f"simulated vLLM API server pid {os.getpid()} on http://{ns.host}:{http.port}", file=sys.stderr,
          flush=True)
    server.start_workers()
    owner_task = loop.create_task(server.watch_owner())
    try:
        await server.stop.wait()
    finally:
        server.signal_workers(signal.SIGTERM)
        _remove_pidfile(layout)
        owner_task.cancel()
        await http.close()
        await app.stop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m kimitui.hosts.sim.service",
                                description="The simulated vLLM API server (run by SimHost).")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--tensor-parallel-size", type=int, default=8)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--max-model-len", type=int, default=262_144)
    p.add_argument("--sim-dir", required=True)
    p.add_argument("--worker-mem-mib", type=int, default=DEFAULT_WORKER_MEM_MIB)
    p.add_argument("--load-time", type=float, default=0.2)
    p.add_argument("--fault", default="none", choices=FAULT_MODES)
    p.add_argument("--fault-every", type=int, default=1)
    p.add_argument("--quirks", type=quirks_arg, default=EngineQuirks(),
                   help="behave like another engine (kimitui/hosts/sim/quirks.py)")
    add_batching_args(p)
    ns = p.parse_args(argv)
    asyncio.run(_serve(ns))


if __name__ == "__main__":
    main()
