"""How a service is stopped, started and found: systemd unit, docker container, supervisor program,
or a plain main PID / pidfile.

A cleanup looks its service up before any step (``locate``): a service the host does not have (no such
unit, container, program, pidfile or process; the manager's tool missing) is ``ServiceNotFound``, one
line naming what was looked for. One that exists but is stopped is found, with no processes and ``why``
saying so.

Every command is an argument list run by the host's agent (``host.run``: no shell anywhere), so a name
holding shell metacharacters reaches the tool as one literal argument and does nothing else.
"""

from __future__ import annotations

import abc
import json
import shlex
import signal
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from kimitui.cleanup.hostprocs import HostProcs
from kimitui.cleanup.pidfiles import _first_line, _query, _read_pidfile, stale_pidfile
from kimitui.hosts.base import CommandResult, Host, HostError


@dataclass(slots=True)
class ServiceProcs:
    """The processes a manager names for its service (roots; the executor adds their descendants)."""

    pids: list[int] = field(default_factory=list)
    main_pid: int | None = None
    unit: str | None = None
    container: str | None = None
    why: str = ""
    """Why these processes belong to the service; with no pids, why there are none (stopped, exited)."""
    missing: str | None = None
    """Set when the service cannot be found on the host: one line naming what was looked for and what was
    missing. None when the service exists, running (pids) or stopped (no pids)."""

    @property
    def found(self) -> bool:
        return self.missing is None


class ServiceNotFound(Exception):
    """The service a cleanup names cannot be found on the host (one line naming what was looked for)."""


async def service_missing(host: Host, service: ServiceManager) -> str | None:
    """The one line saying why ``service`` cannot be found on ``host``; None when it can (running or not)."""
    try:
        await service.locate(host)
    except ServiceNotFound as exc:
        return str(exc)
    return None


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
        """The service's processes now (empty when it is not running; ``missing`` set when the host has no
        such service)."""

    async def locate(self, host: Host) -> ServiceProcs:
        """The service as it is now; raises ServiceNotFound (one line) when the host has no such service or
        it cannot be looked up there."""
        try:
            found = await self.processes(host)
        except HostError as exc:
            raise ServiceNotFound(f"{self.label}: cannot be looked up on {host.name}: {exc}") from None
        if found.missing is not None:
            raise ServiceNotFound(found.missing)
        return found

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
        return shlex.join(argv)  # the exact command: the preview shows what will run

    def health_url_on(self, host: Host) -> str | None:
        """The health endpoint polled after a restart, on this host."""
        return self.health_url


class SystemdService(ServiceManager):
    """A systemd unit: ``systemctl stop/start UNIT``; its processes are its cgroup's procs."""

    kind = "systemd"

    def __init__(self, unit: str, health_url: str | None = None, cgroup_root: str = "/sys/fs/cgroup",
                 systemctl: str = "systemctl") -> None:
        self.name, self.health_url, self.cgroup_root, self.ctl = unit, health_url, cgroup_root, systemctl

    def stop_argv(self) -> list[str]:
        return [self.ctl, "stop", "--", self.name]

    def start_argv(self) -> list[str]:
        return [self.ctl, "start", "--", self.name]

    def show_argv(self) -> list[str]:
        return [self.ctl, "show", "-p", "LoadState", "-p", "ActiveState", "-p", "SubState", "-p", "MainPID",
                "-p", "ControlGroup", "--", self.name]

    async def _show(self, host: Host) -> tuple[dict[str, str], str | None]:
        """The unit's properties, or why the unit cannot be found."""
        res, err = await _query(host, self.show_argv())
        looked = f"systemd unit {self.name} on {host.name}"
        if res is None:
            return {}, f"{looked} cannot be looked up: {err}"
        if not res.ok:
            return {}, f"{looked} cannot be looked up: systemctl show: {_first_line(res.stderr, res.stdout)}"
        props = dict(line.partition("=")[::2] for line in res.stdout.splitlines() if "=" in line)
        load = props.get("LoadState")
        if not load:
            return props, f"{looked} cannot be looked up: systemctl show printed no LoadState"
        if load == "not-found":
            return props, f"{looked} not found (systemctl show: LoadState=not-found)"
        return props, None

    async def show(self, host: Host) -> dict[str, str]:
        return (await self._show(host))[0]

    async def processes(self, host: Host) -> ServiceProcs:
        props, missing = await self._show(host)
        if missing is not None:
            return ServiceProcs(unit=self.name, why="not found", missing=missing)
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
        if not pids:
            state = props.get("ActiveState") or "?"
            sub = props.get("SubState")
            return ServiceProcs([], None, unit=self.name,
                                why=f"unit {self.name} is {state}" + (f" ({sub})" if sub and sub != state else ""))
        return ServiceProcs(pids, main, unit=self.name, why=f"in {self.name}'s cgroup")

    async def is_active(self, host: Host) -> bool:
        return (await self.show(host)).get("ActiveState") in ("active", "activating", "reloading", "deactivating")


class DockerService(ServiceManager):
    """A docker container: ``docker stop/start NAME``; its main process from ``docker inspect``."""

    kind = "docker"

    def __init__(self, container: str, health_url: str | None = None, stop_timeout: int = 10,
                 docker: str = "docker") -> None:
        self.name, self.health_url, self.stop_timeout, self.docker = container, health_url, stop_timeout, docker

    def stop_argv(self) -> list[str]:
        return [self.docker, "stop", "-t", str(self.stop_timeout), "--", self.name]

    def start_argv(self) -> list[str]:
        return [self.docker, "start", "--", self.name]

    def inspect_argv(self) -> list[str]:
        return [self.docker, "inspect", "--type", "container", "--", self.name]

    async def processes(self, host: Host) -> ServiceProcs:
        res, err = await _query(host, self.inspect_argv())
        looked = f"docker container {self.name} on {host.name}"
        if res is None:
            return ServiceProcs(why="not found", missing=f"{looked} cannot be looked up: {err}")
        if not res.ok:
            said = _first_line(res.stderr, res.stdout)
            verdict = "not found" if "no such" in said.lower() else "cannot be looked up"
            return ServiceProcs(why="not found", missing=f"{looked} {verdict}: docker inspect: {said}")
        try:
            found = json.loads(res.stdout)
            if not found:
                return ServiceProcs(why="not found", missing=f"{looked} not found: docker inspect listed nothing")
            info = found[0]
            pid = int(info["State"]["Pid"]) or None
            cid = str(info["Id"])[:12]
            status = str(info["State"].get("Status") or ("running" if pid else "stopped"))
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return ServiceProcs(why="not found", missing=f"{looked} cannot be looked up: unreadable docker inspect")
        if not pid:
            return ServiceProcs([], None, container=cid, why=f"container {self.name} ({cid}) is {status}")
        return ServiceProcs([pid], pid, container=cid, why=f"in container {self.name} ({cid})")


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
        res, err = await _query(host, self.pid_argv())
        looked = f"supervisor program {self.name}" + (f" of {self.conf}" if self.conf else "") + f" on {host.name}"
        if res is None:
            return ServiceProcs(why="not found", missing=f"{looked} cannot be looked up: {err}")
        text = res.stdout.strip()
        if not text.isdigit():  # "No such process NAME", no supervisord answering, no such config file
            said = _first_line(res.stdout, res.stderr) or f"rc {res.rc}"
            verdict = "not found" if "no such process" in said.lower() else "cannot be looked up"
            return ServiceProcs(why="not found", missing=f"{looked} {verdict}: supervisorctl pid: {said}")
        pid = int(text) or None  # 0: the program exists and is not running
        if pid is None:
            return ServiceProcs([], None, why=f"supervisor program {self.name} is not running")
        return ServiceProcs([pid], pid, why=f"supervisor program {self.name}")

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

    async def _pid(self, host: Host) -> tuple[int | None, str | None]:
        """The main pid, or why there is none to look at (the missing line)."""
        if self.pidfile is None:
            return self.pid, None
        return await _read_pidfile(host, self.pidfile, f"pidfile {self.pidfile}")

    def _pidfile_path(self, host: Host) -> str | None:
        """The pidfile on the host (None: the service is a plain pid)."""
        return self.pidfile

    async def processes(self, host: Host) -> ServiceProcs:
        pid, missing = await self._pid(host)
        if pid is None:
            return ServiceProcs(why="not found", missing=missing or f"{self.label}: no pid")
        alive = await HostProcs(host).stat([pid])
        if pid not in alive or alive[pid][1] in ("Z", "X"):
            what = "has exited" if pid in alive else "is not running"
            if self.pidfile is None:  # a pid is all there is of this service: gone is not found
                return ServiceProcs(why="not found", missing=f"pid {pid} on {host.name}: no such process"
                                    + (" (it has exited)" if pid in alive else ""))
            return ServiceProcs(why=f"{self.label}: main pid {pid} {what} (the service is stopped)")
        path = self._pidfile_path(host)
        if path is not None:
            stale = await stale_pidfile(host, path, pid, alive[pid][0])
            if stale is not None:
                return ServiceProcs(why="not found", missing=stale)
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
    host only through ``pidfile``, ``api_url`` and ``start_service``; on any other host, or for a name other
    than the simulated service's (the stem of its pidfile: ``vllm``), it is not found."""

    def __init__(self, name: str = "vllm", health_url: str | None = None) -> None:
        super().__init__(pidfile=f"sim:{name}", health_url=health_url, name=f"sim:{name}")
        self.kind = "sim"
        self.name = name

    @staticmethod
    def _sim(host: Host) -> Any | None:
        return host if callable(getattr(host, "start_service", None)) and hasattr(host, "pidfile") else None

    @staticmethod
    def service_name(sim: Any) -> str:
        """The simulated host's service name: its pidfile's stem (``run/vllm.pid``)."""
        return PurePosixPath(str(sim.pidfile)).stem

    def _missing(self, host: Host) -> str | None:
        sim = self._sim(host)
        if sim is None:
            return f"sim:{self.name}: {host.name} is not a simulated host (sim:NAME is the demo's own service)"
        if self.service_name(sim) != self.name:
            return (f"sim:{self.name}: the simulated host {host.name} has no service {self.name!r} (its service is "
                    f"sim:{self.service_name(sim)})")
        return None

    async def _pid(self, host: Host) -> tuple[int | None, str | None]:
        missing = self._missing(host)
        if missing is not None:
            return None, missing
        return await _read_pidfile(host, str(self._sim(host).pidfile), f"the simulated {self.name} service's pidfile")

    def _pidfile_path(self, host: Host) -> str | None:
        sim = self._sim(host)
        return None if sim is None else str(sim.pidfile)

    async def processes(self, host: Host) -> ServiceProcs:
        missing = self._missing(host)
        if missing is not None:
            return ServiceProcs(why="not found", missing=missing)
        pid, _ = await self._pid(host)
        if pid is None:  # no pidfile: the simulated service is stopped (a cleanup or stop_service removed it)
            return ServiceProcs(why=f"the simulated {self.name} service is not running")
        return await super().processes(host)

    def start_argv(self) -> list[str] | None:
        return None

    def start_action(self) -> str:
        return f"start the simulated {self.name} service (its API server and one worker per GPU)"

    def health_url_on(self, host: Host) -> str | None:
        sim = self._sim(host)
        if self.health_url or sim is None:
            return self.health_url
        return f"{sim.api_url}/health"

    async def start(self, host: Host, timeout: float = 90.0) -> CommandResult:
        sim = self._sim(host)
        missing = self._missing(host)
        if sim is None or missing is not None:
            return CommandResult(2, "", missing or f"{self.label}: {host.name} is not a simulated host")
        try:
            proc = await sim.start_service(wait=False)
        except HostError as exc:
            return CommandResult(1, "", str(exc))
        return CommandResult(0, f"started pid {proc.pid}", "")
