"""A cleanup looks its service up before any step: a service the host does not have (no such pidfile, pid,
supervisor program, container or unit; the manager's tool missing; a simulated service of another name)
is an error naming what was looked for, before any event; one that exists but is stopped is found, and
its graceful step is skipped with that reason. ``none`` frees the GPUs of whatever holds them, said so.

Real parts: pidfiles and processes (exited, zombie, live), a real supervisord, a real SimHost, a real
sshd (a remote shell's "command not found"); systemctl and docker answer through ToolHost where their
daemons cannot run here, and their tools are missing for real where the tool is what is missing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimitui.cleanup import DockerService, PidService, SupervisorService, SystemdService, auto_consent
from kimitui.cleanup.services import ServiceManager, ServiceNotFound, ServiceProcs, SimService, service_missing
from kimitui.cleanup.setup import UsageError, parse_service
from kimitui.core.events import CleanupPlan, Consent, SignalSent, StepPreview, StepResult
from kimitui.hosts.base import CommandResult
from kimitui.hosts.local import LocalHost
from kimitui.hosts.sim.host import SimHost
from tests.cleanup_rig import Rig, results
from tests.cleanup_support import SimDir, alive
from tests.sshd import SshServer, start_sshd
from tests.support import VENV_BIN, ToolHost
from tests.waiting import until, wait_until


def proc_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return None


async def missing(svc: ServiceManager, host: object) -> str:
    with pytest.raises(ServiceNotFound) as err:
        await svc.locate(host)  # type: ignore[arg-type]
    line = str(err.value)
    assert "\n" not in line and line
    return line


# --- pidfile and pid ----------------------------------------------------------------------------------

async def test_pidfile_and_pid_not_found(tmp_path: Path) -> None:
    """A pid service that is not there is said in one line naming what is missing (no pidfile, no pid in it, no such
    process, a process that has exited); a live one is found."""
    host = LocalHost("box")
    assert await missing(PidService(pidfile="/nonexistent"), host) == "pidfile /nonexistent not found on box"
    garbage = tmp_path / "garbage.pid"
    garbage.write_text("not a pid\n")
    assert "holds no pid ('not a pid')" in await missing(PidService(pidfile=str(garbage)), host)
    exited = subprocess.Popen(["true"])
    exited.wait()  # reaped: the pid names no process now
    assert await missing(PidService(pid=exited.pid), host) == f"pid {exited.pid} on box: no such process"
    assert await missing(PidService(pid=999_999), host) == "pid 999999 on box: no such process"
    zombie = subprocess.Popen(["true"])
    try:
        wait_until(lambda: proc_state(zombie.pid) == "Z", "the child to exit (a zombie until reaped)")
        assert "(it has exited)" in await missing(PidService(pid=zombie.pid), host)
    finally:
        zombie.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        found = await PidService(pid=live.pid).locate(host)
        assert found.found and found.pids == [live.pid]
    finally:
        live.kill()
        live.wait()


async def test_stale_pidfile_is_a_stopped_service_not_an_error(tmp_path: Path) -> None:
    """A pidfile naming a process that is not running is a stopped service, found with no processes and the reason, not
    an error."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    pidfile = tmp_path / "vllm.pid"
    pidfile.write_text(f"{gone.pid}\n")
    found = await PidService(pidfile=str(pidfile)).locate(LocalHost("box"))
    assert found.found and found.pids == [] and f"main pid {gone.pid} is not running" in found.why


async def test_a_missing_service_stops_the_cleanup_before_any_event(rig: Rig, sim: SimDir) -> None:
    """A named service that is not there stops the cleanup before anything is recorded or signalled: no plan, preview,
    consent or signal, and the GPU holder lives."""
    holder = sim.start_holder(0, 30_000)
    await rig.settled({holder})
    ex = rig.executor(auto_consent(["graceful", "process", "device"], "tester"), PidService(pidfile="/nonexistent"))
    with pytest.raises(ServiceNotFound, match="pidfile /nonexistent not found"):
        await ex.run()
    assert not [e for e in rig.events if isinstance(e, (CleanupPlan, StepPreview, Consent, SignalSent, StepResult))]
    assert alive(holder)


async def test_a_stopped_service_skips_graceful_with_its_reason(rig: Rig, sim: SimDir, tmp_path: Path) -> None:
    """A stopped service skips the graceful and process steps with the reason; the holder that is not the service is
    previewed under the others step and only what was previewed is ended."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    pidfile = tmp_path / "stale.pid"
    pidfile.write_text(str(gone.pid))
    holder = sim.start_holder(0, 30_000)
    await rig.settled({holder})
    ex = rig.executor(auto_consent(["graceful", "process", "others"], "tester"), PidService(pidfile=str(pidfile)))
    report = await ex.run()
    res = results(rig)
    assert res["graceful"].status == "skipped"
    assert res["graceful"].reason == (f"no pidfile {pidfile} processes left: pidfile {pidfile}: main pid {gone.pid} "
                                      "is not running (the service is stopped)")
    assert res["process"].status == "skipped"  # nothing of the service was running when the cleanup began
    others = next(p for p in rig.of(StepPreview) if p.step == "others")  # the holder is not the service
    assert [t.pid for t in others.targets] == [holder]  # what the operator previewed, and only that
    assert res["others"].status == "done" and report.clean and not alive(holder)


# --- supervisor, for real ------------------------------------------------------------------------------

SUPERVISOR_CONF = """\
[unix_http_server]
file={d}/supervisor.sock
[supervisord]
logfile={d}/supervisord.log
pidfile={d}/supervisord.pid
nodaemon=true
[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
[supervisorctl]
serverurl=unix://{d}/supervisor.sock
[program:running]
command={python} -c "import time; time.sleep(600)"
autostart=true
startsecs=0
[program:idle]
command={python} -c "import time; time.sleep(600)"
autostart=false
"""


@pytest.fixture
def supervisord(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "sv"
    d.mkdir()
    conf = d / "supervisord.conf"
    conf.write_text(SUPERVISOR_CONF.format(d=d, python=sys.executable))
    proc = subprocess.Popen([str(VENV_BIN / "supervisord"), "-c", str(conf)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield conf
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_supervisor_program_found_stopped_or_not_there(supervisord: Path, tmp_path: Path) -> None:
    """A supervisor program is found running, found stopped, or said to be missing or impossible to look up (no config,
    no daemon, no supervisorctl), each in one line."""
    host = LocalHost("box")
    ctl = str(VENV_BIN / "supervisorctl")

    def svc(program: str, conf: str | None = str(supervisord)) -> SupervisorService:
        return SupervisorService(program, conf=conf, supervisorctl=ctl)

    async def started() -> ServiceProcs | None:
        found = await svc("running").processes(host)
        return found if found.pids else None

    running = await until(started, "supervisord to start its program")
    assert running.found and alive(running.pids[0])
    idle = await svc("idle").locate(host)
    assert idle.found and idle.pids == [] and idle.why == "supervisor program idle is not running"
    line = await missing(svc("nosuch"), host)
    assert line == f"supervisor program nosuch of {supervisord} on box not found: supervisorctl pid: No such " \
                   "process nosuch"
    line = await missing(svc("x", "/nonexistent.conf"), host)
    assert line.startswith("supervisor program x of /nonexistent.conf on box cannot be looked up: ")
    assert "could not find config file /nonexistent.conf" in line
    no_daemon = tmp_path / "other.conf"
    no_daemon.write_text(SUPERVISOR_CONF.format(d=tmp_path / "nowhere", python=sys.executable))
    assert "cannot be looked up" in await missing(svc("running", str(no_daemon)), host)
    gone_tool = SupervisorService("vllm", supervisorctl=str(tmp_path / "supervisorctl"))
    assert "command not found" in await missing(gone_tool, host)


# --- docker and systemd: their answers, and their tools missing for real ------------------------------

async def test_docker_container_not_found_stopped_or_tool_missing(tmp_path: Path) -> None:
    """A docker container is said not found, found exited, or impossible to look up (no daemon, no docker), in docker's
    own words and one line."""
    no_such = CommandResult(1, "[]\n", "Error: No such container: nosuch\n")  # docker 24's answer
    host = ToolHost({"inspect": no_such})
    assert await missing(DockerService("nosuch"), host) == \
        "docker container nosuch on tools not found: docker inspect: Error: No such container: nosuch"
    down = CommandResult(1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the "
                                "docker daemon running?\n")
    assert "cannot be looked up: docker inspect: Cannot connect to the Docker daemon" in \
        await missing(DockerService("vllm"), ToolHost({"inspect": down}))
    exited = '[{"Id": "0123456789abcdef", "State": {"Status": "exited", "Running": false, "Pid": 0}}]'
    found = await DockerService("vllm").locate(ToolHost({"inspect": exited}))
    assert found.found and found.pids == [] and found.why == "container vllm (0123456789ab) is exited"
    tool = str(tmp_path / "docker")  # no such program: the tool itself is missing
    line = await missing(DockerService("vllm", docker=tool), LocalHost("box"))
    assert line == f"docker container vllm on box cannot be looked up: box: command not found: {tool}"


async def test_systemd_unit_not_found_inactive_or_tool_missing(tmp_path: Path) -> None:
    """A systemd unit is said not found, found inactive, or impossible to look up (no systemd, no systemctl), in one
    line."""
    not_found = "LoadState=not-found\nActiveState=inactive\nSubState=dead\nMainPID=0\nControlGroup=\n"
    assert await missing(SystemdService("nosuch.service"), ToolHost({"show": not_found})) == \
        "systemd unit nosuch.service on tools not found (systemctl show: LoadState=not-found)"
    inactive = "LoadState=loaded\nActiveState=inactive\nSubState=dead\nMainPID=0\nControlGroup=\n"
    found = await SystemdService("vllm.service").locate(ToolHost({"show": inactive}))
    assert found.found and found.pids == [] and found.why == "unit vllm.service is inactive (dead)"
    no_bus = CommandResult(1, "", "System has not been booted with systemd as init system (PID 1). Can't "
                                  "operate.\nFailed to connect to bus: Host is down\n")
    assert "cannot be looked up: systemctl show: System has not been booted with systemd" in \
        await missing(SystemdService("vllm.service"), ToolHost({"show": no_bus}))
    tool = str(tmp_path / "systemctl")
    assert await missing(SystemdService("vllm.service", systemctl=tool), LocalHost("box")) == \
        f"systemd unit vllm.service on box cannot be looked up: box: command not found: {tool}"


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[SshServer]:
    server = start_sshd(tmp_path)
    try:
        yield server
    finally:
        server.stop()


async def test_a_tool_missing_on_a_remote_host_is_named(sshd: SshServer) -> None:
    """Over SSH, a service tool missing on the host is named in the one line, as is a missing pidfile."""
    from kimitui.hosts.ssh import SshHost

    host = SshHost(sshd.target, known_hosts=str(sshd.known_hosts), client_keys=[str(sshd.client_key)])
    try:
        line = await missing(DockerService("vllm", docker="kimitui-no-such-docker"), host)
        assert line.startswith(f"docker container vllm on {host.name} cannot be looked up: ")
        assert "kimitui-no-such-docker" in line
        assert await service_missing(host, PidService(pidfile="/nonexistent")) == \
            f"pidfile /nonexistent not found on {host.name}"
    finally:
        await host.close()


# --- the simulated host's own service ------------------------------------------------------------------

async def test_sim_name_matches_only_the_simulated_service(tmp_path: Path) -> None:
    """sim:NAME names only the simulated host's own service: on another host or under another name it is not found, and
    the real service is never started under a wrong name."""
    assert await missing(SimService("vllm"), LocalHost("box")) == \
        "sim:vllm: box is not a simulated host (sim:NAME is the demo's own service)"
    async with SimHost(gpus=1, stuck_workers=0, nvml_monitor=False, load_time=0.05, name="demo") as host:
        assert await missing(SimService("nosuch"), host) == \
            "sim:nosuch: the simulated host demo has no service 'nosuch' (its service is sim:vllm)"
        found = await SimService("vllm").locate(host)
        assert found.found and found.pids == [host.service_pid]
        await host.stop_service()
        stopped = await SimService("vllm").locate(host)
        assert stopped.found and stopped.pids == []
        assert (await SimService("nosuch").start(host)).rc == 2  # never starts the real one under another name


def test_none_is_a_choice_and_an_empty_service_is_not() -> None:
    """``none`` is a choice of service (no service to stop); an empty one is a usage error that asks for the choice."""
    assert parse_service("none") is None and parse_service(" NONE ") is None
    with pytest.raises(UsageError, match=r"choose the service to stop: .* or none"):
        parse_service("")


async def test_a_pidfile_is_proven_stale_on_a_host_slow_to_read_its_clocks(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A stale pidfile (written, dated 0.1 s back, its pid now a process started after it) is proven stale even when
    the host is slow between reading its wall clock and its uptime (a loaded host): such a reading bounds the boot
    time loosely, and the clocks are read again (``CLOCK_READINGS``), the tightest bound kept. With one reading, as
    before, the slow one leaves it unproven, and the pid would be taken for the service's."""
    from kimitui.cleanup import pidfiles

    marker = tmp_path / "slow-once"
    # the first reading stalls 0.3 s between the wall clock and the uptime, as a descheduled shell would; later
    # readings are quick (the marker says the stall happened)
    slow_once = pidfiles.CLOCKS_SCRIPT.replace(
        " && cat /proc/uptime", f' && {{ [ -e "{marker}" ] || {{ sleep 0.3; : > "{marker}"; }}; }} && cat /proc/uptime')
    assert slow_once != pidfiles.CLOCKS_SCRIPT
    monkeypatch.setattr(pidfiles, "CLOCKS_SCRIPT", slow_once)
    pidfile = tmp_path / "vllm.pid"
    pidfile.write_text("0\n")
    written = time.time() - 0.1
    os.utime(pidfile, (written, written))
    taker = subprocess.Popen(["sleep", "30"])  # started after the file was written: the pid's new owner
    try:
        start_ticks = int(Path(f"/proc/{taker.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        host = LocalHost("box")
        assert await pidfiles.stale_pidfile(host, str(pidfile), taker.pid, start_ticks) is not None
        assert marker.exists()  # the slow reading was made, and another one after it
        marker.unlink()
        monkeypatch.setattr(pidfiles, "CLOCK_READINGS", 1)
        assert await pidfiles.stale_pidfile(host, str(pidfile), taker.pid, start_ticks) is None
    finally:
        taker.kill()
        taker.wait()
