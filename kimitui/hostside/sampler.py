"""The sample (HostSample's shape: the GPUs, and every process holding one, enriched from /proc) and the
stream that takes one every interval."""

from __future__ import annotations

import os
import threading
import time

from .holders import HolderScan, ProcDetails, build_procs
from .procfs import PROC_PID_INIT_INO, StatReader, boot_time, pidns_of
from .wire import emit, err, log

TYPE_CHECKING = False  # typing is not imported at run time: this module stays light
if TYPE_CHECKING:
    from typing import Any


class Sampler:
    def __init__(self, source: Any, cfg: dict[str, Any], scan_interval: float) -> None:
        self.source = source
        import socket

        self.pid = os.getpid()
        self.skip = {self.pid}
        self.host = socket.gethostname()
        self.stat = getattr(source, "stat", None) or StatReader(cfg["proc_root"])
        self.scan = HolderScan(cfg["proc_root"], cfg["dev_prefix"], self.skip, scan_interval, self.stat)
        self.details = ProcDetails(cfg["proc_root"], self.stat)
        self.seq = 0
        self.pids_local = bool(getattr(source, "pids_local", False)) or pidns_of("self", cfg["proc_root"]) == \
            PROC_PID_INIT_INO
        """The driver's pids are this PID namespace's: in the initial namespace, or a simulated driver (its
        holders write their own pids)."""
        self.boot_time = boot_time(cfg["proc_root"])
        try:
            self.clock_ticks: int | None = int(os.sysconf("SC_CLK_TCK"))
        except (ValueError, OSError, AttributeError):
            self.clock_ticks = None

    def sample(self, now: float) -> dict[str, Any]:
        t = time.time()
        self.stat.tick()
        gpus, mem = self.source.sample()
        holders = self.scan.update(now, set(mem))
        procs = build_procs(mem, holders, self.details, self.skip, self.pids_local)
        if self.seq % 64 == 0:
            self.details.forget_except(self.scan.known)
        self.seq += 1
        return {"t": t, "type": "sample", "host": self.host, "seq": self.seq, "gpus": gpus, "procs": procs,
                "agent_pid": self.pid, "source": self.source.name, "boot_time": self.boot_time,
                "clock_ticks": self.clock_ticks}


class SampleStream(threading.Thread):
    """Samples on a deadline schedule (a late sample skips the missed ticks and keeps the phase)."""

    def __init__(self, source: Any, cfg: dict[str, Any], interval: float, scan_interval: float,
                 count: int = 0) -> None:
        threading.Thread.__init__(self, name="sampler", daemon=True)
        self.sampler = Sampler(source, cfg, scan_interval)
        self.interval, self.count = interval, count
        self.stop = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic()
        while not self.stop.is_set():
            try:
                sample = self.sampler.sample(time.monotonic())
                if self.stop.is_set():
                    return
                emit(sample)
            except (BrokenPipeError, ValueError):  # the channel is gone (ValueError: stdout closed)
                return
            except Exception as exc:  # one bad sample is a log line, not the end of the stream
                log("error", f"sample failed: {err(exc)}")
            if self.count and self.sampler.seq >= self.count:
                return
            deadline += self.interval
            now = time.monotonic()
            if deadline < now:
                deadline += ((now - deadline) // self.interval + 1) * self.interval
            self.stop.wait(deadline - now if deadline > now else 0)

