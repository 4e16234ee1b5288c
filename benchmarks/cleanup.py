"""Time from consent to verified clean on the simulated host, next to the fixed-sleep pipeline it replaces.

The old transition slept a fixed 3 + 5 + 2 s (after systemctl stop, after kill -9, after fuser -k). Here:
SimHost (8 GPUs, NVML-only monitor), the real agent sampling at --interval, auto-consent for graceful,
process, device; each round restarts the simulated service, waits until the agent sees every worker, then
runs the escalation. Figures: first consent -> verified clean (the whole escalation), last consent ->
verified clean, and their ratio to 10 s. Target: <= 0.5 s when holders die on their signal.

    .venv/bin/python benchmarks/cleanup.py [--rounds 5] [--interval 0.1] [--stuck 0]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kimitui.cleanup import CleanupExecutor, CleanupTarget, Deadlines, PidService, SampleFeed, auto_consent
from kimitui.core.events import Consent, Event
from kimitui.hosts.sim.host import SimHost
from kimitui.telemetry import TelemetrySource

FIXED_SLEEPS_S = 3 + 5 + 2


async def sees(feed: SampleFeed, pids: set[int], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    after = None
    while True:
        s = await feed.latest(after=after, timeout=timeout)
        if pids <= {p.pid for p in s.procs}:
            return
        after = time.monotonic()
        if after > deadline:
            raise TimeoutError("the agent never saw every worker")


async def one_round(host: SimHost, feed: SampleFeed, term_grace: float) -> tuple[float, float, dict[str, str]]:
    consents: list[float] = []

    def sink(ev: Event) -> None:
        if isinstance(ev, Consent) and ev.accepted:
            consents.append(time.monotonic())

    target = CleanupTarget(host="sim", service=PidService(pidfile=host.pidfile), operator="bench",
                           deadlines=Deadlines(graceful_s=max(1.0, term_grace), term_grace_s=term_grace,
                                               poll_s=0.01))
    ex = CleanupExecutor(host, target, feed, auto_consent(["graceful", "process", "device"], "bench"),
                         publish=sink)
    report = await ex.run()
    clean_at = time.monotonic()
    if not report.clean:
        raise RuntimeError(f"not clean: {report.verification.detail if report.verification else '?'}")
    first = clean_at - consents[0]
    last = report.consent_to_clean_s or 0.0
    steps = {k: f"{v.status} {v.elapsed_s:.3f}s" for k, v in report.results.items()}
    return first, last, steps


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--interval", type=float, default=0.1, help="agent sampling interval, s")
    ap.add_argument("--stuck", type=int, default=0, help="workers that ignore SIGTERM")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--term-grace", type=float, default=1.0)
    args = ap.parse_args()
    async with SimHost(gpus=args.gpus, stuck_workers=args.stuck, nvml_monitor=True) as host:
        source = TelemetrySource(host, interval=args.interval, sim_dir=host.sim_dir, dev_prefix=host.dev_prefix,
                                 scan_interval=max(args.interval, 0.1))
        feed = SampleFeed()
        feed.follow(source.events())
        firsts, lasts = [], []
        try:
            for r in range(args.rounds):
                if r:
                    await host.start_service()
                await sees(feed, {p.pid for p in host.worker_holders().values()})
                first, last, steps = await one_round(host, feed, args.term_grace)
                firsts.append(first)
                lasts.append(last)
                print(f"round {r + 1}: first consent -> clean {first:.3f}s, last consent -> clean {last:.3f}s  "
                      + "  ".join(f"{k}={v}" for k, v in steps.items()))
        finally:
            source.stop()
            await feed.stop()
    med_first, med_last = statistics.median(firsts), statistics.median(lasts)
    print(f"\n{args.gpus} simulated GPUs, {args.stuck} stuck workers, agent interval {args.interval}s, "
          f"{args.rounds} rounds (median):")
    print(f"  first consent -> verified clean: {med_first:.3f} s  (max {max(firsts):.3f})")
    print(f"  last consent  -> verified clean: {med_last:.3f} s  (max {max(lasts):.3f})")
    print(f"  fixed-sleep pipeline:            {FIXED_SLEEPS_S:.3f} s")
    print(f"  ratio (whole escalation / fixed sleeps): {med_first / FIXED_SLEEPS_S:.3f}")
    if args.stuck == 0:
        verdict = "meets" if med_first <= 0.5 else "MISSES"
        print(f"  target <= 0.5 s when holders die on their signal: {verdict}")


if __name__ == "__main__":
    asyncio.run(main())
