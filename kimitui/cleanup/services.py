"""How a service is stopped, started and found: systemd unit, docker container, supervisor program,
or a plain main PID / pidfile.

Every command is an argument list run by the host's agent (``host.run``: no shell anywhere), so a name
holding shell metacharacters reaches the tool as one literal argument and does nothing else.
"""

from __future__ import annotations

import abc
import json
import shlex
import signal
from dataclasses import dataclass, field
from typing import Any

from kimitui.cleanup.hostprocs import HostProcs
from kimitui.hosts.base import CommandResult, Host, HostError


@dataclass(slots=True)
class ServiceProcs:
    """The processes a manager names for its service (roots; the executor adds their descendants)."""

    pids: list[int] = field(default_factory=list)
    main_pid: int | None = None
    unit: str | None = None
    container: str | None = None
    why: str = ""


class ServiceManager(abc.ABC):
    kind: str = "service"
    name: str = ""
    health_url: str | None = None

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name}"

    @abc.abstractmethod
    def stop_argv(self) -> list[str] | None:
        """The stop command (None when stopping is a signal, not a command)."""

    @abc.abstractmethod
    def start_argv(self) -> list[str] | None: ...

    @abc.abstractmethod
    async def processes(self, host: Host) -> ServiceProcs:
        """The service's processes now (empty when it is not running)."""

    async def main_pids(self, host: Host) -> list[int]:
        found = await self.processes(host)
        return [found.main_pid] if found.main_pid else []

    async def is_active(self, host: Host) -> bool:
        return bool((await self.processes(host)).pids)

    async def stop(self, host: Host, timeout: float = 90.0) -> CommandResult:
        argv = self.stop_argv()
        assert argv is not None
        return await host.run(argv, timeout=timeout)

    async def start(self, host: Host, timeout: float = 90.0) -> CommandResult:
        argv = self.start_argv()
        if argv is None:
            return CommandResult(2, "", f"{self.label}: no start command given")
        return await host.run(argv, timeout=timeout)

    def start_action(self) -> str | None:
        """The start as the restart's preview names it; None when there is no way to start the service."""
        argv = self.start_argv()
        if argv is None:
            return None
        return " ".join(argv[:2] + ([self.name] if self.kind != "pid" and self.kind != "pidfile" else argv[4:]))

    def health_url_on(self, host: Host) -> str | None:
        """The health endpoint polled after a restart, on this host."""
        return self.health_url


async def _run_ok(host: Host, argv: list[str]) -> CommandResult | None:
    try:
        res = await host.run(argv, timeout=30.0)
    except HostError:
        return None
    return res


class SystemdService(ServiceManager):
    """A systemd unit: ``systemctl stop/start UNIT``; its processes are its cgroup's procs."""

    kind = "systemd"

    def __init__(self, unit: str, health_url: str | None = None, cgroup_root: str = "/sys/fs/cgroup") -> None:
        self.name, self.health_url, self.cgroup_root = unit, health_url, cgroup_root

    def stop_argv(self) -> list[str]:
        return ["systemctl", "stop", "--", self.name]

    def start_argv(self) -> list[str]:
        return ["systemctl", "start", "--", self.name]

    def show_argv(self) -> list[str]:
        return ["systemctl", "show", "-p", "MainPID", "-p", "ControlGroup", "-p", "ActiveState", "--", self.name]

    async def show(self, host: Host) -> dict[str, str]:
        res = await _run_ok(host, self.show_argv())
        if res is None or not res.ok:
            return {}
        return dict(line.partition("=")[::2] for line in res.stdout.splitlines() if "=" in line)

    async def processes(self, host: Host) -> ServiceProcs:
        props = await self.show(host)
        main = int(props.get("MainPID") or 0) or None
        cgroup = props.get("ControlGroup") or ""
        pids: list[int] = []
        if cgroup.startswith("/") and ".." not in cgroup:
            try:
                raw = await host.read_file(f"{self.cgroup_root}{cgroup}/cgroup.procs")
                pids = [int(x) for x in raw.split()]
            except (FileNotFoundError, OSError, HostError, ValueError):
                pids = []
        if main and main not in pids:
            pids.insert(0, main)
        return ServiceProcs(pids, main, unit=self.name, why=f"in {self.name}'s cgroup")

    async def is_active(self, host: Host) -> bool:
        return (await self.show(host)).get("ActiveState") in ("active", "activating", "reloading", "deactivating")


class DockerService(ServiceManager):
    """A docker container: ``docker stop/start NAME``; its main process from ``docker inspect``."""

    kind = "docker"

    def __init__(self, container: str, health_url: str | None = None, stop_timeout: int = 10) -> None:
        self.name, self.health_url, self.stop_timeout = container, health_url, stop_timeout

    def stop_argv(self) -> list[str]:
        return ["docker", "stop", "-t", str(self.stop_timeout), "--", self.name]

    def start_argv(self) -> list[str]:
        return ["docker", "start", "--", self.name]

    def inspect_argv(self) -> list[str]:
        return ["docker", "inspect", "--type", "container", "--", self.name]

    async def processes(self, host: Host) -> ServiceProcs:
        res = await _run_ok(host, self.inspect_argv())
        if res is None or not res.ok:
            return ServiceProcs(why="container not found")
        try:
            info = json.loads(res.stdout)[0]
            pid = int(info["State"]["Pid"]) or None
            cid = str(info["Id"])[:12]
        except (ValueError, KeyError, IndexError, TypeError):
            return ServiceProcs(why="unreadable docker inspect")
        return ServiceProcs([pid] if pid else [], pid, container=cid, why=f"in container {self.name} ({cid})")


class SupervisorService(ServiceManager):
    """A supervisord program: ``supervisorctl [-c CONF] stop/start/pid NAME``."""

    kind = "supervisor"

    def __init__(self, program: str, conf: str | None = None, health_url: str | None = None,
                 supervisorctl: str = "supervisorctl") -> None:
        self.name, self.conf, self.health_url, self.ctl = program, conf, health_url, supervisorctl

    def _base(self) -> list[str]:
        return [self.ctl, *(["-c", self.conf] if self.conf else [])]

    def stop_argv(self) -> list[str]:
        return [*self._base(), "stop", self.name]

    def start_argv(self) -> list[str]:
        return [*self._base(), "start", self.name]

    def pid_argv(self) -> list[str]:
        return [*self._base(), "pid", self.name]

    async def processes(self, host: Host) -> ServiceProcs:
        res = await _run_ok(host, self.pid_argv())
        text = res.stdout.strip() if res is not None else ""
        pid = int(text) if text.isdigit() and int(text) > 0 else None
        return ServiceProcs([pid] if pid else [], pid, why=f"supervisor program {self.name}")

    async def stop(self, host: Host, timeout: float = 90.0) -> CommandResult:
        res = await host.run(self.stop_argv(), timeout=timeout)
        # supervisorctl exits 0 on some errors; its output says so.
        if res.ok and "ERROR" in (res.stdout + res.stderr):
            return CommandResult(1, res.stdout, res.stderr)
        return res


class PidService(ServiceManager):
    """A service known only by its main PID (or a pidfile holding it). Stop = SIGTERM to that pid,
    checked against its start time; start = a given argument list, detached."""

    kind = "pid"

    def __init__(self, pid: int | None = None, pidfile: str | None = None, start: list[str] | None = None,
                 health_url: str | None = None, name: str | None = None, log_path: str = "/dev/null") -> None:
        if pid is None and pidfile is None:
            raise ValueError("PidService needs a pid or a pidfile")
        self.pid, self.pidfile, self.start_cmd, self.health_url = pid, pidfile, start, health_url
        self.log_path = log_path
        self.name = name or (pidfile or f"pid {pid}")
        self.kind = "pidfile" if pidfile else "pid"

    def stop_argv(self) -> list[str] | None:
        return None

    def start_argv(self) -> list[str] | None:
        return list(self.start_cmd) if self.start_cmd else None

    def start_action(self) -> str | None:
        if not self.start_cmd:
            return None
        return f"start {shlex.join(self.start_cmd)} detached (output to {self.log_path})"

    async def start(self, host: Host, timeout: float = 90.0) -> CommandResult:
        """Start the command detached on the host (its own session, so it outlives the cleanup)."""
        if not self.start_cmd:
            return CommandResult(2, "", f"{self.label}: no start command given")
        proc = await host.spawn(self.start_cmd, log=self.log_path)
        return CommandResult(0, f"started pid {proc.pid}", "")

    async def _pid(self, host: Host) -> int | None:
        if self.pidfile is None:
            return self.pid
        try:
            text = (await host.read_file(self.pidfile)).decode(errors="replace").strip()
        except (FileNotFoundError, OSError, HostError):
            return None
        return int(text) if text.isdigit() and int(text) > 1 else None

    async def processes(self, host: Host) -> ServiceProcs:
        pid = await self._pid(host)
        if pid is None:
            return ServiceProcs(why="no pid")
        alive = await HostProcs(host).stat([pid])
        if pid not in alive or alive[pid][1] == "Z":
            return ServiceProcs(why="main pid gone")
        return ServiceProcs([pid], pid, why=f"main pid of {self.name}")

    async def stop(self, host: Host, timeout: float = 90.0) -> CommandResult:
        raise NotImplementedError("a pid service is stopped by the executor's guarded signal")

    def stop_signal(self) -> int:
        return int(signal.SIGTERM)


class SimService(PidService):
    """The simulated host's vLLM service (``sim:NAME``): found and stopped as a pidfile service (SIGTERM to
    the main pid, guarded), started through ``SimHost.start_service``.

    Why the one sim-aware class in the cleanup: the simulated service must be started by the SimHost that
    owns it (it records the new session so its teardown kills every process, and it reuses the port the
    dashboard knows); a start command run on the host would leak processes past that teardown. It uses the
    host only through ``pidfile``, ``api_url`` and ``start_service``; on any other host it finds nothing and
    its start fails with one line."""

    def __init__(self, name: str = "vllm", health_url: str | None = None) -> None:
        super().__init__(pidfile=f"sim:{name}", health_url=health_url, name=f"sim:{name}")
        self.kind = "sim"
        self.name = name

    @staticmethod
    def _sim(host: Host) -> Any | None:
        return host if callable(getattr(host, "start_service", None)) and hasattr(host, "pidfile") else None

    async def _pid(self, host: Host) -> int | None:
        sim = self._sim(host)
        if sim is None:
            return None
        try:
            text = (await host.read_file(str(sim.pidfile))).decode(errors="replace").strip()
        except (FileNotFoundError, OSError, HostError):
            return None
        return int(text) if text.isdigit() and int(text) > 1 else None

    def start_argv(self) -> list[str] | None:
        return None

    def start_action(self) -> str:
        return f"start the simulated {self.name} service (SimHost.start_service: API server and its workers)"

    def health_url_on(self, host: Host) -> str | None:
        sim = self._sim(host)
        if self.health_url or sim is None:
            return self.health_url
        return f"{sim.api_url}/health"

    async def start(self, host: Host, timeout: float = 90.0) -> CommandResult:
        sim = self._sim(host)
        if sim is None:
            return CommandResult(2, "", f"{self.label}: {host.name} is not a simulated host")
        try:
            proc = await sim.start_service(wait=False)
        except HostError as exc:
            return CommandResult(1, "", str(exc))
        return CommandResult(0, f"started pid {proc.pid}", "")
