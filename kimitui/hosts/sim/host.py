"""``SimHost``: a simulated 8-GPU host on this machine, owning everything it starts.

    async with SimHost(gpus=8, stuck_workers=2, nvml_monitor=True) as host:
        host.api_url        # http://127.0.0.1:PORT, OpenAI-compatible
        host.agent_args()   # ["--sim-dir", DIR, "--dev-prefix", DIR/dev/nvidia]
        await host.stop_service(); await host.start_service()

It is a ``LocalHost``: commands, files and signals act on this machine, where the simulated GPU holders
are real processes. ``close`` SIGKILLs everything the sim started (found by POSIX session and by recorded
(pid, start time)), waits until it is gone, and removes the directory.

``engine="vllm"``: the service is a real vLLM (``real_engine.py``), its processes holding the simulated GPUs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from kimitui.hosts.base import HostError, ProcId
from kimitui.hosts.local import LocalHost
from kimitui.hosts.sim.batching import BatchingModel
from kimitui.hosts.sim.layout import (
    DEFAULT_GPU_NAME,
    DEFAULT_RESERVED_MIB,
    DEFAULT_TOTAL_MIB,
    GpuFaults,
    SimGpu,
    SimLayout,
    create_layout,
    make_gpus,
    remove_stale_layouts,
    write_atomic,
    write_model_cache,
)
from kimitui.hosts.sim.openai_server import DEFAULT_MODEL, FaultPlan, batching_to_args
from kimitui.hosts.sim.quirks import EngineQuirks
from kimitui.hosts.sim.real_engine import ENGINES, HEALTH_POLL_S, READY_TIMEOUT_S, VllmEngine, say_stderr
from kimitui.hosts.sim.service import DEFAULT_WORKER_MEM_MIB, STUCK_RANKS_ENV
from kimitui.hosts.sim.teardown import alive, kill_everything, posix_session_members
from kimitui.hosts.sim.tools import install_tools
from kimitui.hosts.sim.watchdog import OWNER_ENV
from kimitui.hostside.procfs import start_time_of as read_start_time
from kimitui.hostside.signals import guarded_signal
from kimitui.resources import package_root

_PKG_ROOT = package_root()
"""The folder holding the kimitui package: the simulated processes import it from there."""
POLL_S = 0.02
ORPHANS_MIB = 4096
"""What the demo's exited holder (``orphans_gpu``) keeps: it fits beside a service worker (92,411 of 97,887 MiB)."""


class SimHost(LocalHost):
    """A simulated GPU host: N GPUs, a simulated vLLM service, an optional monitor and stray holder."""

    def __init__(self, *, gpus: int = 8, gpu_name: str = DEFAULT_GPU_NAME, total_mib: int = DEFAULT_TOTAL_MIB,
                 reserved_mib: int = DEFAULT_RESERVED_MIB, worker_mem_mib: int = DEFAULT_WORKER_MEM_MIB,
                 stuck_workers: int = 2, stray_holder: bool | int = False, nvml_monitor: bool = True,
                 model: str = DEFAULT_MODEL, load_time: float = 0.2, batching: BatchingModel | None = None,
                 faults: FaultPlan | None = None, ready_timeout: float = 30.0, name: str = "sim",
                 python: str | None = None, persistence_daemon: bool = False,
                 quirks: EngineQuirks | None = None, orphans_gpu: int | None = None, engine: str = "sim",
                 engine_python: str | None = None, gpu_faults: GpuFaults | None = None) -> None:
        super().__init__(name=name, python=python)
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}")
        if engine != "sim" and (stuck_workers or engine_python is None):
            raise ValueError("a real engine needs its python, and its workers stop as they do (no stuck workers)")
        if not 0 <= stuck_workers <= gpus:
            raise ValueError("stuck_workers must be between 0 and the number of GPUs")
        if not 0 <= worker_mem_mib <= total_mib - reserved_mib:
            raise ValueError("worker memory does not fit on the simulated GPU")
        if orphans_gpu is not None and worker_mem_mib + ORPHANS_MIB > total_mib - reserved_mib:
            raise ValueError("the exited holder's memory does not fit beside a worker on the simulated GPU")
        self.gpus: list[SimGpu] = make_gpus(gpus, name=gpu_name, total_mib=total_mib, reserved_mib=reserved_mib)
        self.gpu_faults = gpu_faults or GpuFaults()
        if any(not 0 <= i < gpus for i in [*self.gpu_faults.xid, *self.gpu_faults.pcie_best]):
            raise ValueError("a GPU fault names a GPU the simulated host does not have")
        for i, link in self.gpu_faults.pcie_best.items():
            self.gpus[i] = dataclasses.replace(self.gpus[i], pcie_best=list(link))
        self.worker_mem_mib = worker_mem_mib
        self.stuck_gpus: tuple[int, ...] = tuple(range(gpus - stuck_workers, gpus))
        """TP ranks (= GPU indexes) whose workers ignore SIGTERM: the last ``stuck_workers``."""
        self.stray_gpu: int | None = None if stray_holder is False else \
            (0 if stray_holder is True else int(stray_holder))
        self.nvml_monitor = nvml_monitor
        self.persistence_daemon = persistence_daemon
        self.orphans_gpu = orphans_gpu
        """A GPU where a holder forks two children that inherit its context, then is SIGKILLed: its memory stays,
        under its dead pid, while they live (or None)."""
        self.orphans: tuple[ProcId, list[ProcId]] | None = None
        """(the dead holder as it was, its children), once started."""
        self.daemon_proc: ProcId | None = None
        """The simulated nvidia-persistenced (``persistence_daemon``), or None."""
        self.model = model
        self.load_time = load_time
        if batching is None:
            from kimitui.hostside.allreduce import allreduce_speedup

            batching = BatchingModel.default(model, gpus, allreduce_speedup())
        self.batching = batching
        self.faults = faults or FaultPlan()
        self.quirks = quirks or EngineQuirks()
        """How the simulated service departs from vLLM (``quirks.py``)."""
        self.engine: VllmEngine | None = None if engine == "sim" else \
            VllmEngine(str(engine_python), gpus, worker_mem_mib)
        """The real engine run as the service (or None: the simulated one)."""
        self.ready_timeout = ready_timeout if self.engine is None else max(ready_timeout, READY_TIMEOUT_S)
        self._poll_s = POLL_S if self.engine is None else HEALTH_POLL_S
        self._layout: SimLayout | None = None
        self._tools: tuple[Path, Path] | None = None
        self._port = 0
        self._service: subprocess.Popen[bytes] | None = None
        self.service_proc: ProcId | None = None
        """The API server now running (main PID of the service), or None."""
        self.monitor_proc: ProcId | None = None
        self.stray_proc: ProcId | None = None
        self._posix_sessions: set[int] = set()
        self._started: set[ProcId] = set()
        self._children: list[subprocess.Popen[bytes]] = []
        self._pidfds: dict[int, asyncio.AbstractEventLoop] = {}
        self._closed = False

    # ----- paths and addresses -----

    @property
    def layout(self) -> SimLayout:
        if self._layout is None:
            raise HostError(f"{self.name}: the simulated host is not started")
        return self._layout

    @property
    def sim_dir(self) -> str:
        return str(self.layout.root)

    @property
    def dev_prefix(self) -> str:
        return self.layout.dev_prefix

    @property
    def pidfile(self) -> str:
        return str(self.layout.pidfile)

    @property
    def port(self) -> int:
        return self._port

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def nvidia_smi(self) -> str:
        """The simulated nvidia-smi (modes, persistence, the GPU reset): kimitui.hosts.sim.tools."""
        return str(self._tools[0]) if self._tools else "nvidia-smi"

    @property
    def systemctl(self) -> str:
        return str(self._tools[1]) if self._tools else "systemctl"

    @property
    def service_pid(self) -> int | None:
        return self.service_proc.pid if self.service_proc else None

    def agent_args(self) -> list[str]:
        """Extra command-line arguments for the agent: where the simulated driver's files are."""
        return ["--sim-dir", self.sim_dir, "--dev-prefix", self.dev_prefix]

    # ----- lifecycle -----

    async def __aenter__(self) -> SimHost:
        await self.start()
        return self

    async def start(self) -> None:
        """Make the directory, start the monitor / stray holder, start the service and wait until ready."""
        if self._layout is not None:
            raise HostError(f"{self.name}: already started")
        remove_stale_layouts()  # those of a sim killed before it could remove its own
        self._layout = create_layout(self.gpus)
        if self.gpu_faults.xid:
            xids = {str(k): v for k, v in self.gpu_faults.xid.items()}
            write_atomic(self._layout.root / "xid.json", json.dumps(xids))
        write_model_cache(self._layout, self.model)
        self._tools = install_tools(self._layout.root)
        try:
            # the holders start while the service loads; each is waited for below
            monitor = self._spawn_holder(["monitor", "--title", "nv-hostengine",
                                          *self._gpu_flags(range(len(self.gpus)))]) if self.nvml_monitor else None
            stray = self._spawn_holder(["stray", "--title", "python3", *self._gpu_flags([self.stray_gpu])]) \
                if self.stray_gpu is not None else None
            if self.persistence_daemon:
                self.daemon_proc = self._spawn_persistence_daemon()
            orphaner = self._spawn_holder(["orphaner", "--title", "python3", "--mem-mib", str(ORPHANS_MIB),
                                           *self._gpu_flags([self.orphans_gpu])]) \
                if self.orphans_gpu is not None else None
            if self.engine is not None:
                await self._prepare_engine()
            await self.start_service()
            if orphaner is not None:
                self.orphans = await self._orphan(*orphaner)
            if monitor is not None:
                self.monitor_proc = await self._holder_ready(*monitor)
            if stray is not None:
                self.stray_proc = await self._holder_ready(*stray)
        except BaseException:
            await self.close()
            raise

    async def start_service(self, *, wait: bool = True) -> ProcId:
        """Start the API server (which starts its workers); by default wait until /health is 200."""
        if self.service_proc is not None and alive(self.service_proc):
            raise HostError(f"{self.name}: the service is already running (pid {self.service_proc.pid})")
        layout = self.layout
        with contextlib.suppress(FileNotFoundError):
            layout.port_file.unlink()
        if self.engine is not None:
            return await self._start_engine(wait)
        argv = [self.python, "-S", "-m", "kimitui.hosts.sim.service", "--model", self.model,
                "--tensor-parallel-size", str(len(self.gpus)), "--host", "127.0.0.1", "--port", str(self._port),
                "--sim-dir", str(layout.root), "--worker-mem-mib", str(self.worker_mem_mib),
                "--load-time", str(self.load_time), "--fault", self.faults.mode,
                "--fault-every", str(self.faults.every), "--quirks", self.quirks.spec(),
                *batching_to_args(self.batching)]
        env = self._env()
        env[STUCK_RANKS_ENV] = ",".join(map(str, self.stuck_gpus))
        env["HF_HOME"] = str(layout.hf_home)
        with open(layout.service_log, "ab") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                    start_new_session=True)
        self._service = proc
        pid = self._record(proc)
        self.service_proc = pid
        deadline = time.monotonic() + self.ready_timeout
        while not layout.port_file.exists():
            self._check_running(proc)
            await self._tick(deadline, "the API server to bind its port")
        self._port = int(layout.port_file.read_text().strip())
        if wait:
            await self.wait_ready(deadline=deadline)
        return pid

    async def wait_ready(self, *, timeout: float | None = None, deadline: float | None = None) -> float:
        """Poll /health until 200; returns the seconds waited. Raises HostError on timeout or exit."""
        start = time.monotonic()
        deadline = deadline or start + (timeout if timeout is not None else self.ready_timeout)
        while True:
            if self._service is not None:
                self._check_running(self._service)
            if await self.health() == 200:
                return time.monotonic() - start
            await self._tick(deadline, "/health to answer 200")

    async def health(self) -> int | None:
        """The status of GET /health, or None when nothing answers."""
        return await http_status("127.0.0.1", self._port, "/health") if self._port else None

    async def stop_service(self, *, timeout: float = 10.0) -> float:
        """``stop`` as a service manager does it: SIGTERM the main PID, wait until it has exited.
        Returns the seconds it took. Stuck workers are left running, as in real life."""
        proc = self.service_proc
        if proc is None:
            raise HostError(f"{self.name}: no service to stop")
        start = time.monotonic()
        guarded_signal(proc.pid, proc.start_time, signal.SIGTERM)
        deadline = start + timeout
        while alive(proc):
            self._reap()
            await self._tick(deadline, f"the API server (pid {proc.pid}) to exit after SIGTERM")
        self._reap()
        self.service_proc = None
        return time.monotonic() - start

    def service_tree(self) -> list[ProcId]:
        """Every live process of the service's POSIX session (API server, its workers, orphaned workers)."""
        if self._service is None:
            return []
        return posix_session_members([self._service.pid])

    def gpu_holders(self) -> dict[int, list[ProcId]]:
        """GPU index -> every live process whose holder record claims memory there, oldest first (what the
        simulated driver counts: after a restart beside a stuck orphan, a GPU has two)."""
        found: list[tuple[ProcId, list[int]]] = []
        for path in self.layout.holders_dir.glob("*.json"):
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                rec = json.loads(path.read_text())
                proc = ProcId(int(rec["pid"]), int(rec["start_time"]))
                if alive(proc):
                    found.append((proc, [int(g) for g in rec["mem_mib"]]))
        out: dict[int, list[ProcId]] = {}
        for proc, gpus in sorted(found, key=lambda item: (item[0].start_time, item[0].pid)):
            for gpu in gpus:
                out.setdefault(gpu, []).append(proc)
        return dict(sorted(out.items()))

    def worker_holders(self) -> dict[int, ProcId]:
        """GPU index -> the newest live holder there: the current service's worker once it has loaded."""
        return {gpu: procs[-1] for gpu, procs in self.gpu_holders().items()}

    def started_procs(self) -> list[ProcId]:
        """Every process the sim started that is still alive (service POSIX session, monitor, stray)."""
        return sorted(set(posix_session_members(self._posix_sessions)) | {p for p in self._started if alive(p)},
                      key=lambda p: p.pid)

    async def close(self) -> None:
        """SIGKILL everything the sim started, wait until it is gone, remove the directory."""
        if self._closed:
            return
        self._closed = True
        for _ in range(2):  # a second pass catches a worker forked while the first one ran
            left = await kill_everything(self._posix_sessions, self._started, timeout=10.0)
            self._reap()
        self._unwatch_all()
        if self._layout is not None:
            shutil.rmtree(self._layout.root, ignore_errors=True)
        self.service_proc = None
        if self.engine is not None:
            self.engine.release()  # everything it started is gone: another vLLM may run
        if left:
            raise HostError(f"{self.name}: processes survived SIGKILL: {', '.join(str(p.pid) for p in left)}")

    # ----- the real engine (real_engine.py) -----

    async def _prepare_engine(self) -> None:
        assert self.engine is not None
        await self.engine.take_lock(say_stderr)
        self.layout.load_json.unlink()  # the load is the engine's processes' own (their holder records)
        say_stderr(f"making the demo's model (a tiny random Llama) with {self.engine.python} ...")
        await self.engine.prepare(self.layout.root, self.layout.service_log)
        if not self._port:
            from kimitui.hosts.sim.openai_server import free_port

            self._port = free_port("127.0.0.1")
        say_stderr(f"starting vLLM (TP={len(self.gpus)}): /health answers in 45 s or more; its log: "
                   f"{self.layout.service_log}")

    async def _start_engine(self, wait: bool) -> ProcId:
        """The real API server; its pidfile and port written here (the service manager's knowledge), the
        pidfile removed when it exits."""
        assert self.engine is not None
        layout = self.layout
        proc = self.engine.popen(layout.root, self._port, layout.service_log, self._env()[OWNER_ENV], _PKG_ROOT)
        self._service = proc
        pid = self._record(proc, on_exit=lambda: self._forget_pidfile(proc.pid))
        self.service_proc = pid
        layout.pidfile.write_text(f"{proc.pid}\n")
        layout.port_file.write_text(f"{self._port}\n")
        if wait:
            await self.wait_ready()
        return pid

    def _forget_pidfile(self, pid: int) -> None:
        with contextlib.suppress(OSError, ValueError):
            if int(self.layout.pidfile.read_text().strip()) == pid:
                self.layout.pidfile.unlink()

    # ----- helpers -----

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PKG_ROOT, env.get("PYTHONPATH", "")) if p)
        env[OWNER_ENV] = f"{os.getpid()}:{read_start_time(os.getpid())}"
        env.pop(STUCK_RANKS_ENV, None)
        return env

    @staticmethod
    def _gpu_flags(indexes: Iterable[int]) -> list[str]:
        flags: list[str] = []
        for i in indexes:
            flags += ["--gpu", str(i)]
        return flags

    def _spawn_holder(self, args: list[str]) -> tuple[subprocess.Popen[bytes], str]:
        """Start a holder in its own session (a monitor or a stray is not part of the service)."""
        argv = [self.python, "-S", "-m", "kimitui.hosts.sim.worker", *args, "--sim-dir", self.sim_dir]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env=self._env(), start_new_session=True)
        self._record(proc)
        return proc, args[0]

    def _spawn_persistence_daemon(self) -> ProcId:
        """A simulated nvidia-persistenced: its executable really is DIR/usr/bin/nvidia-persistenced (a copy of
        sleep: /proc/PID/exe names it, as on a real host) and it holds every GPU's device file open, mapped
        none, as the real daemon does. The cleanup spares it by that executable."""
        exe = self.layout.root / "usr" / "bin" / "nvidia-persistenced"
        exe.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(shutil.which("sleep") or "/bin/sleep", exe)
        paths = [self.layout.gpu_dev(g.index) for g in self.gpus] + [self.layout.ctl_dev, self.layout.uvm_dev]
        fds = [os.open(p, os.O_RDWR | os.O_CLOEXEC) for p in paths]
        try:
            proc = subprocess.Popen([str(exe), "infinity"], pass_fds=fds, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        finally:
            for fd in fds:
                os.close(fd)
        return self._record(proc)

    async def _orphan(self, proc: subprocess.Popen[bytes], role: str) -> tuple[ProcId, list[ProcId]]:
        """Once the orphaner has forked its children, SIGKILL it (and reap it): they keep its context."""
        holder = await self._holder_ready(proc, role)
        children = [p for p in posix_session_members([holder.pid]) if p != holder]
        guarded_signal(holder.pid, holder.start_time, signal.SIGKILL)
        await asyncio.to_thread(proc.wait)
        return holder, children

    async def _holder_ready(self, proc: subprocess.Popen[bytes], role: str) -> ProcId:
        """Wait for the holder's ``ready`` line: its device files are open (and mapped) from then on."""
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), self.ready_timeout)
        except TimeoutError:
            raise HostError(f"{self.name}: the {role} holder did not start in {self.ready_timeout:.0f}s") from None
        proc.stdout.close()
        if line.strip() != b"ready":
            raise HostError(f"{self.name}: the {role} holder failed to start (rc {proc.poll()})")
        start = read_start_time(proc.pid)
        return ProcId(proc.pid, start if start is not None else -1)

    def _record(self, proc: subprocess.Popen[bytes], on_exit: Callable[[], None] | None = None) -> ProcId:
        self._children.append(proc)
        self._watch_exit(proc, on_exit)
        self._posix_sessions.add(proc.pid)  # start_new_session: the pid is the session id
        start = read_start_time(proc.pid)
        pid = ProcId(proc.pid, start if start is not None else -1)
        self._started.add(pid)
        return pid

    def _watch_exit(self, proc: subprocess.Popen[bytes], on_exit: Callable[[], None] | None = None) -> None:
        """Reap the child as soon as it exits (a pidfd becomes readable), so no zombie lingers in /proc."""
        try:
            loop = asyncio.get_running_loop()
            fd = os.pidfd_open(proc.pid)
        except (RuntimeError, OSError):
            return

        def exited() -> None:
            loop.remove_reader(fd)
            os.close(fd)
            self._pidfds.pop(fd, None)
            proc.poll()
            if on_exit is not None:
                on_exit()

        self._pidfds[fd] = loop
        loop.add_reader(fd, exited)

    def _reap(self) -> None:
        for child in self._children:
            child.poll()

    def _unwatch_all(self) -> None:
        for fd, loop in list(self._pidfds.items()):
            with contextlib.suppress(Exception):
                loop.remove_reader(fd)
            with contextlib.suppress(OSError):
                os.close(fd)
            self._pidfds.pop(fd, None)

    def _check_running(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is not None:
            tail = ""
            with contextlib.suppress(OSError):
                tail = self.layout.service_log.read_text(errors="replace")[-800:]
            what = "vLLM's API server" if self.engine is not None else "the simulated API server"
            raise HostError(f"{self.name}: {what} exited with {proc.returncode}: {tail}")

    async def _tick(self, deadline: float, what: str) -> None:
        if time.monotonic() >= deadline:
            raise HostError(f"{self.name}: timed out waiting for {what}")
        await asyncio.sleep(self._poll_s)


async def http_status(host: str, port: int, path: str, timeout: float = 2.0) -> int | None:
    """One GET over a fresh connection; the response's status code, or None if nothing answered."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, TimeoutError):
        return None
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        line = await asyncio.wait_for(reader.readline(), timeout)
        parts = line.split()
        return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None
    except (OSError, TimeoutError, ValueError):
        return None
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
