"""Service managers: a real supervisord, a restart polled through a real health endpoint, systemd and
docker parsing against real processes, and hostile service names that must do nothing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimitui.cleanup import (
    DockerService,
    PidService,
    SupervisorService,
    SystemdService,
    auto_consent,
)
from kimitui.cleanup.executor import CleanupExecutor
from kimitui.cleanup.plan import CleanupTarget
from kimitui.cleanup.services import ServiceNotFound
from kimitui.core.events import SignalOutcome, StepPreview, StepResult
from kimitui.hosts.local import LocalHost
from tests.cleanup_rig import FAST, Rig, results
from tests.cleanup_support import HERE, SimDir, alive
from tests.support import VENV_BIN, ToolHost, exercise_hostile
from tests.waiting import DEADLINE_S

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
[program:vllm]
command={python} {script} service {sim} 2 30000 1
autostart=true
autorestart=false
startsecs=0
stopwaitsecs=5
"""


@pytest.fixture
def supervisord(tmp_path: Path, sim: SimDir) -> Iterator[Path]:
    d = tmp_path / "sv"
    d.mkdir()
    conf = d / "supervisord.conf"
    conf.write_text(SUPERVISOR_CONF.format(d=d, python=sys.executable, script=HERE, sim=sim.path))
    proc = subprocess.Popen([str(VENV_BIN / "supervisord"), "-c", str(conf)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # supervisorctl can talk to it once its socket is there (on a busy machine, a while after the start)
        sim.wait(lambda: (d / "supervisor.sock").exists() or proc.poll() is not None, what="supervisord's socket")
        assert proc.poll() is None, (d / "supervisord.log").read_text() if (d / "supervisord.log").exists() else ""
        yield conf
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_supervisor_program_stopped_leftovers_killed_then_restarted(
        rig: Rig, sim: SimDir, supervisord: Path) -> None:
    """Through a real supervisord: the graceful stop is supervisorctl's stop of the program (its command said in the
    preview), a worker that outlives it is ended SIGTERM then SIGKILL, the monitor is spared, and the restart, after
    consent, starts the program again from its config."""
    sim.wait(lambda: sim.pidfile.exists() and len(sim.holder_pids()) >= 2, what="supervised service")
    main = int(sim.pidfile.read_text())
    workers = sorted(sim.holder_pids())
    monitor = sim.start_ready("monitor")
    await rig.settled({*workers, monitor})
    svc = SupervisorService("vllm", conf=str(supervisord), supervisorctl=str(VENV_BIN / "supervisorctl"))
    found = await svc.processes(rig.host)
    assert found.main_pid == main
    ex = rig.executor(auto_consent(["graceful", "process", "device", "restart"], "tester"), svc)
    report = await ex.run()
    res = results(rig)
    graceful = next(p for p in rig.of(StepPreview) if p.step == "graceful")
    assert graceful.action.startswith(f"{VENV_BIN / 'supervisorctl'} -c {supervisord} stop vllm")
    assert {t.pid for t in graceful.targets} == {main, *workers}
    assert res["graceful"].status == "done" and "1 of 3 processes left" in res["graceful"].reason
    stuck_worker = next(o.pid for o in rig.of(SignalOutcome) if o.step == "graceful" and o.outcome == "survived")
    assert [(o.signal, o.outcome) for o in rig.of(SignalOutcome) if o.pid == stuck_worker and o.step == "process"] \
        == [("SIGTERM", "survived"), ("SIGKILL", "exited")]
    assert report.clean and alive(monitor) and not any(alive(p) for p in [main, *workers])
    status = subprocess.run([str(VENV_BIN / "supervisorctl"), "-c", str(supervisord), "status", "vllm"],
                            capture_output=True, text=True).stdout
    assert "STOPPED" in status

    sim.pidfile.unlink()
    restart = await ex.restart()
    assert restart.status == "done", restart.reason
    # the restart's preview names the exact command it runs, the config file included
    preview = next(p for p in rig.of(StepPreview) if p.step == "restart")
    assert preview.action.startswith(f"supervisor vllm: {VENV_BIN / 'supervisorctl'} -c {supervisord} start vllm")
    new_main = (await svc.processes(rig.host)).main_pid
    assert new_main and new_main != main and alive(new_main)


# --- restart through a real health endpoint ------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_pid_service_restart_waits_for_health(rig: Rig, sim: SimDir, tmp_path: Path) -> None:
    """A restart is done only once the service's health endpoint answers, and the restarted service is stopped through
    its pidfile by a SIGTERM checked against its start time."""
    port = free_port()
    pidfile = tmp_path / "http.pid"
    code = (f"import os,http.server;open({str(pidfile)!r},'w').write(str(os.getpid()));"
            f"http.server.HTTPServer(('127.0.0.1',{port}),http.server.SimpleHTTPRequestHandler).serve_forever()")
    svc = PidService(pidfile=str(pidfile), start=[sys.executable, "-c", code],
                     health_url=f"http://127.0.0.1:{port}/")
    ex = rig.executor(auto_consent(["restart", "graceful"], "tester"), svc)
    ex.target.deadlines.health_s = DEADLINE_S  # "done" only once the endpoint answers: the wait's deadline only
    res = await ex.restart()
    try:
        assert res.status == "done" and "answered" in res.reason, res.reason
        pid = int(pidfile.read_text())
        assert alive(pid)
        # and the graceful step stops it through its pidfile, SIGTERM checked against its start time
        report = await ex.run(("graceful",))
        assert results(rig)["graceful"].status == "done"
        assert [(s.signal, s.outcome) for s in rig.signals(pid)] == [("SIGTERM", "sent")]
        assert not alive(pid) and report.results["graceful"].reason == "every service process exited"
    finally:
        if pidfile.exists() and alive(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), 9)


async def test_restart_declined_starts_nothing(rig: Rig, tmp_path: Path) -> None:
    """A declined restart starts nothing."""
    marker = tmp_path / "started"
    svc = PidService(pid=999_999, start=[sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    res = await rig.executor(auto_consent([], "tester"), svc).restart()
    assert res.status == "declined"
    assert not marker.exists()


# --- systemd and docker: real processes, the tool's output given --------------------------------------

async def test_systemd_unit_processes_from_its_cgroup(sim: SimDir, tmp_path: Path) -> None:
    """A systemd unit's processes are read from its cgroup; a stop that leaves them all (KillMode=process) is said so,
    and the process step ends them, signalling nothing outside the unit."""
    main = sim.start_service(n=2, ignore=1)
    workers = sorted(sim.holder_pids())
    cg = tmp_path / "cgroup" / "system.slice" / "vllm.service"
    cg.mkdir(parents=True)
    (cg / "cgroup.procs").write_text("\n".join(map(str, [main, *workers])) + "\n")
    host = ToolHost({"show": f"LoadState=loaded\nActiveState=active\nSubState=running\nMainPID={main}\n"
                             "ControlGroup=/system.slice/vllm.service\n"})
    svc = SystemdService("vllm.service", cgroup_root=str(tmp_path / "cgroup"))
    found = await svc.processes(host)
    assert found.main_pid == main and found.pids == [main, *workers] and found.unit == "vllm.service"
    assert await svc.is_active(host)
    rig = Rig(sim, host, tmp_path)
    await rig.start()
    try:
        await rig.settled(set(workers))
        report = await rig.executor(auto_consent(["graceful", "process"], "tester"), svc).run()
        assert ["systemctl", "stop", "--", "vllm.service"] in host.calls
        preview = next(p for p in rig.of(StepPreview) if p.step == "graceful")
        assert {t.pid for t in preview.targets} == {main, *workers}
        assert all(t.unit == "vllm.service" for t in preview.targets)
        # systemctl stop "succeeded" but (like KillMode=process) left everything: the process step ends it
        assert results(rig)["graceful"].reason == "3 of 3 processes left"
        assert results(rig)["process"].status == "done" and report.clean
        assert not any(alive(p) for p in [main, *workers])
    finally:
        await rig.close()


async def test_docker_container_main_pid_and_id(sim: SimDir) -> None:
    """A docker container's main pid and short id come from docker inspect; its stop names it after --, and a container
    that is not there has no processes."""
    main = sim.start_service(n=1)
    inspect = f'[{{"Id": "0123456789abcdef0123", "State": {{"Pid": {main}, "Running": true}}}}]'
    host = ToolHost({"inspect": inspect})
    svc = DockerService("vllm")
    found = await svc.processes(host)
    assert found.pids == [main] and found.container == "0123456789ab"
    assert svc.stop_argv() == ["docker", "stop", "-t", "10", "--", "vllm"]
    assert await svc.is_active(host)
    assert (await DockerService("gone").processes(ToolHost({"inspect": "[]"}))).pids == []


# --- hostile names -------------------------------------------------------------------------------------

async def test_hostile_service_names_do_nothing_locally(tmp_path: Path, supervisord: Path) -> None:
    """A service name that would run a command if a shell read it (systemd, docker, pidfile and supervisor managers;
    stop, start and lookup) runs nothing: every name reaches its tool as one literal argument."""
    marker = tmp_path / "pwned"
    said = await exercise_hostile(LocalHost(), marker, str(supervisord))
    assert not marker.exists()
    supervisor = [s for s in said if s.startswith("supervisor")]
    assert any("no such process" in s.lower() or "error" in s.lower() for s in supervisor), supervisor


async def test_hostile_service_name_in_a_full_run(rig: Rig, tmp_path: Path) -> None:
    """A cleanup whose service has a hostile name stops at the lookup (not found), runs nothing and previews no step."""
    marker = tmp_path / "pwned"
    before = len(rig.events)
    for svc in (SystemdService(f"x; touch {marker}"), DockerService(f"$(touch {marker})")):
        target = CleanupTarget(host="t", service=svc, deadlines=FAST, operator="tester")
        ex = CleanupExecutor(rig.host, target, rig.feed, auto_consent(["graceful"], "tester"),
                             publish=rig.session.publish)
        with pytest.raises(ServiceNotFound, match=r"x; touch|\$\(touch"):  # no such unit / container here
            await ex.run(("graceful", "verify"))
    assert not marker.exists()
    assert not any(isinstance(e, (StepPreview, StepResult)) for e in rig.events[before:])
