"""kimitui's host agent: one self-contained sampler run by the GPU host's own python3.

Stdlib plus pynvml where present; it never imports kimitui, because its source is sent over the channel
and exec()ed there (see BOOTSTRAP and agent_command below, which run on the caller's side only).

Output: one JSON line per message on stdout, ``t`` and ``type`` first:
  {"t", "type": "hello", agent_pid, source, driver, python, gpus}          once, first
  {"t", "type": "sample", host, seq, gpus, procs, agent_pid, source}     every interval (HostSample shape)
  {"t", "type": "log", level, source, message}                            a warning (LogLine shape)
  {"t", "type": "fatal", message}                                         no driver: then exit 3
The agent exits as soon as its stdin closes (EOF): that pipe is its liveness channel.

Sources: NVML (pynvml), else nvidia-smi --query-* CSV, else the simulated driver (--sim-dir DIR: gpus.json,
holders/<pid>.json, load.json, leaked.json). Every GPU process is enriched from /proc, and /proc/*/fd + /proc/*/maps
are scanned for the device files: mapped = CUDA context ("cuda"), open but not mapped = "handle".
Runs on python3 >= 3.7 (no walrus, no dataclasses: exec() of dataclasses needs a real module).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import select
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

MIB = 1048576.0
FATAL_EXIT = 3

# --- caller side: how the agent is started on a host (never runs there) -----------------------------

BOOTSTRAP = (
    "import os,sys\n"
    "def rd(n):\n"
    " b=b''\n"
    " while len(b)<n:\n"
    "  c=os.read(0,n-len(b))\n"
    "  if not c:sys.exit(4)\n"
    "  b+=c\n"
    " return b\n"
    "h=b''\n"
    "while not h.endswith(b'\\n'):h+=rd(1)\n"
    "src=rd(int(h))\n"
    "sys.argv=['kimitui-agent']+sys.argv[1:]\n"
    "exec(compile(src,'kimitui-agent','exec'),{'__name__':'__main__','__builtins__':__builtins__})\n"
)
"""Run as ``python3 -u -c BOOTSTRAP ARGS``: reads ``<length>\\n<source>`` from stdin (unbuffered, so no
byte past the source is consumed), then runs it; the rest of stdin stays open as the liveness channel."""


def agent_source() -> bytes:
    with open(os.path.abspath(__file__), "rb") as fh:
        return fh.read()


def agent_payload() -> bytes:
    """What to write to the bootstrap's stdin: the length-prefixed agent source."""
    src = agent_source()
    return b"%d\n" % len(src) + src


def agent_command(python: str = "python3", interval: float = 0.5, sim_dir: str | None = None,
                  dev_prefix: str | None = None, proc_root: str | None = None,
                  scan_interval: float | None = None, extra: tuple[str, ...] = ()) -> list[str]:
    """The argv that starts the agent through the bootstrap; send agent_payload() on its stdin."""
    argv = [python, "-u", "-c", BOOTSTRAP, "--interval", repr(float(interval))]
    if sim_dir is not None:
        argv += ["--sim-dir", sim_dir]
    if dev_prefix is not None:
        argv += ["--dev-prefix", dev_prefix]
    if proc_root is not None:
        argv += ["--proc-root", proc_root]
    if scan_interval is not None:
        argv += ["--scan-interval", repr(float(scan_interval))]
    return argv + list(extra)


# --- /proc parsers ------------------------------------------------------------------------------------

def parse_stat(text: str) -> tuple[str, int, int]:
    """(state, ppid, start_time) of /proc/PID/stat; comm may hold ')' so split at the last one."""
    fields = text.rpartition(")")[2].split()
    return fields[0], int(fields[1]), int(fields[19])


class StatReader:
    """/proc/PID/stat as (state, ppid, start_time), read at most once per sample (tick() starts one):
    the sim driver's liveness check and the process details share the read."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.root = proc_root
        self.memo: dict[int, tuple[str, int, int] | None] = {}

    def tick(self) -> None:
        self.memo = {}

    def get(self, pid: int) -> tuple[str, int, int] | None:
        if pid not in self.memo:
            try:
                with open(f"{self.root}/{pid}/stat") as fh:
                    self.memo[pid] = parse_stat(fh.read())
            except (OSError, ValueError, IndexError):
                self.memo[pid] = None
        return self.memo[pid]


def parse_status_uid(text: str) -> int | None:
    for line in text.splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    return None


_CONTAINER_RES = (
    re.compile(r"(?:docker|cri-containerd|crio|libpod)-([0-9a-f]{12,64})\.scope"),
    re.compile(r"/(?:docker|process_api|lxc|containerd|libpod)/([0-9A-Za-z][0-9A-Za-z_.-]*)"),
    re.compile(r"kubepods.*/([0-9a-f]{64})"),
)


def parse_cgroup(text: str) -> tuple[str | None, str | None]:
    """(systemd unit, container id) from /proc/PID/cgroup (v1 or v2)."""
    unit = container = None
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        if unit is None:
            for part in reversed(path.split("/")):
                if part.endswith(".service"):
                    unit = part
                    break
        if container is None:
            for rx in _CONTAINER_RES:
                m = rx.search(path)
                if m:
                    container = m.group(1)
                    break
    return unit, container


def parse_cmdline(raw: bytes) -> str:
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")


def device_gpu_index(path: str, prefix: str) -> int | None:
    """3 for PREFIX3; None for PREFIXctl, PREFIX-uvm and anything else."""
    rest = path[len(prefix):] if path.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


def maps_device_paths(text: str, prefix: str) -> set[str]:
    """Device files (under prefix) that a maps listing maps; libnvidia-*.so mappings are not devices."""
    found: set[str] = set()
    if prefix not in text:
        return found
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6:
            path = parts[5].strip()
            if path.endswith(" (deleted)"):
                path = path[:-10]
            if path.startswith(prefix):
                found.add(path)
    return found


def classify_holding(fd_targets: list[str], maps_text: str, prefix: str) -> tuple[str | None, list[int]]:
    """("cuda" | "handle" | None, GPU indices) from fd link targets and the maps text of one process."""
    devs = {p for p in fd_targets if p.startswith(prefix)}
    mapped = maps_device_paths(maps_text, prefix) if (devs or maps_text) else set()
    devs |= mapped
    gpus = sorted({i for i in (device_gpu_index(p, prefix) for p in devs) if i is not None})
    return ("cuda" if mapped else "handle" if devs else None), gpus


# --- nvidia-smi CSV -----------------------------------------------------------------------------------

QUERY_GPU_FIELDS = [
    "index", "uuid", "name", "pci.bus_id", "driver_version", "memory.used", "memory.total", "memory.reserved",
    "utilization.gpu", "utilization.memory", "temperature.gpu", "power.draw", "power.limit",
    "clocks.current.sm", "clocks.current.memory", "pstate", "fan.speed",
    "ecc.errors.uncorrected.volatile.total", "compute_mode",
]
QUERY_APPS_FIELDS = ["pid", "process_name", "used_gpu_memory", "gpu_uuid", "gpu_bus_id"]
_GPU_COLUMNS = {"memory.used": "mem_used_mib", "memory.total": "mem_total_mib",
                "memory.reserved": "mem_reserved_mib", "utilization.gpu": "util_pct",
                "temperature.gpu": "temp_c", "power.draw": "power_w", "clocks.current.sm": "sm_clock_mhz"}


def csv_number(cell: str) -> float | None:
    """'8157 MiB' / '8157' -> 8157.0; '[N/A]', 'N/A', '[Not Supported]', '' -> None."""
    cell = cell.strip()
    if not cell or cell.startswith("[") or cell.upper() == "N/A":
        return None
    try:
        return float(cell.split()[0])
    except ValueError:
        return None


def _csv_rows(text: str, fields: list[str]) -> list[dict[str, str]]:
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(fields) or cells[0] == fields[0] or not cells[0][:1].isdigit():
            continue  # a header line (with units) or anything else that is not a data row
        rows.append(dict(zip(fields, cells, strict=False)))
    return rows


def parse_query_gpu(text: str, fields: list[str] = QUERY_GPU_FIELDS) -> list[dict[str, Any]]:
    """GpuSample-shaped dicts from `nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]`."""
    gpus = []
    for row in _csv_rows(text, fields):
        gpu = new_gpu(int(row["index"]), row.get("uuid", ""), row.get("name", ""))
        for col, key in _GPU_COLUMNS.items():
            if col in row:
                gpu[key] = csv_number(row[col])
        gpus.append(gpu)
    return gpus


def parse_query_apps(text: str, fields: list[str] = QUERY_APPS_FIELDS) -> list[tuple[int, float | None, str]]:
    """(pid, MiB or None, gpu uuid) from `nvidia-smi --query-compute-apps=FIELDS --format=csv...`."""
    mem_col = "used_gpu_memory" if "used_gpu_memory" in fields else "used_memory"
    return [(int(r["pid"]), csv_number(r.get(mem_col, "")), r.get("gpu_uuid", "")) for r in _csv_rows(text, fields)]


# --- GPU sources: each gives (gpus, {pid: {gpu index: MiB}}) per sample --------------------------------

def new_gpu(index: int, uuid: str, name: str) -> dict[str, Any]:
    return {"index": index, "uuid": uuid, "name": name, "mem_used_mib": None, "mem_total_mib": None,
            "mem_reserved_mib": None, "util_pct": None, "temp_c": None, "power_w": None,
            "sm_clock_mhz": None, "error": None}


class NoDriver(Exception):
    """This source cannot run here (the message says why)."""


if TYPE_CHECKING:
    ProcMem = dict[int, dict[int, float]]


class NvmlSource:
    name = "nvml"

    def __init__(self, nvml: Any = None) -> None:
        if nvml is None:
            try:
                import pynvml as nvml  # type: ignore
            except ImportError:
                raise NoDriver("pynvml not installed") from None
        self.nv = nvml
        try:
            nvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            raise NoDriver(str(exc) or type(exc).__name__) from None
        self.driver = _text(self._try(nvml.nvmlSystemGetDriverVersion))
        self.fatal_codes = {getattr(nvml, n) for n in ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_RESET_REQUIRED",
                                                         "NVML_ERROR_UNINITIALIZED") if hasattr(nvml, n)}
        self.v2 = getattr(nvml, "nvmlMemory_v2", None)
        self.handles: list[tuple[Any, dict[str, Any]]] = []
        for i in range(nvml.nvmlDeviceGetCount()):
            try:
                h = nvml.nvmlDeviceGetHandleByIndex(i)
                self.handles.append((h, new_gpu(i, _text(self._try(nvml.nvmlDeviceGetUUID, h)) or "",
                                                _text(self._try(nvml.nvmlDeviceGetName, h)) or "")))
            except Exception as exc:
                gpu = new_gpu(i, "", "")
                gpu["error"] = _err(exc)
                self.handles.append((None, gpu))

    @staticmethod
    def _try(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception:
            return None

    def _memory(self, h: Any) -> tuple[float, float, float | None]:
        """(used, total, reserved) MiB. mem_used_mib is reported the way nvidia-smi shows it: EXCLUDING the
        driver's reserved memory (NVML v2 'used'); reserved is its own field. Only where v2 is missing
        (old driver / pynvml) 'used' is NVML v1's, which INCLUDES reserved, and reserved is null."""
        if self.v2 is not None:
            try:
                m = self.nv.nvmlDeviceGetMemoryInfo(h, version=self.v2)
                return m.used / MIB, m.total / MIB, m.reserved / MIB
            except Exception as exc:
                if self._fatal(exc):
                    raise
                self.v2 = None  # not supported here: v1 from now on
        m = self.nv.nvmlDeviceGetMemoryInfo(h)
        return m.used / MIB, m.total / MIB, None

    def _fatal(self, exc: Exception) -> bool:
        return getattr(exc, "value", None) in self.fatal_codes

    def sample(self) -> tuple[list[dict[str, Any]], ProcMem]:
        nv = self.nv
        gpus = []
        procs: ProcMem = {}
        for h, static in self.handles:
            gpu = dict(static)
            gpus.append(gpu)
            if h is None:
                continue
            try:
                for key, fn in (("mem", self._memory),
                                ("util_pct", lambda h: nv.nvmlDeviceGetUtilizationRates(h).gpu),
                                ("temp_c", lambda h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                                ("power_w", lambda h: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
                                ("sm_clock_mhz", lambda h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                                ("procs", nv.nvmlDeviceGetComputeRunningProcesses),
                                ("gprocs", nv.nvmlDeviceGetGraphicsRunningProcesses)):
                    try:
                        value = fn(h)
                    except Exception as exc:  # each field fails on its own to null (fan: NotSupported)
                        if self._fatal(exc):
                            raise
                        continue
                    if key == "mem":
                        gpu["mem_used_mib"], gpu["mem_total_mib"], gpu["mem_reserved_mib"] = value
                    elif key in ("procs", "gprocs"):
                        for p in value or ():
                            used = getattr(p, "usedGpuMemory", None)
                            per = procs.setdefault(int(p.pid), {})
                            # C+G: the same process in both lists; nvidia-smi shows it once
                            per[gpu["index"]] = max(per.get(gpu["index"], 0.0), (used or 0) / MIB)
                    else:
                        gpu[key] = float(value)
            except Exception as exc:  # fell off the bus: this GPU only, null fields and the reason
                gpus[-1] = dict(static, error=_err(exc))
                for per in procs.values():
                    per.pop(static["index"], None)
        return gpus, procs


class SmiSource:
    name = "nvidia-smi"

    def __init__(self, binary: str = "nvidia-smi") -> None:
        self.binary = binary
        self.gpu_fields = list(QUERY_GPU_FIELDS)
        out = self._query("--query-gpu=" + ",".join(self.gpu_fields))
        if out is None:  # an older nvidia-smi refuses a field it does not know: retry without the extras
            self.gpu_fields = [f for f in self.gpu_fields if f not in ("memory.reserved", "pstate",
                                                                      "ecc.errors.uncorrected.volatile.total")]
            out = self._query("--query-gpu=" + ",".join(self.gpu_fields), raise_error=True)
        first = parse_query_gpu(out or "", self.gpu_fields)
        rows = _csv_rows(out or "", self.gpu_fields)
        self.driver = rows[0].get("driver_version") if rows else None
        self.count = len(first)

    def _query(self, arg: str, raise_error: bool = False) -> str | None:
        try:
            res = subprocess.run([self.binary, arg, "--format=csv,noheader,nounits"], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, timeout=10, text=True)
        except FileNotFoundError:
            raise NoDriver("not found") from None
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise NoDriver(str(exc)) from None
        if res.returncode != 0:
            if raise_error or "valid field" not in res.stdout:
                raise NoDriver((res.stdout.strip().splitlines() or [f"exit {res.returncode}"])[0])
            return None
        return res.stdout

    def sample(self) -> tuple[list[dict[str, Any]], ProcMem]:
        gpus = parse_query_gpu(self._query("--query-gpu=" + ",".join(self.gpu_fields), True) or "",
                               self.gpu_fields)
        by_uuid = {g["uuid"]: g["index"] for g in gpus}
        procs: ProcMem = {}
        apps = self._query("--query-compute-apps=" + ",".join(QUERY_APPS_FIELDS), True) or ""
        for pid, mib, uuid in parse_query_apps(apps):
            if uuid in by_uuid:
                procs.setdefault(pid, {})[by_uuid[uuid]] = mib or 0.0
        return gpus, procs


class SimSource:
    """The simulated driver: DIR/gpus.json, DIR/holders/<pid>.json, optional DIR/load.json. Memory counts
    only while the holder is alive (not a zombie, same start time): freed the moment it exits. Optional
    DIR/leaked.json ({"<gpu>": MiB}) is memory counted used with no holder, until something (a simulated
    GPU reset) removes it."""

    name = "sim"

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
        try:
            st = self.stat.get(int(holder["pid"]))
        except (KeyError, ValueError, TypeError):
            return False
        return st is not None and st[0] not in ("Z", "X") and st[2] == holder.get("start_time")

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
        gpus = []
        for s in self.spec:
            i = int(s["index"])
            gpu = new_gpu(i, s.get("uuid", ""), s.get("name", ""))
            busy = used.get(i, 0.0) > 0
            u = (load if load is not None else util.get(i, 0.0)) if busy else 0.0
            u = min(100.0, max(0.0, u))
            max_w, idle_w = float(s.get("max_w", 600)), float(s.get("idle_w", 60))
            gpu.update(mem_used_mib=used.get(i, 0.0), mem_total_mib=float(s["total_mib"]),
                       mem_reserved_mib=float(s.get("reserved_mib", 0)), util_pct=u,
                       temp_c=round(32 + 0.45 * u, 1), power_w=round(idle_w + (max_w - idle_w) * u / 100, 1),
                       sm_clock_mhz=2100.0 if busy else 180.0)
            gpus.append(gpu)
        return gpus, procs


# --- /proc: device holders and process details --------------------------------------------------------

class HolderScan:
    """Who holds the device files. A full scan (every pid's fd links; maps only of pids with device fds)
    runs at most every ``every`` seconds. Between full scans no /proc listing is made (it alone costs
    ~170 us with 300 pids): holders that exited are dropped, and a pid the driver names for the first
    time is scanned at once (a new CUDA process is classed in its first sample). A new handle-only
    opener waits for the next full scan. Measured on an H200 host with 300 pids: full scan ~2.5 ms."""

    def __init__(self, proc_root: str, prefix: str, skip: set[int], every: float,
                 stat: StatReader | None = None) -> None:
        self.root, self.prefix, self.skip, self.every = proc_root, prefix, skip, every
        self.stat = stat or StatReader(proc_root)
        self.holders: dict[int, tuple[str | None, list[int], bool]] = {}
        self.named: set[int] = set()
        self.known: set[int] = set()
        self.last_full: float | None = None

    def scan_pid(self, pid: int) -> tuple[str | None, list[int], bool]:
        """(kind or None, gpus, readable)."""
        fd_dir = f"{self.root}/{pid}/fd"
        try:
            names = os.listdir(fd_dir)
        except PermissionError:
            return None, [], False
        except OSError:
            return None, [], True
        targets = []
        for n in names:
            try:
                t = os.readlink(fd_dir + "/" + n)
            except OSError:
                continue
            if t.startswith(self.prefix):
                targets.append(t)
        maps = ""
        if targets:  # a CUDA process keeps its device fds open; maps is read only for fd holders
            try:
                with open(f"{self.root}/{pid}/maps") as fh:
                    maps = fh.read()
            except OSError:
                pass
        kind, gpus = classify_holding(targets, maps, self.prefix)
        return kind, gpus, True

    def _keep(self, pid: int, res: tuple[str | None, list[int], bool]) -> None:
        if res[0] is not None or not res[2]:
            self.holders[pid] = res
        else:
            self.holders.pop(pid, None)

    def update(self, now: float, named: set[int]) -> dict[int, tuple[str | None, list[int], bool]]:
        named = named - self.skip
        if self.last_full is None or now - self.last_full >= self.every:
            self.last_full = now
            try:
                pids = {int(n) for n in os.listdir(self.root) if n.isdigit()} - self.skip
            except OSError:
                pids = set()
            self.holders = {}
            for pid in pids:
                self._keep(pid, self.scan_pid(pid))
            self.known = pids
        else:
            for pid in list(self.holders):
                st = self.stat.get(pid)
                if st is None or st[0] in ("Z", "X"):  # exited (a zombie holds no files)
                    del self.holders[pid]
            for pid in named - self.named:
                self._keep(pid, self.scan_pid(pid))
                self.known.add(pid)
        self.named = named
        return self.holders


class ProcDetails:
    """stat each sample (state, ppid change: orphans are reparented); user, cmdline and cgroup once per
    (pid, start time)."""

    def __init__(self, proc_root: str, stat: StatReader | None = None) -> None:
        self.root = proc_root
        self.stat = stat or StatReader(proc_root)
        self.static: dict[tuple[int, int], dict[str, Any]] = {}
        self.users: dict[int, str] = {}

    def _read(self, pid: int, name: str, binary: bool = False) -> Any:
        with open(f"{self.root}/{pid}/{name}", "rb" if binary else "r") as fh:
            return fh.read()

    def get(self, pid: int) -> dict[str, Any] | None:
        st = self.stat.get(pid)
        if st is None:
            return None
        state, ppid, start = st
        key = (pid, start)
        info = self.static.get(key)
        if info is None:
            info = {"user": None, "cmdline": "", "unit": None, "container": None}
            try:
                uid = parse_status_uid(self._read(pid, "status"))
                if uid is not None:
                    info["user"] = self._user(uid)
            except (OSError, ValueError):
                pass
            try:
                info["cmdline"] = parse_cmdline(self._read(pid, "cmdline", True))
            except OSError:
                pass
            try:
                info["unit"], info["container"] = parse_cgroup(self._read(pid, "cgroup"))
            except OSError:
                pass
            self.static[key] = info
        return dict(info, start_time=start, state=state, ppid=ppid)

    def _user(self, uid: int) -> str:
        if uid not in self.users:
            try:
                self.users[uid] = pwd.getpwuid(uid).pw_name
            except KeyError:
                self.users[uid] = str(uid)
        return self.users[uid]

    def forget_except(self, alive: set[int]) -> None:
        for key in [k for k in self.static if k[0] not in alive]:
            del self.static[key]


def build_procs(mem: ProcMem, holders: dict[int, tuple[str | None, list[int], bool]],
                details: ProcDetails, skip: set[int]) -> list[dict[str, Any]]:
    """ProcSample-shaped dicts for every pid with driver memory or a device file."""
    out = []
    for pid in sorted((set(mem) | set(holders)) - skip):
        kind, gpus, readable = holders.get(pid, (None, [], True))
        info = details.get(pid)
        flags = []
        p = {"pid": pid, "start_time": None, "user": None,
             "gpu_mem_mib": {str(k): round(v, 1) for k, v in sorted(mem.get(pid, {}).items())},
             "kind": kind or "unknown", "unit": None, "container": None, "cmdline": "", "state": None,
             "ppid": None, "gpus": gpus, "visible": info is not None, "flags": flags}
        if info is None:
            flags.append("pid-not-visible")  # a host PID seen from a container: never dropped
            p["kind"] = "unknown"
        else:
            p.update(info)
            if not readable:
                flags.append("no-access")
        if p["kind"] == "cuda" and not mem.get(pid):
            flags.append("no-nvml-memory")
        out.append(p)
    return out


# --- topology -----------------------------------------------------------------------------------------
# The interconnect as `nvidia-smi topo -m` shows it: per GPU its PCIe link (generation and width, current
# and max), active NVLink links, NUMA node and CPU affinity; per pair the path (NV#, PIX, PXB, PHB, NODE,
# SYS) and the P2P read status. From NVML (each call may fail on its own: the failure is listed, the rest
# stands), else PCIe only from `nvidia-smi -q -x`, else (the simulated host) modelled as PCIe Gen5 x16
# with no NVLink. Functions only, self-contained (the micro runner sends this section alone as a worker);
# kimitui.bench.micro.topology turns the dict into a Topology event.

TOPO_PATHS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
"""nvmlGpuTopologyLevel_t -> nvidia-smi topo -m's legend."""
P2P_STATUS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "NS", 5: "NS", 6: "U"}
"""nvmlGpuP2PStatus_t -> nvidia-smi topo -p2p's legend (OK, chipset / GPU / topology not supported, ...)."""


def _topo_str(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def cpu_list(words: list[int], bits: int = 64) -> str:
    """NVML's CPU affinity bitmask words -> '0-47,96-143'."""
    cpus = [w * bits + b for w, word in enumerate(words) for b in range(bits) if (int(word) >> b) & 1]
    out: list[str] = []
    start = prev = None
    for c in [*cpus, None]:
        if c is not None and prev is not None and c == prev + 1:
            prev = c
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = c
    return ",".join(out)


def sysfs_numa_node(bus_id: str, root: str = "/sys/bus/pci/devices") -> int | None:
    """NUMA node of a PCI device from sysfs; NVML bus ids have an 8-digit domain, sysfs a 4-digit one."""
    dom, _, rest = bus_id.lower().partition(":")
    try:
        with open(os.path.join(root, "{}:{}".format(dom[-4:].rjust(4, "0"), rest), "numa_node")) as fh:
            node = int(fh.read().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def nvml_topology(nv: Any) -> dict[str, Any]:
    """The topology from an initialised pynvml module."""
    errors: list[str] = []

    def get(what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            errors.append("{}: {}".format(what, (type(exc).__name__ + ": " + str(exc)).strip().rstrip(":")))
            return None

    count = get("device count", nv.nvmlDeviceGetCount) or 0
    handles, gpus = [], []
    ncpu_words = max(1, ((os.cpu_count() or 64) + 63) // 64)
    for i in range(count):
        h = get(f"GPU {i}: handle", nv.nvmlDeviceGetHandleByIndex, i)
        handles.append(h)
        g: dict[str, Any] = {"index": i, "name": "", "uuid": "", "bus_id": "", "pcie_gen": None,
                             "pcie_gen_max": None, "pcie_width": None, "pcie_width_max": None, "nvlinks": 0,
                             "nvlink_version": None, "nvlink_remote": [], "numa_node": None, "cpu_affinity": ""}
        gpus.append(g)
        if h is None:
            continue
        g["name"] = _topo_str(get(f"GPU {i}: name", nv.nvmlDeviceGetName, h) or "")
        g["uuid"] = _topo_str(get(f"GPU {i}: uuid", nv.nvmlDeviceGetUUID, h) or "")
        pci = get(f"GPU {i}: PCI info", nv.nvmlDeviceGetPciInfo, h)
        g["bus_id"] = _topo_str(getattr(pci, "busId", "") or "") if pci is not None else ""
        for key, fn in (("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
                        ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                        ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"),
                        ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth")):
            if hasattr(nv, fn):
                g[key] = get(f"GPU {i}: {key}", getattr(nv, fn), h)
        for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                active = nv.nvmlDeviceGetNvLinkState(h, link)
            except Exception:
                continue  # a link the GPU does not have (or no NVLink at all): not an error
            if active:
                g["nvlinks"] += 1
                if g["nvlink_version"] is None:
                    try:
                        g["nvlink_version"] = int(nv.nvmlDeviceGetNvLinkVersion(h, link))
                    except Exception:
                        pass
                try:
                    remote = nv.nvmlDeviceGetNvLinkRemotePciInfo(h, link)
                    g["nvlink_remote"].append(_topo_str(getattr(remote, "busId", "")))
                except Exception:
                    g["nvlink_remote"].append("")
        if hasattr(nv, "nvmlDeviceGetNumaNodeId"):
            try:
                g["numa_node"] = int(nv.nvmlDeviceGetNumaNodeId(h))
            except Exception:
                pass
        if g["numa_node"] is None and g["bus_id"]:
            g["numa_node"] = sysfs_numa_node(g["bus_id"])
        words = get(f"GPU {i}: CPU affinity", nv.nvmlDeviceGetCpuAffinity, h, ncpu_words)
        g["cpu_affinity"] = cpu_list(list(words)) if words else ""
    links = [["X" if a == b else "" for b in range(count)] for a in range(count)]
    p2p = [["X" if a == b else "" for b in range(count)] for a in range(count)]
    read = getattr(nv, "NVML_P2P_CAPS_INDEX_READ", 0)
    for a in range(count):
        for b in range(count):
            if a == b or handles[a] is None or handles[b] is None:
                continue
            nvl = sum(1 for bus in gpus[a]["nvlink_remote"] if bus and bus.lower() == gpus[b]["bus_id"].lower())
            if nvl:
                links[a][b] = f"NV{nvl}"
            else:
                level = get(f"GPUs {a},{b}: path", nv.nvmlDeviceGetTopologyCommonAncestor,
                            handles[a], handles[b])
                links[a][b] = TOPO_PATHS.get(int(level), "?") if level is not None else "?"
            status = get(f"GPUs {a},{b}: P2P", nv.nvmlDeviceGetP2PStatus, handles[a], handles[b], read)
            p2p[a][b] = P2P_STATUS.get(int(status), "U") if status is not None else "U"
    return {"source": "nvml", "gpus": gpus, "links": links, "p2p": p2p, "errors": errors}


def smi_xml_topology(xml_text: str) -> dict[str, Any]:
    """PCIe only, from `nvidia-smi -q -x` (no NVLink, path or P2P there)."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(xml_text)

    def num(node: Any, path: str) -> int | None:
        text = (node.findtext(path) or "").strip().rstrip("x")
        return int(text) if text.isdigit() else None

    gpus = []
    for i, gpu in enumerate(root.findall("gpu")):
        gpus.append({"index": i, "name": gpu.findtext("product_name") or "", "uuid": gpu.findtext("uuid") or "",
                     "bus_id": gpu.findtext("pci/pci_bus_id") or gpu.get("id", ""),
                     "pcie_gen": num(gpu, "pci/pci_gpu_link_info/pcie_gen/current_link_gen"),
                     "pcie_gen_max": num(gpu, "pci/pci_gpu_link_info/pcie_gen/max_link_gen"),
                     "pcie_width": num(gpu, "pci/pci_gpu_link_info/link_widths/current_link_width"),
                     "pcie_width_max": num(gpu, "pci/pci_gpu_link_info/link_widths/max_link_width"),
                     "nvlinks": 0, "nvlink_version": None, "nvlink_remote": [], "numa_node": None,
                     "cpu_affinity": ""})
    for g in gpus:
        g["numa_node"] = sysfs_numa_node(g["bus_id"]) if g["bus_id"] else None
    return {"source": "nvidia-smi", "gpus": gpus, "links": [], "p2p": [],
            "errors": ["nvidia-smi -q -x has no NVLink, path or P2P information (NVML is needed for those)"]}


def modelled_topology(sim_dir: str) -> dict[str, Any]:
    """The simulated host: its GPUs (gpus.json) on PCIe Gen5 x16, no NVLink, two NUMA nodes, P2P OK."""
    with open(os.path.join(sim_dir, "gpus.json")) as fh:
        spec = json.load(fh).get("gpus", [])
    n = len(spec)
    half = max(1, (n + 1) // 2)
    gpus = [{"index": int(s["index"]), "name": s.get("name", ""), "uuid": s.get("uuid", ""),
             "bus_id": s.get("pci", ""), "pcie_gen": 5, "pcie_gen_max": 5, "pcie_width": 16,
             "pcie_width_max": 16, "nvlinks": 0, "nvlink_version": None, "nvlink_remote": [],
             "numa_node": i // half, "cpu_affinity": f"{48 * (i // half)}-{48 * (i // half) + 47}"}
            for i, s in enumerate(spec)]
    links = [["X" if a == b else ("NODE" if a // half == b // half else "SYS") for b in range(n)] for a in range(n)]
    p2p = [["X" if a == b else "OK" for b in range(n)] for a in range(n)]
    return {"source": "modelled", "gpus": gpus, "links": links, "p2p": p2p, "errors": []}


def collect_topology(sim_dir: str | None = None, nvidia_smi: str = "nvidia-smi", nvml: Any = None) -> dict[str, Any]:
    """The host's topology: NVML, else nvidia-smi -q -x, else an error (one line, never an exception)."""
    if sim_dir:
        try:
            return modelled_topology(sim_dir)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return {"source": "modelled", "gpus": [], "links": [], "p2p": [], "errors": [f"simulated host: {exc}"]}
    reasons = []
    nv = nvml
    if nv is None:
        try:
            import pynvml as nv  # type: ignore
        except ImportError:
            reasons.append("NVML: pynvml not installed")
    if nv is not None:
        try:
            nv.nvmlInit()
            try:
                return nvml_topology(nv)
            finally:
                try:
                    nv.nvmlShutdown()
                except Exception:
                    pass
        except Exception as exc:
            reasons.append("NVML: %s" % (str(exc) or type(exc).__name__))
    try:
        out = subprocess.run([nvidia_smi, "-q", "-x"], capture_output=True, timeout=30)
        if out.returncode == 0:
            topo = smi_xml_topology(out.stdout.decode("utf-8", "replace"))
            topo["errors"] = reasons + topo["errors"]
            return topo
        reasons.append(f"nvidia-smi: exit status {out.returncode}")
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        reasons.append(f"nvidia-smi: {exc}")
    return {"source": "none", "gpus": [], "links": [], "p2p": [], "errors": reasons}


# --- the sampler loop ---------------------------------------------------------------------------------

def _text(v: Any) -> str | None:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def _err(exc: BaseException) -> str:
    return (f"{type(exc).__name__}: {exc}").strip().rstrip(":")


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def log(level: str, message: str) -> None:
    emit({"t": time.time(), "type": "log", "level": level, "source": "agent", "message": message})


def open_source(args: Any) -> Any:
    if args.sim_dir:
        return SimSource(args.sim_dir, StatReader(args.proc_root))
    reasons = []
    if not args.no_nvml:
        try:
            src = NvmlSource()
            if src.handles:
                return src
            reasons.append("NVML: 0 GPUs")
        except NoDriver as exc:
            reasons.append(f"NVML: {exc}")
    else:
        reasons.append("NVML: disabled")
    try:
        return SmiSource(args.nvidia_smi)
    except NoDriver as exc:
        reasons.append(f"nvidia-smi: {exc}")
    raise NoDriver("no NVIDIA driver on this host ({})".format(", ".join(reasons)))


class Sampler:
    def __init__(self, source: Any, args: Any) -> None:
        self.source, self.args = source, args
        self.pid = os.getpid()
        self.skip = {self.pid}
        self.host = socket.gethostname()
        self.stat = getattr(source, "stat", None) or StatReader(args.proc_root)
        self.scan = HolderScan(args.proc_root, args.dev_prefix, self.skip, args.scan_interval, self.stat)
        self.details = ProcDetails(args.proc_root, self.stat)
        self.seq = 0

    def sample(self, now: float) -> dict[str, Any]:
        t = time.time()
        self.stat.tick()
        gpus, mem = self.source.sample()
        holders = self.scan.update(now, set(mem))
        procs = build_procs(mem, holders, self.details, self.skip)
        if self.seq % 64 == 0:
            self.details.forget_except(self.scan.known)
        self.seq += 1
        return {"t": t, "type": "sample", "host": self.host, "seq": self.seq, "gpus": gpus, "procs": procs,
                "agent_pid": self.pid, "source": self.source.name}


def parse_args(argv: list[str]) -> Any:
    import argparse

    ap = argparse.ArgumentParser(prog="kimitui-agent")
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--dev-prefix", default=None)
    ap.add_argument("--sim-dir", default=None)
    ap.add_argument("--proc-root", default="/proc")
    ap.add_argument("--scan-interval", type=float, default=2.0, help="seconds between full fd/maps scans")
    ap.add_argument("--nvidia-smi", default="nvidia-smi")
    ap.add_argument("--no-nvml", action="store_true")
    ap.add_argument("--count", type=int, default=0, help="stop after N samples (0: until stdin closes)")
    ap.add_argument("--probe", action="store_true", help="print hello (or fatal) and exit")
    args = ap.parse_args(argv)
    if args.dev_prefix is None:
        args.dev_prefix = os.path.join(args.sim_dir, "dev", "nvidia") if args.sim_dir else "/dev/nvidia"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        source = open_source(args)
    except NoDriver as exc:
        emit({"t": time.time(), "type": "fatal", "message": str(exc)})
        return FATAL_EXIT
    gpus = len(getattr(source, "handles", None) or getattr(source, "spec", None) or []) or getattr(
        source, "count", 0)
    emit({"t": time.time(), "type": "hello", "agent_pid": os.getpid(), "source": source.name,
          "driver": source.driver, "python": ".".join(map(str, sys.version_info[:3])), "gpus": gpus})
    if args.probe:
        return 0
    if args.interval < 0.1:
        log("warning", f"interval {args.interval:.3f}s below the 0.1s minimum: using 0.1s")
        args.interval = 0.1
    sampler = Sampler(source, args)
    deadline = time.monotonic()
    stdin_open = True
    while True:
        try:
            emit(sampler.sample(time.monotonic()))
        except BrokenPipeError:
            return 0
        except Exception as exc:  # one bad sample is a log line, not the end of the agent
            log("error", f"sample failed: {_err(exc)}")
        if args.count and sampler.seq >= args.count:
            return 0
        deadline += args.interval
        now = time.monotonic()
        if deadline < now:  # late (suspended, slow nvidia-smi): skip the missed ticks, keep the phase
            deadline += ((now - deadline) // args.interval + 1) * args.interval
        while True:
            wait = deadline - time.monotonic()
            if wait <= 0:
                break
            if not stdin_open:
                time.sleep(wait)
                continue
            ready = select.select([0], [], [], wait)[0]
            if ready:
                try:
                    data = os.read(0, 65536)
                except OSError:
                    data = b""
                if not data:
                    if not args.count:
                        return 0  # stdin closed: the caller is gone
                    stdin_open = False  # --count N runs its N samples whatever stdin does


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
