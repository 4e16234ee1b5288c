"""The simulated driver: the GPU source that reads DIR (gpus.json, holders/<pid>.json, load.json,
leaked.json). What a process does to hold memory on it is simholder.py."""

from __future__ import annotations

import json
import os

from .gpu import NoDriver, new_gpu
from .procfs import StatReader

TYPE_CHECKING = False  # typing is not imported at run time: this module stays light
if TYPE_CHECKING:
    from typing import Any

    from .gpu import ProcMem


def context_held(path: str) -> bool:
    """Whether some process still has the context file's locked description open."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing lets go of the shared lock just taken
    return False


def _xid_code(value: Any) -> int:
    """An XID as the driver gives it (a non-negative int); anything else in a hostile file: none (0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2 ** 31 else 0


class SimSource:
    """The simulated driver: DIR/gpus.json (per GPU: ``total_mib``, ``max_w``, ``idle_w``, ``pcie_max`` and
    ``pcie_best``), DIR/holders/<pid>.json, optional DIR/load.json and DIR/xid.json (``{"<gpu>": code}``: the
    last XID each GPU reported). Memory counts
    only while the holder is alive (not a zombie, same start time): freed the moment it exits, unless its
    record names a context file (``ctx``) that processes it forked still hold: then the exited pid keeps it. Optional
    DIR/leaked.json ({"<gpu>": MiB}) is memory counted used with no holder, until something (a simulated
    GPU reset) removes it."""

    name = "sim"
    pids_local = True
    """Its holders write their own pids, in this namespace."""

    def __init__(self, sim_dir: str, stat: StatReader | None = None) -> None:
        self.dir, self.stat = sim_dir, stat or StatReader()
        try:
            with open(os.path.join(sim_dir, "gpus.json")) as fh:
                spec = json.load(fh)
        except (OSError, ValueError) as exc:
            raise NoDriver(f"sim dir {sim_dir}: {exc}") from None
        self.driver = str(spec.get("driver", "sim"))
        self.spec = spec["gpus"]
        self.cache: dict[str, tuple[int, dict[str, Any] | None]] = {}

    def _holders(self) -> list[dict[str, Any]]:
        out = []
        seen = set()
        try:
            entries = list(os.scandir(os.path.join(self.dir, "holders")))
        except OSError:
            entries = []
        for e in entries:
            if not e.name.endswith(".json"):
                continue
            seen.add(e.name)
            try:
                mtime = e.stat().st_mtime_ns
            except OSError:
                continue
            cached = self.cache.get(e.name)
            if cached is None or cached[0] != mtime:
                try:
                    with open(e.path) as fh:
                        cached = (mtime, json.load(fh))
                except (OSError, ValueError):
                    cached = (mtime, None)  # a torn or foreign file: ignored
                self.cache[e.name] = cached
            data = cached[1]
            if isinstance(data, dict) and self._alive(data):
                out.append(data)
        for gone in set(self.cache) - seen:
            del self.cache[gone]
        return out

    def _alive(self, holder: dict[str, Any]) -> bool:
        """The holder lives (same start time); or it has exited and its context is still open in processes it
        forked (``ctx``), as the real driver keeps an exited pid's memory while inherited descriptors hold it."""
        try:
            st = self.stat.get(int(holder["pid"]))
        except (KeyError, ValueError, TypeError):
            return False
        if st is not None and st.state not in ("Z", "X") and st.start_time == holder.get("start_time"):
            return True
        ctx = holder.get("ctx")
        return isinstance(ctx, str) and context_held(ctx)

    @staticmethod
    def _link(spec: dict[str, Any], busy: bool) -> list[int]:
        """[generation, width] now and at most: a busy GPU's link runs at its best (``pcie_best``: what its slot
        trains to, its maximum by default), an idle one's trains down to Gen1 to save power, as an H200's does."""
        top = [int(v) for v in spec.get("pcie_max") or (5, 16)]
        best = [int(v) for v in spec.get("pcie_best") or top]
        return (best if busy else [1, best[1]]) + top

    def sample(self) -> tuple[list[dict[str, Any]], ProcMem]:
        self.stat.tick()  # fresh liveness every sample: memory is freed the moment a holder exits
        procs: ProcMem = {}
        used: dict[int, float] = {}
        util: dict[int, float] = {}
        for h in self._holders():
            per = procs.setdefault(int(h["pid"]), {})
            for k, mib in (h.get("mem_mib") or {}).items():
                per[int(k)] = per.get(int(k), 0.0) + float(mib)
                used[int(k)] = used.get(int(k), 0.0) + float(mib)
                util[int(k)] = max(util.get(int(k), 0.0), float(h.get("util", 0) or 0))
        # memory no process holds (what a crashed context can leave until a GPU reset): only the sim has it
        try:
            with open(os.path.join(self.dir, "leaked.json")) as fh:
                leaked = json.load(fh)
            for k, mib in leaked.items():
                used[int(k)] = used.get(int(k), 0.0) + float(mib)
        except (OSError, ValueError, TypeError, AttributeError):
            pass
        load = None
        try:
            with open(os.path.join(self.dir, "load.json")) as fh:
                load = float(json.load(fh).get("util"))
        except (OSError, ValueError, TypeError, AttributeError):
            pass
        xids: dict[str, Any] = {}
        try:  # the last XID each GPU reported (what a test or the demo makes happen): {"<gpu>": code}
            with open(os.path.join(self.dir, "xid.json")) as fh:
                xids = dict(json.load(fh))
        except (OSError, ValueError, TypeError):
            pass
        gpus = []
        for s in self.spec:
            i = int(s["index"])
            gpu = new_gpu(i, s.get("uuid", ""), s.get("name", ""))
            busy = used.get(i, 0.0) > 0
            u = (load if load is not None else util.get(i, 0.0)) if busy else 0.0
            u = min(100.0, max(0.0, u))
            max_w, idle_w = float(s.get("max_w", 600)), float(s.get("idle_w", 60))
            capped = u >= 100.0  # drawing its power limit: the driver caps the clock there
            gpu.update(mem_used_mib=used.get(i, 0.0), mem_total_mib=float(s["total_mib"]),
                       mem_reserved_mib=float(s.get("reserved_mib", 0)), util_pct=u,
                       temp_c=round(32 + 0.45 * u, 1), power_w=round(idle_w + (max_w - idle_w) * u / 100, 1),
                       sm_clock_mhz=(1980.0 if capped else 2100.0) if busy else 180.0,
                       throttle=["power cap"] if capped else [], pcie=self._link(s, busy),
                       xid=_xid_code(xids.get(str(i))))
            gpus.append(gpu)
        return gpus, procs


