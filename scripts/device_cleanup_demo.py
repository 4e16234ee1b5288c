#!/usr/bin/env python3
"""The cleanup escalation on real GPUs: a service-like tree of torch processes and an NVML-only monitor.

    PYTHONPATH=. python3 scripts/device_cleanup_demo.py [--gpus N] [--gib 4] [--yes graceful,process,device]
        [--interval 0.5] [--hold-s 25] [--after-s 10]

Needs python3 with torch and pynvml; nothing else (kimitui's cleanup, agent and run file are stdlib only).
What it does, in under 3 minutes:
  1. reads each GPU's idle memory (the per-GPU baseline "clean" is judged against);
  2. starts a "service": a parent (pidfile) that starts one torch worker per GPU, each holding --gib GiB;
     worker 0 ignores SIGTERM, as a stuck vLLM worker does; on SIGTERM the parent forwards it and exits;
  3. starts an NVML-only monitor (pynvml in a loop; device files open, not mapped) that must survive;
  4. keeps recording telemetry with the service up for --hold-s seconds;
  5. runs the cleanup headless (a "cleanup" phase in the run) with auto-consent for the --yes steps, the
     view fed by the real agent (kimitui.hosts.telemetry on NVML; the scans, stats and signals are requests to
     the same agent), then records --after-s seconds of idle telemetry;
  6. prints every step, the time from the last consent to verified clean, and checks the monitor lived.
With OUT set, the session is recorded to $OUT/cleanup-demo.jsonl (a run file `kimitui replay` plays),
the audit log goes to $OUT/audit.log and the figures to $OUT/cleanup-demo-report.json.
Exit status 0 only if the GPUs ended clean and the monitor lived.
Every process it starts is killed on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
HERE = Path(__file__).resolve()


# --- the children: run as `python3 device_cleanup_demo.py --role ...` ---------------------------------

def role_worker(gpu: int, gib: float, ignore: bool, ready: Path) -> None:
    if ignore:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    import torch

    torch.cuda.set_device(gpu)
    block = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device=f"cuda:{gpu}")
    block.fill_(1)
    torch.cuda.synchronize()
    ready.write_text(str(os.getpid()))
    while True:
        signal.pause()


def role_service(gpus: int, gib: float, workdir: Path) -> None:
    workers = [subprocess.Popen([sys.executable, str(HERE), "--role", "worker", str(g), str(gib),
                                 "1" if g == 0 else "0", str(workdir / f"worker{g}.ready")])
               for g in range(gpus)]

    def stop(signum: int, frame: object) -> None:
        for w in workers:
            try:
                os.kill(w.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    (workdir / "service.pid").write_text(f"{os.getpid()}\n")
    while True:
        signal.pause()


def role_monitor(beat: Path) -> None:
    import pynvml

    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    n = 0
    while True:
        for h in handles:
            pynvml.nvmlDeviceGetMemoryInfo(h)
        n += 1
        beat.write_text(str(n))
        time.sleep(0.2)  # the monitor's own sampling period, not a wait of the cleanup


# --- the demo ------------------------------------------------------------------------------------------

class ReleaseWatch:
    """The driver's own view of the release, apart from kimitui's: a thread reading NVML every
    millisecond, noting the first wall time at which every GPU's used memory is back within the threshold
    of its idle figure. The cleanup's verdict is judged against it (how late after the driver let go)."""

    def __init__(self, gpus: int, idle: dict[int, float], threshold_mib: float) -> None:
        import threading

        self.gpus, self.idle, self.threshold = gpus, idle, threshold_mib
        self.released_at: float | None = None
        self.reads = 0
        self._stop = threading.Event()
        self._armed = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def arm(self) -> None:
        """From now on (the cleanup began), the first all-idle reading is the release."""
        self._armed.set()

    def _run(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(self.gpus)]

        def used(h: object) -> float:
            try:
                return pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).used / 1048576.0
            except Exception:
                return pynvml.nvmlDeviceGetMemoryInfo(h).used / 1048576.0

        while not self._stop.wait(0.001):
            if not self._armed.is_set() or self.released_at is not None:
                continue
            self.reads += 1
            if all(used(h) <= self.idle[i] + self.threshold for i, h in enumerate(handles)):
                self.released_at = time.time()
        pynvml.nvmlShutdown()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def printer(t0: float):  # type: ignore[no-untyped-def]
    from kimitui.core.events import (
        CleanupPlan,
        Consent,
        SignalOutcome,
        SignalSent,
        StepPreview,
        StepResult,
        Verification,
    )

    def show(ev: object) -> None:
        at = f"[{time.monotonic() - t0:7.3f}s]"
        if isinstance(ev, CleanupPlan):
            print(f"{at} plan: {ev.service} ({ev.manager}) on GPUs {ev.gpus}, steps {', '.join(ev.steps)}")
        elif isinstance(ev, StepPreview):
            print(f"{at} {ev.step}: preview, action: {ev.action}")
            for r in ev.targets:
                print(f"           signal pid {r.pid} (start {r.start_time}, {r.user}, GPUs {r.gpus}, "
                      f"{r.mem_mib:.0f} MiB, {r.kind}) {r.cmdline[:60]!r}: {r.reason}")
            for r in ev.spared:
                print(f"           spare  pid {r.pid} ({r.kind}) {r.cmdline[:60]!r}: {r.reason}")
        elif isinstance(ev, Consent):
            print(f"{at} {ev.step}: {'CONFIRMED' if ev.accepted else 'declined'} by {ev.operator}, pids {ev.pids}"
                  + (f" ({ev.note})" if ev.note else ""))
        elif isinstance(ev, SignalSent):
            print(f"{at} {ev.step}: {ev.signal} -> {ev.pid}: {ev.outcome}" + (f" {ev.detail}" if ev.detail else ""))
        elif isinstance(ev, SignalOutcome):
            print(f"{at} {ev.step}: pid {ev.pid} {ev.outcome} {ev.elapsed_s:.3f}s after {ev.signal}"
                  + (f" (state {ev.state})" if ev.state else ""))
        elif isinstance(ev, StepResult):
            print(f"{at} {ev.step}: {ev.status.upper()} in {ev.elapsed_s:.3f}s  {ev.reason}")
        elif isinstance(ev, Verification):
            print(f"{at} verify: {'CLEAN' if ev.clean else 'NOT CLEAN'} after {ev.elapsed_s:.3f}s  {ev.detail}")
            for g in ev.gpus:
                print(f"           GPU {g.index}: {g.used_mib} MiB used (baseline {g.baseline_mib:.0f}) "
                      f"{'ok' if g.clean else 'HELD'} {g.holders or ''}")

    return show


async def wait_for(pred, timeout: float, what: str) -> float:  # type: ignore[no-untyped-def]
    """Poll until pred() holds (the event loop keeps running: telemetry is recorded meanwhile)."""
    start = time.monotonic()
    while not pred():
        if time.monotonic() - start > timeout:
            raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def record_for(feed: object, seconds: float) -> int:
    """Keep the telemetry flowing into the recording for ``seconds`` (a recording length, not a wait for
    a condition): each turn waits for the next sample. Returns how many samples came."""
    from kimitui.cleanup import SampleFeed

    assert isinstance(feed, SampleFeed)
    end = time.monotonic() + seconds
    n = 0
    while (left := end - time.monotonic()) > 0:
        try:
            await feed.latest(after=time.monotonic(), timeout=left)
        except TimeoutError:
            break
        n += 1
    return n


async def demo(args: argparse.Namespace) -> int:
    import pynvml

    from kimitui.cleanup import (
        AuditLog,
        CleanCriteria,
        CleanupExecutor,
        CleanupTarget,
        Deadlines,
        PidService,
        SampleFeed,
        auto_consent,
    )
    from kimitui.core.events import PhaseEnd, PhaseStart
    from kimitui.core.session import Session
    from kimitui.hosts.local import LocalHost

    pynvml.nvmlInit()
    count = pynvml.nvmlDeviceGetCount()
    gpus = min(args.gpus or count, count)
    if gpus < 1:
        print("no NVIDIA GPU found")
        return 2
    idle = {}
    for i in range(gpus):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        try:
            m = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        except Exception:
            m = pynvml.nvmlDeviceGetMemoryInfo(h)
        idle[i] = m.used / 1048576.0
    pynvml.nvmlShutdown()
    print(f"{gpus} GPU(s); idle memory used (NVML, reserved excluded where v2 exists): "
          + ", ".join(f"GPU {i} {v:.0f} MiB" for i, v in idle.items()))

    out = os.environ.get("OUT")
    workdir = Path(tempfile.mkdtemp(prefix="kimitui-cleanup-demo-"))
    spawned: list[subprocess.Popen[bytes]] = []
    t0 = time.monotonic()
    session = None
    hosts: list[LocalHost] = []
    try:
        if out:
            from kimitui.core.runfile import RunWriter

            Path(out).mkdir(parents=True, exist_ok=True)
            session = Session(RunWriter(Path(out) / "cleanup-demo.jsonl", host=os.uname().nodename,
                                        meta={"what": "cleanup demo on real GPUs", "gpus": gpus, "gib": args.gib,
                                              "interval_s": args.interval, "steps": args.yes}))
        else:
            session = Session()
        session.subscribe(printer(t0))
        from kimitui.hosts.telemetry import TelemetrySource

        host = LocalHost(os.uname().nodename)
        hosts.append(host)
        # telemetry (and the recording) from before the service loads
        source = TelemetrySource(host, interval=args.interval)
        feed = SampleFeed()
        feed.follow(source.events(), publish=session.publish)
        service = subprocess.Popen([sys.executable, str(HERE), "--role", "service", str(gpus), str(args.gib),
                                    str(workdir)], start_new_session=True)
        spawned.append(service)
        monitor = subprocess.Popen([sys.executable, str(HERE), "--role", "monitor", str(workdir / "monitor.beat")],
                                   start_new_session=True)
        spawned.append(monitor)
        took = await wait_for(lambda: all((workdir / f"worker{g}.ready").exists() for g in range(gpus))
                        and (workdir / "monitor.beat").exists(), 120, "the torch workers and the monitor")
        workers = [int((workdir / f"worker{g}.ready").read_text()) for g in range(gpus)]
        print(f"service pid {service.pid} with workers {workers} ({args.gib} GiB each, worker 0 ignores SIGTERM), "
              f"monitor pid {monitor.pid}: ready in {took:.1f}s")

        after = None
        while True:  # until the agent sees every worker
            s = await feed.latest(after=after, timeout=30)
            if set(workers) <= {p.pid for p in s.procs}:
                break
            after = time.monotonic()
        kinds = {p.pid: p.kind for p in s.procs}
        print(f"agent pid {s.agent_pid} ({s.source}) sees workers as {[kinds.get(w) for w in workers]}, "
              f"monitor as {kinds.get(monitor.pid)}")
        if args.hold_s > 0:
            print(f"service up: recording {args.hold_s:g}s of telemetry before the cleanup")
            await record_for(feed, args.hold_s)
        audit = AuditLog(Path(out) / "audit.log" if out else None)
        target = CleanupTarget(host=host.name, service=PidService(pidfile=str(workdir / "service.pid")),
                               clean=CleanCriteria(threshold_mib=64, baselines=idle), operator=args.operator,
                               deadlines=Deadlines(graceful_s=3.0, term_grace_s=2.0, kill_s=5.0, verify_s=10.0,
                                                   poll_s=0.01))
        ex = CleanupExecutor(host, target, feed, auto_consent(args.yes.split(","), args.operator),
                             publish=session.publish, audit=audit)
        session.publish(PhaseStart(time.time(), phase="cleanup",
                                   title=f"free {gpus} GPU(s): {', '.join(args.yes.split(','))} auto-consented"))
        watch = ReleaseWatch(gpus, idle, 64.0)
        watch.arm()
        report = await ex.run()
        watch.stop()
        verified_at = report.verification.t if report.verification is not None and report.clean else None
        after_release = (round(verified_at - watch.released_at, 4)
                         if verified_at is not None and watch.released_at is not None else None)
        session.publish(PhaseEnd(time.time(), phase="cleanup", ok=report.clean,
                                 note=("clean" if report.clean else "NOT clean")
                                 + (f"; last consent -> clean {report.consent_to_clean_s:.3f}s"
                                    if report.consent_to_clean_s is not None else "")
                                 + (f"; last signal -> clean {report.signal_to_clean_s:.3f}s"
                                    if report.signal_to_clean_s is not None else "")))
        audit.close()
        if args.after_s > 0:
            print(f"recording {args.after_s:g}s of idle telemetry after the cleanup")
            await record_for(feed, args.after_s)
        source.stop()
        await feed.stop()

        beat_before = (workdir / "monitor.beat").read_text()
        await wait_for(lambda: (workdir / "monitor.beat").read_text() != beat_before, 5, "the monitor's next beat")
        monitor_ok = monitor.poll() is None
        print()
        print(f"GPUs clean: {report.clean}")
        if report.consent_to_clean_s is not None:
            print(f"last consent -> verified clean: {report.consent_to_clean_s:.3f} s")
        if report.signal_to_clean_s is not None:
            print(f"last signal  -> verified clean: {report.signal_to_clean_s:.3f} s")
        if after_release is not None:
            print(f"driver released (NVML read every 1 ms, {watch.reads} reads) -> verified clean: "
                  f"{after_release:.3f} s (target <= 0.1 s)")
        print(f"monitor pid {monitor.pid} survived and kept sampling: {monitor_ok}")
        print(f"audit log: {audit.path}")
        if out:
            print(f"run file: {Path(out) / 'cleanup-demo.jsonl'}")
            signalled = sorted({e.pid for e in report.signals if e.outcome == "sent"})
            (Path(out) / "cleanup-demo-report.json").write_text(json.dumps({
                "clean": report.clean, "consent_to_clean_s": report.consent_to_clean_s,
                "signal_to_clean_s": report.signal_to_clean_s, "release_to_clean_s": after_release,
                "monitor_pid": monitor.pid,
                "monitor_survived": monitor_ok, "service_pid": service.pid, "workers": workers,
                "signalled": signalled, "gib_per_worker": args.gib, "gpus": gpus, "interval_s": args.interval,
                "steps": {k: {"status": v.status, "elapsed_s": v.elapsed_s, "reason": v.reason}
                          for k, v in report.results.items()},
            }, indent=1) + "\n")
        return 0 if report.clean and monitor_ok else 1
    finally:
        for h in hosts:
            await h.close()
        if session is not None:
            session.close()
        for p in spawned:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for f in workdir.glob("worker*.ready"):
            try:
                os.kill(int(f.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        for p in spawned:
            p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description="kimitui cleanup on real GPUs")
    ap.add_argument("--role", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--gpus", type=int, default=0, help="GPUs to use (default all)")
    ap.add_argument("--gib", type=float, default=4.0, help="GiB each worker holds")
    ap.add_argument("--yes", default="graceful,process,device", help="steps consented to")
    ap.add_argument("--interval", type=float, default=0.1, help="agent sampling interval, s")
    ap.add_argument("--operator", default=os.environ.get("USER", "operator"))
    ap.add_argument("--hold-s", type=float, default=0.0,
                    help="seconds of telemetry recorded with the service up, before the cleanup")
    ap.add_argument("--after-s", type=float, default=0.0,
                    help="seconds of idle telemetry recorded after the cleanup")
    args = ap.parse_args()
    if args.role:
        role, rest = args.role[0], args.role[1:]
        if role == "worker":
            role_worker(int(rest[0]), float(rest[1]), rest[2] == "1", Path(rest[3]))
        elif role == "service":
            role_service(int(rest[0]), float(rest[1]), Path(rest[2]))
        elif role == "monitor":
            role_monitor(Path(rest[0]))
        return 0
    return asyncio.run(demo(args))


if __name__ == "__main__":
    sys.exit(main())
