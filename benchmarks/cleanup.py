"""Time from consent to verified clean on the simulated host, locally and over SSH, next to the fixed-sleep
pipeline it replaces.

The old transition slept a fixed 3 + 5 + 2 s (after systemctl stop, after kill -9, after fuser -k). Here:
SimHost (8 GPUs, NVML-only monitor), the real agent sampling at --interval, auto-consent for graceful,
process, device; each round restarts the simulated service, waits until the agent sees every worker, then
runs the escalation. Figures: first consent -> verified clean (the whole escalation), last consent ->
verified clean, and their ratio to 10 s. Target: <= 0.5 s when holders die on their signal.

Two rows, the same rounds on the same simulated host:
  local  the agent is a child process of this one (LocalHost).
  ssh    every sample, scan, stat, pidfile read and signal goes to the agent over one SSH channel to a real
         OpenSSH server on loopback (tests/sshd.py) whose login shell costs about --login-s seconds of real
         work, as on a pyenv-managed GPU box: the session's ~/.bashrc runs pyenv init and starts
         interpreters (no sleep), calibrated when the server starts, and the cost of one exec through it is
         measured and printed. The agent starts once, before the first round (its login is not in the
         figure, as the dashboard's connection is already up when the operator consents).
Target (issue 10): the SSH median within 0.1 s of the local one.

    .venv/bin/python benchmarks/cleanup.py [--rounds 5] [--interval 0.1] [--stuck 0] [--login-s 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kimitui.cleanup import CleanupExecutor, CleanupTarget, Deadlines, PidService, SampleFeed, auto_consent
from kimitui.core.events import Consent, Event
from kimitui.hosts.base import Host
from kimitui.hosts.sim.host import SimHost
from kimitui.hosts.sim.teardown import alive
from kimitui.hosts.ssh import SshHost
from kimitui.hosts.telemetry import TelemetrySource
from tests.sshd import sshd_server

FIXED_SLEEPS_S = 3 + 5 + 2
SSH_TARGET_S = 0.1


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


async def one_round(host: Host, sim: SimHost, feed: SampleFeed,
                    term_grace: float) -> tuple[float, float, dict[str, str]]:
    consents: list[float] = []

    def sink(ev: Event) -> None:
        if isinstance(ev, Consent) and ev.accepted:
            consents.append(time.monotonic())

    target = CleanupTarget(host="sim", service=PidService(pidfile=sim.pidfile), operator="bench",
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


async def rounds(name: str, host: Host, sim: SimHost, args: argparse.Namespace) -> list[float]:
    source = TelemetrySource(host, interval=args.interval, sim_dir=sim.sim_dir, dev_prefix=sim.dev_prefix,
                             scan_interval=max(args.interval, 0.1))
    feed = SampleFeed()
    feed.follow(source.events())
    firsts = []
    try:
        for r in range(args.rounds):
            if sim.service_proc is None or not alive(sim.service_proc):
                await sim.start_service()
            await sees(feed, {p.pid for p in sim.worker_holders().values()})
            first, last, steps = await one_round(host, sim, feed, args.term_grace)
            firsts.append(first)
            print(f"{name} round {r + 1}: first consent -> clean {first:.3f}s, last consent -> clean {last:.3f}s  "
                  + "  ".join(f"{k}={v}" for k, v in steps.items()))
    finally:
        source.stop()
        await feed.stop()
    return firsts


async def exec_cost(host: SshHost) -> float:
    conn = await host._connection()
    times = []
    for _ in range(3):
        t = time.perf_counter()
        await conn.run("true", check=False)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--interval", type=float, default=0.1, help="agent sampling interval, s")
    ap.add_argument("--stuck", type=int, default=0, help="workers that ignore SIGTERM")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--term-grace", type=float, default=1.0)
    ap.add_argument("--login-s", type=float, default=0.5, help="the SSH login shell's cost to aim for, s")
    args = ap.parse_args()
    async with SimHost(gpus=args.gpus, stuck_workers=args.stuck, nvml_monitor=True) as sim:
        local = await rounds("local", sim, sim, args)
        with sshd_server(slow_login_s=args.login_s) as server:
            async with SshHost(server.target, known_hosts=str(server.known_hosts),
                               client_keys=[str(server.client_key)], config_paths=[]) as ssh:
                t0 = time.perf_counter()
                await ssh.link.connect()
                start_s = time.perf_counter() - t0
                login = await exec_cost(ssh)
                over_ssh = await rounds("ssh", ssh, sim, args)
    med_local, med_ssh = statistics.median(local), statistics.median(over_ssh)
    print(f"\n{args.gpus} simulated GPUs, {args.stuck} stuck workers, agent interval {args.interval}s, "
          f"{args.rounds} rounds (median first consent -> verified clean):")
    print(f"  local: {med_local:.3f} s  (max {max(local):.3f})")
    print(f"  ssh:   {med_ssh:.3f} s  (max {max(over_ssh):.3f}); one exec through its login shell {login:.3f} s, "
          f"agent start {start_s:.2f} s (once)")
    print(f"  fixed-sleep pipeline: {FIXED_SLEEPS_S:.3f} s; ratio (local / fixed sleeps): "
          f"{med_local / FIXED_SLEEPS_S:.3f}")
    print(f"  load average after the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    diff = med_ssh - med_local
    print(f"  ssh - local: {diff:+.3f} s  (target within {SSH_TARGET_S} s: "
          f"{'meets' if abs(diff) <= SSH_TARGET_S else 'MISSES'})")
    if args.stuck == 0:
        verdict = "meets" if med_local <= 0.5 else "MISSES"
        print(f"  target <= 0.5 s when holders die on their signal: {verdict}")


if __name__ == "__main__":
    asyncio.run(main())
