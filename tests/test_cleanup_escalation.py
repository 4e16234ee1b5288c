"""The cleanup escalation against real processes, watched by the real agent (TelemetrySource on a simulated
driver directory): preview, consent, guarded signals, waits with deadlines, verification, audit."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from kimitui.cleanup import (
    AuditLog,
    CleanCriteria,
    CleanupExecutor,
    CleanupTarget,
    ConsentDecision,
    Deadlines,
    PidService,
    SampleFeed,
    auto_consent,
    decline_all,
    is_optional,
)
from kimitui.cleanup.audit import read_audit
from kimitui.cleanup.hostprocs import HostProcs, ProcScan
from kimitui.cleanup.services import ServiceNotFound
from kimitui.core.events import Consent, GpuSample, HostSample, SignalOutcome, SignalSent, StepPreview
from kimitui.core.runfile import RunReader
from kimitui.hosts.base import ProcId, SignalResult
from kimitui.hosts.local import LocalHost
from tests.cleanup_rig import FAST, SHORT_VERIFY, Rig, results
from tests.cleanup_support import SimDir, alive, can_force_pids, spawn_at_pid, start_time
from tests.waiting import DEADLINE_S

SIM_GPUS = 4
"""The simulated driver's GPUs for this module's ``sim`` fixture (tests/conftest.py)."""


async def test_graceful_leaves_stuck_workers_then_process_kill_frees_them(rig: Rig, sim: SimDir) -> None:
    """The escalation goes step by step and each step signals only what its consent names: the graceful stop SIGTERMs
    the service (the main pid exits, the two workers that ignore SIGTERM survive it, recorded as such); the process
    step ends the survivors SIGTERM then SIGKILL, in that order; the device step, with no CUDA holder left, signals
    nothing; the monitor is never touched."""
    main = sim.start_service(n=4, ignore=2)
    workers = sorted(sim.holder_pids())
    monitor = sim.start_ready("monitor")
    await rig.settled({*workers, monitor})
    ex = rig.executor(auto_consent(["graceful", "process", "device"], "tester"), PidService(pidfile=str(sim.pidfile)))
    report = await ex.run()

    res = results(rig)
    assert res["graceful"].status == "done" and "2 of 5 processes left" in res["graceful"].reason
    graceful = next(p for p in rig.of(StepPreview) if p.step == "graceful")
    why = {t.pid: t.reason for t in graceful.targets}
    assert why[main].startswith("main pid of") and all(why[w].startswith(f"descendant of pid {main}") for w in workers)
    stop_outcomes = {o.pid: o.outcome for o in rig.of(SignalOutcome) if o.step == "graceful"}
    assert sorted(p for p, o in stop_outcomes.items() if o == "survived") == workers[:2] or \
        len([o for o in stop_outcomes.values() if o == "survived"]) == 2
    assert stop_outcomes[main] == "exited"
    survivors = [p for p, o in stop_outcomes.items() if o == "survived"]
    assert all(not alive(p) for p in [main, *workers])
    for pid in survivors:  # SIGTERM ignored, SIGKILL worked
        sent = [s.signal for s in rig.signals(pid) if s.step == "process"]
        assert sent == ["SIGTERM", "SIGKILL"], sent
        outs = [(o.signal, o.outcome) for o in rig.of(SignalOutcome) if o.pid == pid and o.step == "process"]
        assert outs == [("SIGTERM", "survived"), ("SIGKILL", "exited")]
    assert res["device"].status == "skipped" and "no live CUDA-context holder" in res["device"].reason, [
        (p.targets, p.spared) for p in rig.of(StepPreview) if p.step == "device"]
    assert report.clean and report.verification is not None and report.verification.clean
    # From the last consent (the process step's) to clean: at least the SIGTERM grace, which the stuck workers
    # sat out after it; at most the time between the consent's event and the verification's, both in the run
    last_consent = [c for c in rig.of(Consent) if c.accepted][-1]
    assert last_consent.step == "process" and report.consent_to_clean_s is not None
    assert FAST.term_grace_s <= report.consent_to_clean_s <= report.verification.t - last_consent.t + 0.01
    assert alive(monitor), "the NVML-only monitor must survive"
    assert not rig.signals(monitor)
    assert res["reset"].status == "skipped"

    # the run file and the audit log hold every preview, consent, signal and outcome
    rig.session.close()
    recorded = [e.type for e in RunReader(rig.run_path).events()]
    for kind in ("cleanup_plan", "step_preview", "consent", "signal", "signal_outcome", "step_result",
                 "verification"):
        assert kind in recorded, kind
    lines = read_audit(rig.audit_path)
    sig_lines = [rec for rec in lines if rec["event"] == "signal"]
    assert {(rec["pid"], rec["signal"]) for rec in sig_lines} >= {(p, "SIGKILL") for p in survivors}
    assert all(rec["operator"] == "tester" and rec["host"] == "test" for rec in lines)
    assert all(rec["cmdline"] and rec["start_time"] for rec in sig_lines)
    assert {rec["event"] for rec in lines} >= {"step_preview", "consent", "signal", "signal_outcome"}


async def test_stray_holder_killed_monitor_survives_unless_ticked(rig: Rig, sim: SimDir) -> None:
    """With no service chosen, only the others step acts: a holder of memory and a stray mapping are signalled, the
    NVML-only monitor is spared as optional and survives; the operator may tick it in, and then, and only then, is
    it signalled."""
    holder = sim.start_holder(0, 30_000)
    stray = sim.start_ready("stray", "1")
    monitor = sim.start_ready("monitor")
    await rig.settled({holder, stray, monitor})
    ex = rig.executor(auto_consent(["graceful", "process", "others", "device"]))
    report = await ex.run()
    res = results(rig)
    assert res["graceful"].status == "skipped" and res["graceful"].reason.startswith("no service chosen (none)")
    graceful = next(p for p in rig.of(StepPreview) if p.step == "graceful")  # said, not assumed
    assert graceful.action.startswith("no service (none chosen)") and not graceful.targets
    assert "whatever holds them" in graceful.action
    assert res["process"].status == "skipped" and "no service chosen" in res["process"].reason
    others_preview = next(p for p in rig.of(StepPreview) if p.step == "others")  # service none: only the others
    why = {t.pid: t.reason for t in others_preview.targets}
    assert why == {holder: "on the GPUs, not the service: holds 30000 MiB on GPU 0",
                   stray: "on the GPUs, not the service: maps /dev/nvidia1, no memory listed"}
    spared = {s.pid: s for s in others_preview.spared}
    assert monitor in spared and is_optional(spared[monitor]) and spared[monitor].kind == "handle"
    assert res["device"].status == "skipped"
    assert report.clean and not alive(holder) and not alive(stray) and alive(monitor)

    # the operator may tick the monitor in: then, and only then, it is signalled
    stray2 = sim.start_ready("stray", "2")
    await rig.settled({stray2, monitor})

    async def tick_monitor(preview: StepPreview) -> ConsentDecision:
        return ConsentDecision(True, [t.pid for t in preview.targets] + [monitor], "tester")

    rig.events.clear()
    report = await rig.executor(tick_monitor).run()
    assert report.clean and not alive(stray2) and not alive(monitor)
    assert [s.signal for s in rig.signals(monitor)] == ["SIGTERM"]


@pytest.mark.parametrize("by", ["pid", "pidfile"])
async def test_a_reused_main_pid_is_shown_as_reused_and_never_signalled(rig: Rig, sim: SimDir, by: str) -> None:
    """--service pid:N (or pidfile:): the main process exits between two steps and another process takes its
    pid (a real, forced pid reuse). The service was identified when the cleanup began: the newcomer is no
    target."""
    # a missing part fails the test, it does not skip it (CI runs as root)
    assert can_force_pids(), "forcing a pid reuse needs root and a writable /proc/sys/kernel/ns_last_pid"
    service = sim.spawn("service", "1", "20000", "0")  # the main process and its one worker, on GPU 0
    sim.wait(lambda: sim.pidfile.exists() and len(sim.holder_pids()) == 1, what="the service's worker")
    main, main_start = service.pid, start_time(service.pid)
    (worker,) = sim.holder_pids()
    await rig.settled({worker})
    newcomer: list[subprocess.Popen[bytes]] = []

    async def main_pid_reused_meanwhile(preview: StepPreview) -> ConsentDecision:
        if preview.step != "graceful":
            return ConsentDecision(True, None, "tester")
        assert {t.pid for t in preview.targets} == {main, worker}
        service.kill()  # the main process exits (its worker, orphaned, lives on) and is reaped
        service.wait()
        newcomer.append(spawn_at_pid(sim, main, "sleeper"))
        return ConsentDecision(False, None, "tester", "declined; the main pid is reused meanwhile")

    service_spec = PidService(pid=main) if by == "pid" else PidService(pidfile=str(sim.pidfile))
    report = await rig.executor(main_pid_reused_meanwhile, service_spec).run()
    assert newcomer and alive(main) and start_time(main) != main_start  # pid N is another process now
    assert not rig.signals(main), rig.signals(main)
    process = next(p for p in rig.of(StepPreview) if p.step == "process")
    assert [t.pid for t in process.targets] == [worker]
    reused = {s.pid: s for s in process.spared}[main]
    assert reused.reason == "pid reused by another process: left alone" and reused.start_time == start_time(main)
    assert report.clean and not alive(worker) and alive(main)
    now = start_time(main)
    assert not [p.step for p in rig.of(StepPreview) for t in p.targets if (t.pid, t.start_time) == (main, now)]


async def test_a_stale_pidfile_is_refused_naming_its_mtime_and_the_process_start(rig: Rig, sim: SimDir,
                                                                                   tmp_path: Path) -> None:
    """The pidfile was written an hour ago (its service has exited since); its pid is now a process started
    after that: refused before any step, one line naming both, nothing signalled."""
    sleeper = sim.spawn("sleeper")
    sim.wait(lambda: alive(sleeper.pid), what="the sleeper")
    pidfile = tmp_path / "vllm.pid"
    pidfile.write_text(f"{sleeper.pid}\n")
    written = int(time.time()) - 3600
    os.utime(pidfile, (written, written))
    service = PidService(pidfile=str(pidfile))
    with pytest.raises(ServiceNotFound) as refused:
        await rig.executor(auto_consent(["graceful", "process", "others", "device"]), service).run()
    line = str(refused.value)
    began = wall_start(sleeper.pid)
    utc = "%Y-%m-%d %H:%M:%S UTC"
    # the start is shown to the second, as its earliest possible wall time (a hair before the estimate)
    shown = {time.strftime(utc, time.gmtime(began + d)) for d in (-0.05, 0.0, 0.05)}
    assert any(line == (f"pidfile {pidfile} on {rig.host.name} is stale: written "
                        f"{time.strftime(utc, time.gmtime(written))}, but pid {sleeper.pid} is a process started "
                        f"{at}, after it (the pid was reused): refused, nothing is signalled") for at in shown), line
    assert not rig.of(StepPreview) and not rig.of(SignalSent) and alive(sleeper.pid)
    os.utime(pidfile)  # written now, after the process started: its pidfile
    assert (await service.locate(rig.host)).pids == [sleeper.pid]


def wall_start(pid: int) -> float:
    """When a process started, wall clock, to about a centisecond (its boot-relative start, on the boot time
    that the wall clock and /proc/uptime give now)."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return time.time() - uptime + start_time(pid) / os.sysconf("SC_CLK_TCK")


async def test_a_pidfile_written_a_fraction_of_a_second_before_its_process_started_is_stale(
        rig: Rig, sim: SimDir, tmp_path: Path) -> None:
    """The file's mtime and the process's start are compared to the centisecond, not the second: a pid
    taken 0.3 s after its pidfile was written is refused (a whole-second comparison cannot prove it)."""
    sleeper = sim.spawn("sleeper")
    sim.wait(lambda: alive(sleeper.pid), what="the sleeper")
    began = wall_start(sleeper.pid)
    pidfile = tmp_path / "vllm.pid"
    pidfile.write_text(f"{sleeper.pid}\n")
    os.utime(pidfile, (began - 0.3, began - 0.3))
    service = PidService(pidfile=str(pidfile))
    with pytest.raises(ServiceNotFound, match="is stale: written"):
        await rig.executor(auto_consent(["graceful", "process", "others", "device"]), service).run()
    assert not rig.of(StepPreview) and not rig.of(SignalSent) and alive(sleeper.pid)
    os.utime(pidfile, (began + 0.1, began + 0.1))  # written after the process started: its pidfile
    assert (await service.locate(rig.host)).pids == [sleeper.pid]


class GuardedHost(LocalHost):
    """A local host that names some processes as its own (as SshHost names the SSH session's)."""

    def __init__(self, protected: set[int]) -> None:
        super().__init__("guarded")
        self._protected = protected

    def protected_pids(self) -> set[int]:
        return set(self._protected)


async def test_protected_and_other_users_processes_are_never_signalled(sim: SimDir, tmp_path: Path) -> None:
    """Nothing the host protects (the host connection's own processes) and nothing of another user is ever signalled,
    even when the operator ticks them: the preview spares them with the reason, and each ticked one is recorded as
    refused, not sent."""
    guarded = sim.start_holder(0, 10_000)
    rig = Rig(sim, GuardedHost({guarded}), tmp_path)
    await rig.start()
    try:
        # a process of another user holding GPU memory
        other_pid, other_user = other_users_process(sim)
        (sim.path / "holders" / f"{other_pid}.json").write_text(json.dumps(
            {"pid": other_pid, "start_time": start_time(other_pid), "mem_mib": {"1": 5000}}))
        await rig.settled({guarded, other_pid})

        async def tick_everything(preview: StepPreview) -> ConsentDecision:
            return ConsentDecision(True, [r.pid for r in preview.targets + preview.spared], "tester")

        report = await rig.executor(tick_everything, deadlines=SHORT_VERIFY).run()
        assert alive(guarded) and alive(other_pid)
        for pid in (guarded, other_pid):
            assert all(s.outcome == "refused" for s in rig.signals(pid)), rig.signals(pid)
            assert rig.signals(pid), "a ticked protected pid is reported as refused"
        preview = next(p for p in rig.of(StepPreview) if p.step == "others")
        why = {s.pid: s.reason for s in preview.spared}
        assert "host connection" in why[guarded] and f"user {other_user}" in why[other_pid]
        assert not preview.targets
        consents = [c for c in rig.of(Consent) if c.step == "others"]
        assert consents[0].accepted and consents[0].pids == [] and "refused" in consents[0].note
        assert not report.clean
        assert {h.pid for h in report.verification.holders_left} == {guarded, other_pid}
        assert "holders left" in results(rig)["reset"].reason
        # kimitui itself and PID 1 are protected too
        assert os.getpid() in ex_protected(rig) and 1 not in {s.pid for s in rig.of(SignalSent)}
    finally:
        await rig.close()


def other_users_process(sim: SimDir) -> tuple[int, str]:
    """A live process of another user: as root, a sleeper run as nobody; otherwise any such process."""
    import pwd

    if os.geteuid() == 0:
        proc = subprocess.Popen(["sleep", "600"], user="nobody", stdin=subprocess.DEVNULL)
        sim.wait(lambda: start_time(proc.pid) is not None, what="nobody's sleeper")
        (sim.path / "spawned" / str(proc.pid)).write_text(str(start_time(proc.pid)))
        return proc.pid, "nobody"
    for name in os.listdir("/proc"):
        try:  # a process may end between the listing and the look (a parallel suite starts and ends many)
            if (name.isdigit() and int(name) > 2 and os.stat(f"/proc/{name}").st_uid != os.geteuid()
                    and Path(f"/proc/{name}/cmdline").read_bytes()):
                return int(name), pwd.getpwuid(os.stat(f"/proc/{name}").st_uid).pw_name
        except OSError:
            continue
    raise AssertionError("no process of another user to test with")


def ex_protected(rig: Rig) -> set[int]:
    ex = rig.executor(decline_all())
    from kimitui.cleanup.safety import local_protected

    return local_protected() | set(ex.safety.protected)


async def test_pid_gone_between_preview_and_signal(rig: Rig, sim: SimDir) -> None:
    """A process that exits between its preview and its signal is not signalled blind: the guarded signal checks its
    start time and records it gone, and the GPUs end clean."""
    holder = sim.start_holder(2, 8_000)
    await rig.settled({holder})

    async def consent_then_it_exits(preview: StepPreview) -> ConsentDecision:
        if preview.step == "others":
            os.kill(holder, signal.SIGKILL)
            sim.wait(lambda: not alive(holder), what="holder to exit")
        return ConsentDecision(True, None, "tester")

    report = await rig.executor(consent_then_it_exits).run()
    assert [(s.signal, s.outcome) for s in rig.signals(holder)] == [("SIGTERM", "gone")]
    assert report.clean


class SkewedView:
    """The agent's samples with one pid's start time changed: as if the pid had been reused."""

    def __init__(self, feed: SampleFeed, pid: int) -> None:
        self.feed, self.pid = feed, pid

    async def latest(self, after: float | None = None, timeout: float = 5.0) -> HostSample:
        s = await self.feed.latest(after, timeout)
        procs = []
        for p in s.procs:
            if p.pid == self.pid and p.start_time is not None:
                from dataclasses import replace

                p = replace(p, start_time=p.start_time + 1)
            procs.append(p)
        return HostSample(t=s.t, host=s.host, seq=s.seq, gpus=s.gpus, procs=procs, agent_pid=s.agent_pid)


class SkewedProcs(HostProcs):
    """The host's process table with the same pid's start time changed, agreeing with SkewedView."""

    def __init__(self, host: LocalHost, pid: int) -> None:
        super().__init__(host)
        self.pid = pid

    async def scan(self) -> ProcScan:
        scan = await super().scan()
        if self.pid in scan.procs:
            scan.procs[self.pid].start_time += 1
        return scan


async def test_start_time_mismatch_at_signal_time_is_skipped_and_process_lives(rig: Rig, sim: SimDir) -> None:
    """The process previewed (pid, start+1) is not the one now running under that pid (pid reused): the
    host's pidfd + start-time check refuses the signal."""
    holder = sim.start_holder(3, 8_000)
    await rig.settled({holder})
    ex = CleanupExecutor(rig.host, CleanupTarget(host="test", deadlines=SHORT_VERIFY, operator="tester"),
                         SkewedView(rig.feed, holder), auto_consent(["others", "device"]),
                         publish=rig.session.publish, procs=SkewedProcs(rig.host, holder))
    report = await ex.run()
    sent = rig.signals(holder)
    assert sent and all(s.outcome == "mismatch" for s in sent) and "start time" in sent[0].detail, sent
    assert alive(holder) and not report.clean


async def test_start_time_change_seen_at_preview_is_spared(rig: Rig, sim: SimDir) -> None:
    """When the agent's sample names an older incarnation of a pid, nothing is signalled for it."""
    holder = sim.start_holder(3, 8_000)
    await rig.settled({holder})
    ex = rig.executor(auto_consent(["others", "device"]), deadlines=SHORT_VERIFY)
    ex.view = SkewedView(rig.feed, holder)
    report = await ex.run()
    assert not rig.signals(holder) and alive(holder) and not report.clean
    res = results(rig)
    assert res["others"].status == "skipped" and "1 exited" in res["others"].reason
    assert res["device"].status == "skipped" and "1 exited" in res["device"].reason


async def test_declined_steps_signal_nothing(rig: Rig, sim: SimDir) -> None:
    """Declining every step signals nothing at all: every process lives on, each consent is recorded as declined, and
    the verification says the GPUs are not clean."""
    main = sim.start_service(n=2)
    stray = sim.start_ready("stray", "3")
    workers = sim.holder_pids()
    await rig.settled({*workers, stray})
    report = await rig.executor(decline_all("tester"), PidService(pidfile=str(sim.pidfile)),
                                deadlines=SHORT_VERIFY).run()
    res = results(rig)
    assert [res[s].status for s in ("graceful", "process", "others", "device")] == ["declined"] * 4
    assert not rig.of(SignalSent)
    assert all(alive(p) for p in [main, *workers, stray])
    assert not report.clean and res["verify"].status == "failed"
    assert all(not c.accepted for c in rig.of(Consent))


class NoKillHost(LocalHost):
    """Delivers SIGTERM, swallows SIGKILL: the process looks stuck in the driver (it cannot be made to
    really survive SIGKILL without a D-state wait in a kernel driver)."""

    async def signal(self, proc: ProcId, sig: int, companions: Sequence[ProcId] = ()) -> SignalResult:
        if sig == signal.SIGKILL:
            return SignalResult("sent")
        return await super().signal(proc, sig, companions)


async def test_survivor_of_sigkill_is_reported_stuck_once(sim: SimDir, tmp_path: Path) -> None:
    """A process that survives SIGKILL (stuck in the driver) is reported stuck once, with its state, after the kill
    deadline: its step fails naming it, the device step does not retry it, and the GPUs are not called clean."""
    holder = sim.start_holder(1, 8_000, ignore=True)
    rig = Rig(sim, NoKillHost(), tmp_path)
    await rig.start()
    try:
        await rig.settled({holder})
        report = await rig.executor(auto_consent(["others", "device"]), deadlines=SHORT_VERIFY).run()
        outs = [(o.step, o.signal, o.outcome) for o in rig.of(SignalOutcome) if o.pid == holder]
        assert outs == [("others", "SIGTERM", "survived"), ("others", "SIGKILL", "stuck")]
        stuck = next(o for o in rig.of(SignalOutcome) if o.outcome == "stuck")
        assert stuck.state in ("S", "R", "D") and stuck.elapsed_s >= SHORT_VERIFY.kill_s
        res = results(rig)
        assert res["others"].status == "failed" and f"{holder} (state" in res["others"].reason
        device = next(p for p in rig.of(StepPreview) if p.step == "device")
        assert not device.targets and "not retried" in device.spared[0].reason
        assert not report.clean and alive(holder)
    finally:
        await rig.close()


def test_clean_criteria_baselines() -> None:
    """Clean is judged per GPU against its own baseline: NVML v2 counts used memory without the driver's reservation,
    v1 with it (or against a recorded baseline), and a GPU whose memory reads nothing is never clean."""
    from dataclasses import replace

    c = CleanCriteria(threshold_mib=64)
    v2 = GpuSample(0, "u", "n", mem_used_mib=60, mem_reserved_mib=616)
    assert c.gpu_clean(v2)
    v2 = replace(v2, mem_used_mib=65)
    assert not c.gpu_clean(v2)
    v1 = GpuSample(1, "u", "n", mem_used_mib=616, mem_reserved_mib=None)  # NVML v1: used includes reserved
    assert c.gpu_clean(v1)
    c.baselines[1] = 500.0
    assert not c.gpu_clean(v1)
    v1 = replace(v1, mem_used_mib=560)
    assert c.gpu_clean(v1)
    assert not c.gpu_clean(GpuSample(2, "u", "n", mem_used_mib=None))


def test_audit_log_appends(tmp_path: Path) -> None:
    """The audit log only grows: each signal and its outcome is appended with the host and operator, across openings,
    and the file is readable by its owner only (0600)."""
    path = tmp_path / "a" / "audit.log"
    with AuditLog(path) as a:
        a.record(SignalSent(1.0, step="process", pid=5, start_time=7, signal="SIGTERM", cmdline="x"), "h", "op")
    with AuditLog(path) as a:
        a.record(SignalOutcome(2.0, step="process", pid=5, start_time=7, signal="SIGTERM"), "h", "op")
    recs = read_audit(path)
    assert [r["event"] for r in recs] == ["signal", "signal_outcome"]
    assert recs[0]["pid"] == 5 and recs[0]["operator"] == "op" and recs[0]["host"] == "h"
    assert os.stat(path).st_mode & 0o777 == 0o600


async def test_the_service_steps_list_the_nvml_monitor_they_leave_alone(rig: Rig, sim: SimDir) -> None:
    """The graceful and process previews show the handle-only monitor on the GPUs as left alone (as the
    summary does), not tickable there: those steps signal only the service's processes."""
    sim.start_service(n=4, ignore=2)
    workers = sorted(sim.holder_pids())
    monitor = sim.start_ready("monitor")
    await rig.settled({*workers, monitor})
    ex = rig.executor(auto_consent(["graceful", "process", "device"], "tester"), PidService(pidfile=str(sim.pidfile)))
    await ex.run()
    previews = {p.step: p for p in rig.of(StepPreview)}
    for step in ("graceful", "process"):
        spared = {r.pid: r for r in previews[step].spared}
        assert monitor in spared, (step, previews[step].spared)
        assert "NVML monitor" in spared[monitor].reason and not is_optional(spared[monitor])
        assert monitor not in {r.pid for r in previews[step].targets}
    assert alive(monitor)


async def test_a_graceful_step_whose_main_pid_is_unticked_does_not_wait_for_it(rig: Rig, sim: SimDir) -> None:
    """The operator unticks the main pid (the graceful stop of a pid service is its SIGTERM): nothing is
    signalled and the step ends at once, not after its whole wait."""
    main = sim.start_service(n=2)
    await rig.settled(set(sim.holder_pids()))

    async def untick_main(preview: StepPreview) -> ConsentDecision:
        if preview.step != "graceful":
            return ConsentDecision(False, None, "tester", "not this step")
        return ConsentDecision(True, [r.pid for r in preview.targets if r.pid != main], "tester", "unticked main")

    # a graceful wait of an hour: a step that waited it out would not end before the run's deadline
    slow = Deadlines(graceful_s=3600.0, term_grace_s=0.5, kill_s=2.0, verify_s=1.0, sample_s=10.0, poll_s=0.01)
    ex = rig.executor(untick_main, PidService(pidfile=str(sim.pidfile)), deadlines=slow)
    await asyncio.wait_for(ex.run(), DEADLINE_S)
    graceful = results(rig)["graceful"]
    assert graceful.status == "skipped" and f"main pid {main} unticked" in graceful.reason, graceful
    assert not [s for s in rig.signals(main) if s.step == "graceful"]
    assert alive(main)
