"""Is the load generator itself the bottleneck? Its CPU, its event loop's lag, and when to say so.

A Python client runs on one core. When that core is busy, a response's bytes wait in the socket until
the loop gets to them, and the client reports the wait as the server's latency. Two figures show it:

- CPU: the process's CPU time over the level's wall time, in percent of one core (``time.process_time``;
  it includes anything else the process runs, such as the dashboard, or a server in the same process).
- Event-loop lag: about every ``PROBE_INTERVAL_S`` (jittered) a timer callback notes how late it runs.
  A chunk that arrives while the loop is busy waits the same way: for the callback in progress and the
  ones queued before it. An idle loop adds its poll's granularity (its timeout is in whole
  milliseconds), so lags under about a millisecond say nothing; hence ``LAG_WARN_MS``.

With scheduled arrivals (rate, ramp-up, trace) the records also hold each request's lateness: how long
after it could be sent (its scheduled time, or when a slot freed if later) it was sent. Its floor is the
event loop's timer granularity (about 1 ms: the poll's timeout is in whole milliseconds).

``warnings`` turns the figures into sentences when they could distort the level's figures: CPU at
``CPU_WARN_PCT`` or more; a lag p99 above ``LAG_WARN_MS`` and above ``LAG_WARN_FRACTION`` of the level's
median ITL (a 2 ms lag matters to a 5 ms ITL, much less to an 80 ms one); a lateness p99 above
``LATE_WARN_MS`` and above ``LATE_WARN_FRACTION`` of the mean gap between scheduled arrivals.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from kimitui.bench.macro.stats import percentile

PROBE_INTERVAL_S = 0.01
CPU_WARN_PCT = 90.0
LAG_WARN_MS = 2.0
LAG_WARN_FRACTION = 0.05
LATE_WARN_MS = 2.0
LATE_WARN_FRACTION = 0.05
PROBE_KEYS = ("client_cpu_pct", "client_loop_lag_p99_ms", "client_loop_lag_max_ms")


class LoopLagProbe:
    """Samples the event loop's lag while started (see the module docstring); cheap: one timer callback
    per sample, at jittered intervals (seeded) so that the samples do not lock onto a periodic load."""

    def __init__(self, interval_s: float = PROBE_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.lags: list[float] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._rng = random.Random(0)
        self._cpu0 = self._wall0 = 0.0
        self.cpu_pct: float | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.lags.clear()
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        self._arm()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        wall = time.perf_counter() - self._wall0
        self.cpu_pct = 100.0 * (time.process_time() - self._cpu0) / wall if wall > 0 else None
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
        """``client_cpu_pct``, ``client_loop_lag_p99_ms``, ``client_loop_lag_max_ms`` (rounded to µs)."""
        lags = sorted(self.lags)
        return {"client_cpu_pct": None if self.cpu_pct is None else round(self.cpu_pct, 1),
                "client_loop_lag_p99_ms": round(percentile(lags, 99) * 1000, 3) if lags else None,
                "client_loop_lag_max_ms": round(lags[-1] * 1000, 3) if lags else None}


def warnings(m: dict[str, Any]) -> list[str]:
    """Sentences for a level's summary whose figures the client may have distorted (empty: none)."""
    out = []
    cpu = m.get("client_cpu_pct")
    if isinstance(cpu, int | float) and cpu >= CPU_WARN_PCT:
        out.append(f"the client process used {cpu:.0f}% of a core: a saturated load generator adds its own "
                   "queueing to TTFT and ITL")
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
