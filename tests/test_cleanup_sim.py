"""The escalation on the simulated 8-GPU host (SimHost): API server + one worker per GPU, two stuck
workers that ignore SIGTERM, a stray device holder, an NVML-only monitor; the real agent watches it."""

from __future__ import annotations

from pathlib import Path

from kimitui.cleanup import AuditLog, CleanupExecutor, CleanupTarget, PidService, SampleFeed, auto_consent
from kimitui.cleanup.audit import read_audit
from kimitui.core.events import Event, SignalOutcome, SignalSent, StepPreview, StepResult
from kimitui.core.session import Session
from kimitui.hosts.sim.host import SimHost
from kimitui.hosts.sim.teardown import alive
from kimitui.hosts.telemetry import TelemetrySource
from tests.cleanup_rig import FAST, sample_where


async def test_sim_host_escalation_frees_every_gpu_and_spares_the_monitor(tmp_path: Path) -> None:
    """On the simulated 8-GPU host the whole escalation frees every GPU: the service and its stuck workers end, the
    stray holder too, the NVML monitor is never signalled, and every signal is in the audit log."""
    async with SimHost(gpus=8, stuck_workers=2, stray_holder=3, nvml_monitor=True) as host:
        source = TelemetrySource(host, interval=0.1, sim_dir=host.sim_dir, dev_prefix=host.dev_prefix,
                                 scan_interval=0.1)
        feed = SampleFeed()
        session = Session()
        events: list[Event] = []
        session.subscribe(events.append)
        feed.follow(source.events(), publish=session.publish)
        workers = host.worker_holders()
        assert len(workers) == 8 and host.monitor_proc and host.stray_proc and host.service_proc
        want = {p.pid for p in workers.values()} | {host.monitor_proc.pid, host.stray_proc.pid}
        s = await sample_where(feed, lambda s: want <= {p.pid for p in s.procs}, "the workers, monitor and stray")
        assert s.gpus and all(g.mem_used_mib and g.mem_used_mib > 1000 for g in s.gpus)

        target = CleanupTarget(host="sim", service=PidService(pidfile=host.pidfile), deadlines=FAST,
                               operator="tester")
        audit = AuditLog(tmp_path / "audit.log")
        ex = CleanupExecutor(host, target, feed, auto_consent(["graceful", "process", "others", "device"], "tester"),
                             publish=session.publish, audit=audit)
        report = await ex.run()
        source.stop()
        await feed.stop()
        audit.close()

        res = {e.step: e for e in events if isinstance(e, StepResult)}
        assert res["graceful"].status == "done" and res["graceful"].reason.startswith("2 of ")
        stuck = {p.pid for g, p in workers.items() if g in host.stuck_gpus}
        survived = {o.pid for o in events if isinstance(o, SignalOutcome) and o.step == "graceful"
                    and o.outcome == "survived"}
        assert survived == stuck
        kills = {s.pid for s in events if isinstance(s, SignalSent) and s.signal == "SIGKILL"}
        assert kills == stuck
        others = next(e for e in events if isinstance(e, StepPreview) and e.step == "others")
        assert [t.pid for t in others.targets] == [host.stray_proc.pid]  # not the service: asked for apart
        assert others.targets[0].reason.startswith("on the GPUs, not the service: ")
        assert host.monitor_proc.pid in {r.pid for r in others.spared}
        assert report.clean and report.consent_to_clean_s is not None
        assert alive(host.monitor_proc) and not alive(host.stray_proc)
        assert not any(alive(p) for p in workers.values())
        assert host.monitor_proc.pid not in {s.pid for s in events if isinstance(s, SignalSent)}
        assert {r["event"] for r in read_audit(tmp_path / "audit.log")} >= {"signal", "signal_outcome", "consent"}
