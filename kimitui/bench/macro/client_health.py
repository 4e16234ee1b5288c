"""Is the load generator itself the bottleneck? Its CPU, its event loop's lag, and when to say so.

A Python client runs on one core. When that core is busy, a response's bytes wait in the socket until
the loop gets to them, and the client reports the wait as the server's latency. Three figures show it:

- CPU: the process's CPU time over the level's wall time, in percent of one core (``time.process_time``;
  it includes anything else the process runs, such as the dashboard, or a server in the same process).
- Event-loop lag: about every ``PROBE_INTERVAL_S`` (jittered) a timer callback notes how late it runs.
  A chunk that arrives while the loop is busy waits the same way: for the callback in progress and the
  ones queued before it. An idle loop adds its poll's granularity (its timeout is in whole
  milliseconds), so lags under about a millisecond say nothing; hence ``LAG_WARN_MS``.
- CPU wait: how long the loop's thread was runnable but waiting for a CPU over the level, in percent of its
  wall time (Linux: ``/proc/thread-self/schedstat``). Lag with little CPU of its own and much waiting is
  not the client's work: other processes held its cores. Against a vLLM on 2 cores (issue 34; at TP=1 its
  worker took ~100 % of a core, EngineCore ~70 % and the API server ~30 %) a bare asyncio timer loop lagged
  229 ms at p99 and the client 67 to 851 ms with 1-2 % CPU of its own, its /metrics scrape on or off (the
  read costs it about 1 ms every 200 ms): its process waited for a CPU 1.6 s of a 4 s run. Hence
  ``CPU_WAIT_WARN_PCT``.

With scheduled arrivals (rate, ramp-up, trace) the records also hold each request's lateness: how long
after it could be sent (its scheduled time, or when a slot freed if later) it was sent. Its floor is the
event loop's timer granularity (about 1 ms: the poll's timeout is in whole milliseconds).

``warnings`` turns the figures into sentences when they could distort the level's figures: CPU at
``CPU_WARN_PCT`` or more; a lag p99 above ``LAG_WARN_MS`` and above ``LAG_WARN_FRACTION`` of the level's
median ITL (a 2 ms lag matters to a 5 ms ITL, much less to an 80 ms one); a lateness p99 above
``LATE_WARN_MS`` and above ``LATE_WARN_FRACTION`` of the mean gap between scheduled arrivals; a CPU wait at
``CPU_WAIT_WARN_PCT`` or more.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

from kimitui.bench.macro.stats import percentile

PROBE_INTERVAL_S = 0.01
CPU_WARN_PCT = 90.0
LAG_WARN_MS = 2.0
LAG_WARN_FRACTION = 0.05
LATE_WARN_MS = 2.0
LATE_WARN_FRACTION = 0.05
CPU_WAIT_WARN_PCT = 10.0
PROBE_KEYS = ("client_cpu_pct", "client_loop_lag_p99_ms", "client_loop_lag_max_ms", "client_cpu_wait_pct")
SCHEDSTAT = "/proc/thread-self/schedstat"


def run_queue_wait_s() -> float | None:
    """Seconds the calling thread has spent runnable but not running, waiting for a CPU (the second field of
    Linux's ``/proc/thread-self/schedstat``, in ns); None where the kernel does not say."""
    try:
        with open(SCHEDSTAT, "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class LoopLagProbe:
    """Samples the event loop's lag while started (see the module docstring); cheap: one timer callback
    per sample, at jittered intervals (seeded) so that the samples do not lock onto a periodic load."""

    def __init__(self, interval_s: float = PROBE_INTERVAL_S,
                 cpu_wait: Callable[[], float | None] = run_queue_wait_s) -> None:
        self.interval_s = interval_s
        self.cpu_wait = cpu_wait
        """Reads the loop thread's CPU wait so far (seconds), at the start and at the stop."""
        self.lags: list[float] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._rng = random.Random(0)
        self._cpu0 = self._wall0 = 0.0
        self.cpu_pct: float | None = None
        self._wait0: float | None = None
        self.cpu_wait_pct: float | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.lags.clear()
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        self._wait0 = self.cpu_wait()
        self._arm()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        wall = time.perf_counter() - self._wall0
        self.cpu_pct = 100.0 * (time.process_time() - self._cpu0) / wall if wall > 0 else None
        wait = self.cpu_wait()
        self.cpu_wait_pct = (100.0 * max(0.0, wait - self._wait0) / wall
                             if wait is not None and self._wait0 is not None and wall > 0 else None)
        self._loop = None

    def _arm(self) -> None:
        assert self._loop is not None
        self._due = self._loop.time() + self.interval_s * self._rng.uniform(0.5, 1.5)
        self._timer = self._loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        if self._loop is None:
            return
        self.lags.append(max(0.0, self._loop.time() - self._due))
        self._arm()

    def figures(self) -> dict[str, float | None]:
        """``client_cpu_pct``, ``client_loop_lag_p99_ms``, ``client_loop_lag_max_ms`` (rounded to µs),
        ``client_cpu_wait_pct``."""
        lags = sorted(self.lags)
        return {"client_cpu_pct": None if self.cpu_pct is None else round(self.cpu_pct, 1),
                "client_cpu_wait_pct": None if self.cpu_wait_pct is None else round(self.cpu_wait_pct, 1),
                "client_loop_lag_p99_ms": round(percentile(lags, 99) * 1000, 3) if lags else None,
                "client_loop_lag_max_ms": round(lags[-1] * 1000, 3) if lags else None}


def warnings(m: dict[str, Any]) -> list[str]:
    """Sentences for a level's summary whose figures the client may have distorted (empty: none)."""
    out = []
    cpu = m.get("client_cpu_pct")
    if isinstance(cpu, int | float) and cpu >= CPU_WARN_PCT:
        out.append(f"the client process used {cpu:.0f}% of a core: a saturated load generator adds its own "
                   "queueing to TTFT and ITL")
    wait = m.get("client_cpu_wait_pct")
    if isinstance(wait, int | float) and wait >= CPU_WAIT_WARN_PCT:
        own = f" (its own CPU {cpu:.0f}% of a core)" if isinstance(cpu, int | float) else ""
        out.append(f"the client process waited for a CPU {wait:.0f}% of the level{own}: other processes held its "
                   "cores (a server on the same cores?), and the chunks it read meanwhile are timed late by that "
                   "wait")
    limit = max(LAG_WARN_MS, LAG_WARN_FRACTION * float(m.get("median_itl_ms") or 0.0))
    lag = m.get("client_loop_lag_p99_ms")
    if isinstance(lag, int | float) and lag > limit:
        out.append(f"the client's event loop lagged {lag:.2f} ms at p99 (over {limit:.2f} ms): chunk arrival "
                   "times can be late by that much")
    late = m.get("client_send_late_p99_ms")
    late_limit = max(LATE_WARN_MS, LATE_WARN_FRACTION * float(m.get("mean_arrival_gap_ms") or 0.0))
    if isinstance(late, int | float) and late > late_limit:
        out.append(f"the client sent scheduled requests {late:.2f} ms late at p99 (over {late_limit:.2f} ms): "
                   "the arrival pattern the server saw is not the one asked for")
    return out
