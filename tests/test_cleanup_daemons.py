"""The host's own GPU daemons are never signalled, whatever they hold: recognised by the executable the kernel
records (/proc/PID/exe) or by their systemd unit, never by argv. A real process whose executable really is
``.../usr/bin/nvidia-persistenced`` (a copy of sleep) holding every GPU's device file and some memory is
spared with the reason, even when ticked; a process that only calls itself nvidia-persistenced in argv is a
GPU holder like any other."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kimitui.cleanup import CleanupExecutor, CleanupTarget, ConsentDecision, SampleFeed
from kimitui.cleanup.safety import Candidate, SafetyPolicy, host_daemon
from kimitui.core.events import SignalSent, StepPreview, decode, encode
from kimitui.core.session import Session
from kimitui.hosts.sim.host import SimHost
from kimitui.hosts.sim.teardown import alive as sim_alive
from kimitui.hosts.telemetry import TelemetrySource
from kimitui.hostside.procfs import read_exe
from kimitui.hostside.proctable import process_table
from tests.cleanup_rig import FAST, SHORT_VERIFY, Rig, results, sample_where
from tests.cleanup_support import HERE, SimDir, alive
from tests.support import ROOT, start_daemon

SIM_GPUS = 4
"""The simulated driver's GPUs for this module's ``sim`` fixture (tests/conftest.py)."""



def start_impostor(sim: SimDir, gpu: int, mib: float) -> int:
    """A GPU holder whose argv[0] says nvidia-persistenced (bash's exec -a): its executable is python."""
    before = sim.holder_pids()
    script = f'exec -a nvidia-persistenced {sys.executable} {HERE} worker {sim.path} {gpu} {mib} 0'
    # with argv[0] renamed, python cannot find its venv from it: the clone's kimitui comes by PYTHONPATH
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(["bash", "-c", script], stdin=subprocess.DEVNULL, env=env)
    sim.wait(lambda: proc.pid in sim.holder_pids() - before, what="the impostor holder")
    return proc.pid


async def tick_everything(preview: StepPreview) -> ConsentDecision:
    return ConsentDecision(True, [r.pid for r in preview.targets + preview.spared], "tester")


async def test_the_persistence_daemon_is_spared_with_the_reason_and_an_argv_impostor_is_not(
        rig: Rig, sim: SimDir, tmp_path: Path) -> None:
    """The host's persistence daemon, known by its executable, is never signalled even when ticked (each attempt
    recorded as refused) and is spared with the reason in every preview; a process that only names itself
    nvidia-persistenced in argv is a GPU holder like any other and is ended."""
    daemon = start_daemon(sim, tmp_path, mem={0: 300.0})
    impostor = start_impostor(sim, 1, 5_000)
    assert read_exe(daemon) == str(tmp_path / "root" / "usr" / "bin" / "nvidia-persistenced")
    assert Path(f"/proc/{impostor}/cmdline").read_bytes().startswith(b"nvidia-persistenced\0")
    sample = await rig.settled({daemon, impostor})
    seen = {p.pid: p for p in sample.procs}
    assert seen[daemon].exe == read_exe(daemon) and seen[daemon].kind == "handle"
    assert seen[impostor].exe == os.path.realpath(sys.executable)

    report = await rig.executor(tick_everything, deadlines=SHORT_VERIFY).run()
    assert alive(daemon) and not alive(impostor)
    # no service named: both holders are "others", previewed under their own consent
    process_preview = next(p for p in rig.of(StepPreview) if p.step == "others")
    assert [t.pid for t in process_preview.targets] == [impostor]
    spared = {s.pid: s for s in process_preview.spared}
    assert "the host's own daemon: the NVIDIA persistence daemon" in spared[daemon].reason
    assert spared[daemon].exe == read_exe(daemon)
    device_preview = next(p for p in rig.of(StepPreview) if p.step == "device")
    assert "the host's own daemon" in {s.pid: s.reason for s in device_preview.spared}[daemon]
    daemon_signals = rig.signals(daemon)
    assert daemon_signals and all(s.outcome == "refused" for s in daemon_signals), daemon_signals
    # ended by the others step's SIGTERM. A later step that still saw it (on a loaded machine a process in exit is
    # still in the sample) records an attempt it did not make (refused: in exit; or gone), never a second signal
    impostor_signals = rig.signals(impostor)
    assert [s.signal for s in impostor_signals if s.outcome == "sent"] == ["SIGTERM"], impostor_signals
    # its memory keeps the GPU from being clean: said, and no reset is offered over a holder left
    assert not report.clean and {h.pid for h in report.verification.holders_left} == {daemon}
    assert results(rig)["others"].status == "done"
    # the run file keeps the executable (a replay shows the same preview)
    lines = [decode(line) for line in rig.run_path.read_text().splitlines()[1:]]
    assert any(isinstance(e, StepPreview) and any(s.exe == read_exe(daemon) for s in e.spared) for e in lines)


async def test_an_x_server_handle_is_not_an_optional_monitor(rig: Rig, sim: SimDir, tmp_path: Path) -> None:
    """An X server holding a GPU is protected, not an optional monitor the operator may tick in: ticked, it is refused
    and lives on, while the stray CUDA holder beside it is ended."""
    xorg = start_daemon(sim, tmp_path, name="Xorg")
    stray = sim.start_ready("stray", "1")  # a CUDA context, not the service: the others step previews it
    await rig.settled({xorg, stray})
    await rig.executor(tick_everything, deadlines=SHORT_VERIFY).run()
    device_preview = next(p for p in rig.of(StepPreview) if p.step == "others")
    reason = {s.pid: s.reason for s in device_preview.spared}[xorg]
    assert reason.startswith("protected: the host's own daemon: the X server"), reason
    assert [t.pid for t in device_preview.targets] == [stray] and not alive(stray)
    assert alive(xorg) and all(s.outcome == "refused" for s in rig.signals(xorg)) and rig.signals(xorg)
    assert not any(s.outcome == "sent" for s in rig.of(SignalSent) if s.pid == xorg)


def test_the_scan_carries_the_executable() -> None:
    """The agent's process scan carries each process's executable as the kernel records it (what the daemon rule judges
    by)."""
    mine = next(p for p in process_table()["procs"] if p["pid"] == os.getpid())
    assert mine["exe"] == os.path.realpath(sys.executable)


def test_a_name_never_targets_nor_spares_and_the_unit_spares_when_the_exe_is_unreadable() -> None:
    """Only the executable or the systemd unit makes a process one of the host's daemons, never its argv: a daemon's
    name in argv neither spares nor targets, the unit spares when the executable cannot be read, and a folder named
    like a daemon is no match."""
    policy = SafetyPolicy()
    base = {"pid": 4242, "start_time": 1, "ppid": 100, "cmdline": "nvidia-persistenced --verbose"}
    assert policy.refusal(Candidate(**base, exe=None)) is None  # argv alone: nothing
    assert policy.refusal(Candidate(**base, exe="/usr/bin/python3.11")) is None
    by_unit = policy.refusal(Candidate(**base, exe=None, unit="nvidia-persistenced.service"))
    assert by_unit == "the host's own daemon: the NVIDIA persistence daemon (unit nvidia-persistenced.service)"
    for exe in ("/usr/bin/nv-hostengine", "/usr/bin/dcgm-exporter", "/usr/bin/nv-fabricmanager",
                "/usr/lib/xorg/Xorg", "/usr/bin/Xwayland", "/usr/sbin/gdm3", "/usr/libexec/gdm-x-session",
                "/usr/bin/nvidia-persistenced (deleted)"):
        assert host_daemon(exe, None) is not None, exe
    for unit in ("nvidia-dcgm.service", "dcgm.service", "nvidia-fabricmanager.service", "dcgm-exporter.service",
                 "gdm.service", "display-manager.service"):
        assert host_daemon(None, unit) is not None, unit
    assert host_daemon("/home/u/bin/train", "vllm.service") is None
    assert host_daemon("/opt/nvidia-persistenced-tools/bin/train", None) is None  # a folder's name is no match


def test_old_run_files_without_exe_still_read() -> None:
    """A run recorded before previews carried the executable still reads, and re-encodes to the same event."""
    line = ('{"t":1.0,"type":"step_preview","step":"process","action":"x","targets":[],'
            '"spared":[{"pid":5,"start_time":1,"reason":"r"}]}')
    ev = decode(line)
    assert isinstance(ev, StepPreview) and ev.spared[0].exe is None
    assert decode(encode(ev)) == ev


async def test_the_simulated_host_can_run_a_persistence_daemon_that_the_cleanup_spares() -> None:
    """On the simulated host the persistence daemon holds every GPU as the real one does, and the cleanup, with
    everything ticked, spares it while it ends the service and the stray holder."""
    async with SimHost(gpus=2, stuck_workers=0, stray_holder=1, nvml_monitor=False, persistence_daemon=True) as host:
        assert host.daemon_proc is not None and host.stray_proc is not None
        daemon = host.daemon_proc
        assert read_exe(daemon.pid) == f"{host.sim_dir}/usr/bin/nvidia-persistenced"
        source = TelemetrySource(host, interval=0.1, sim_dir=host.sim_dir, dev_prefix=host.dev_prefix,
                                 scan_interval=0.1)
        feed, session, events = SampleFeed(), Session(), []
        session.subscribe(events.append)
        feed.follow(source.events(), publish=session.publish)
        try:
            listed = await sample_where(feed, lambda s: daemon.pid in {p.pid for p in s.procs},
                                        "the agent to list the simulated nvidia-persistenced")
            seen = {p.pid: p for p in listed.procs}
            assert seen[daemon.pid].kind == "handle" and seen[daemon.pid].gpus == [0, 1]
            target = CleanupTarget(host="sim", service=None, deadlines=FAST, operator="tester")
            ex = CleanupExecutor(host, target, feed, tick_everything, publish=session.publish)
            report = await ex.run()
        finally:
            source.stop()
            await feed.stop()
        device = next(e for e in events if isinstance(e, StepPreview) and e.step == "others")
        # no service named: the simulated vLLM's processes and the stray are all "others"; the daemon is not
        assert host.stray_proc.pid in {t.pid for t in device.targets}
        assert daemon.pid not in {t.pid for t in device.targets}
        assert "the NVIDIA persistence daemon" in {r.pid: r.reason for r in device.spared}[daemon.pid]
        assert report.clean and sim_alive(daemon) and not sim_alive(host.stray_proc)
        assert all(s.outcome == "refused" for s in events if isinstance(s, SignalSent) and s.pid == daemon.pid)
