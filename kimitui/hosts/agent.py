"""kimitui's host agent: the one program that runs on a GPU host, on the host's own python3 (3.8 to 3.13).

Stdlib plus pynvml where present; it never imports kimitui, because its source is sent over the channel and
run there through BOOTSTRAP (the caller side, at the top of this file, never runs on the host). Locally,
kimitui imports this module for the few /proc helpers it shares with the host side (read_stat,
start_time_of, ancestry, guarded_signal): /proc/PID/stat is parsed here and nowhere else.

One channel: requests come in on stdin, everything goes out on stdout, one JSON object a line, ``t`` and
``type`` first. The agent exits when its stdin closes (the caller is gone), ending its workers first.

Out (stdout):
  hello        {agent_pid, start_time, protocol, python, executable, host, user, uid, ancestors}   once, first;
               ancestors: [[pid, start time, ppid, comm], ...] from the parent up to (not including) PID 1
  fatal        {message}                    only from BOOTSTRAP: this python is too old (exit 5)
  reply        {id, ok: true, result} or {id, ok: false, error, kind}          one per request, any order
  sample       {host, seq, gpus, procs, agent_pid, source}       while a sample stream runs (HostSample shape)
  log          {level, source, message}     a warning of the agent's (LogLine shape)
  worker_line  {worker, data} (a JSON line of the worker's stdout) or {worker, text} (any other line)
  worker_exit  {worker, returncode, cancelled, stderr_tail}   after the worker's last line

In (stdin): {"id": N, "op": OP, ...fields}. Error kinds: bad_request, not_found, permission, timeout,
nodriver, error. Ops (a request is answered once and never repeated by the caller):
  ping           -                                       -> {agent_pid}
  probe          SOURCE                                  -> {source, driver, gpus} (nodriver: the reasons)
  sample         SOURCE, interval, scan_interval, count  -> as probe; samples follow until sample_stop
  sample_stop    -                                       -> {stopped}
  scan           -                      -> {self_pid, uid, user, ancestors, procs: [{pid, ppid, state,
                                            start, uid, user, cmdline, exe}]}
  stat           pids                   -> {procs: {"PID": [start time, state]}} (gone pids left out)
  read_file      path, max_bytes        -> {data (base64), size}
  signal         pid, start_time, sig   -> {outcome: sent|gone|mismatch|refused|error, detail}; refused
                                           for PID 1, kernel threads, the agent and its ancestors
  run            argv, timeout, stdin (base64), env, cwd   -> {rc, stdout, stderr}; in its own process
                                           group, killed on timeout (kind timeout); not_found if no such command
  spawn          argv, log, env, cwd    -> {pid, start_time}: detached (own session), output to log
  http_get       url, timeout           -> {status (int or null), error}
  worker_start   source, args, env, python, cwd  -> {worker, pid, python}; the worker id is the request id
  worker_cancel  worker, grace          -> {signalled}: SIGTERM to its group, SIGKILL after grace
SOURCE fields: sim_dir, dev_prefix, proc_root, nvidia_smi, no_nvml (NVML, else nvidia-smi --query-* CSV,
else the simulated driver of --sim-dir DIR: gpus.json, holders/<pid>.json, load.json, leaked.json). Every
GPU process is enriched from /proc, and /proc/*/fd + /proc/*/maps are scanned for the device files:
mapped = CUDA context ("cuda"), open but not mapped = "handle".

Python 3.8 compatible (tests run it under 3.8 and the newest python on the machine; vermin and ruff's
per-file target check it): no zip(strict=), no os.pidfd_open or signal.pidfd_send_signal without the
syscall fallback, nothing imported at module level beyond what a local helper import can afford.
"""

from __future__ import annotations

import errno
import json
import os
import pwd
import re
import signal
import sys
import threading
import time
from collections import namedtuple

TYPE_CHECKING = False  # typing is not imported at run time: local helpers import this module, so it stays light
if TYPE_CHECKING:
    from typing import Any

MIB = 1048576.0
PROTOCOL = 2
MIN_PYTHON = (3, 8)
OLD_PYTHON_EXIT = 5

# --- caller side: how the agent is started on a host (never runs there) -----------------------------

_BOOTSTRAP = (
    "import os,sys\n"
    "v=sys.version_info\n"
    "if v<(%d,%d):\n"
    " import json\n"
    " sys.stdout.write(json.dumps({'t':0,'type':'fatal','message':'python %%d.%%d.%%d at %%s is too old: "
    "the kimitui agent needs python >= %d.%d'%%(v[0],v[1],v[2],sys.executable)})+'\\n')\n"
    " sys.stdout.flush()\n"
    " sys.exit(%d)\n"
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
    "import types\n"
    "m=types.ModuleType('__main__')\n"
    "m.__dict__['__builtins__']=__builtins__\n"
    "sys.modules['__main__']=m\n"
    "sys.argv=['kimitui-agent']+sys.argv[1:]\n"
    "exec(compile(src,'kimitui-agent','exec'),m.__dict__)\n"
)


def bootstrap(min_python: tuple[int, int] = MIN_PYTHON) -> str:
    """Run as ``python3 -u -c BOOTSTRAP ARGS``: checks the python's version first (in syntax any python
    parses, so a too-old one says so in one line), reads ``<length>\\n<source>`` from stdin (unbuffered, so
    no byte past the source is consumed), then runs the source as the __main__ module; the rest of stdin
    is the request channel."""
    return _BOOTSTRAP % (min_python[0], min_python[1], min_python[0], min_python[1], OLD_PYTHON_EXIT)


BOOTSTRAP = bootstrap()


def agent_source() -> bytes:
    with open(os.path.abspath(__file__), "rb") as fh:
        return fh.read()


def agent_payload() -> bytes:
    """What to write to the bootstrap's stdin: the length-prefixed agent source."""
    src = agent_source()
    return b"%d\n" % len(src) + src


def agent_command(python: str = "python3", extra: tuple[str, ...] = (),
                  min_python: tuple[int, int] = MIN_PYTHON) -> list[str]:
    """The argv that starts the agent through the bootstrap; send agent_payload() on its stdin."""
    return [python, "-u", "-c", bootstrap(min_python), *extra]


# --- /proc: the one parser of /proc/PID/stat ------------------------------------------------------

ProcStat = namedtuple("ProcStat", "pid comm state ppid pgrp session start_time")
"""/proc/PID/stat fields 1-6 and 22 (start time: clock ticks after boot; with the pid, a process's identity)."""


def parse_stat(text: str) -> ProcStat:
    """Parse /proc/PID/stat; the command name may hold spaces and ')', so split at the last ')'."""
    head, _, rest = text.rpartition(")")
    pid_s, _, comm = head.partition(" (")
    f = rest.split()
    return ProcStat(int(pid_s), comm, f[0], int(f[1]), int(f[2]), int(f[3]), int(f[19]))


def read_stat(pid: int, proc_root: str = "/proc") -> ProcStat | None:
    """The process's stat, or None when it is gone (zombies are returned, state Z)."""
    try:
        with open(f"{proc_root}/{pid}/stat") as fh:
            return parse_stat(fh.read())
    except (OSError, ValueError, IndexError):
        return None


def start_time_of(pid: int, proc_root: str = "/proc") -> int | None:
    """The start time of a live process; None when it is gone or a zombie."""
    st = read_stat(pid, proc_root)
    return None if st is None or st.state in ("Z", "X") else st.start_time


def ancestry(pid: int, proc_root: str = "/proc") -> list[ProcStat]:
    """The ancestors of PID, its parent first, up to (not including) PID 1."""
    out: list[ProcStat] = []
    seen = {pid}
    st = read_stat(pid, proc_root)
    while st is not None and st.ppid > 1 and st.ppid not in seen:
        seen.add(st.ppid)
        st = read_stat(st.ppid, proc_root)
        if st is not None:
            out.append(st)
    return out


class StatReader:
    """/proc/PID/stat, read at most once per sample (tick() starts one): the sim driver's liveness check
    and the process details share the read."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.root = proc_root
        self.memo: dict[int, ProcStat | None] = {}

    def tick(self) -> None:
        self.memo = {}

    def get(self, pid: int) -> ProcStat | None:
        if pid not in self.memo:
            self.memo[pid] = read_stat(pid, self.root)
        return self.memo[pid]


# --- the guarded signal: pidfd first, then the start-time check, then the signal through the pidfd -----

_PIDFD_SYSCALLS = {"x86_64": (434, 424), "aarch64": (434, 424), "arm64": (434, 424), "armv7l": (434, 424),
                   "ppc64le": (434, 424), "s390x": (434, 424), "riscv64": (434, 424)}
"""(pidfd_open, pidfd_send_signal) numbers for pythons without os.pidfd_open (3.8): the same on every
architecture of the unified syscall table (kernel >= 5.3)."""
_libc: Any = None


def _syscall(*args: int) -> int:
    global _libc
    import ctypes

    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    res = _libc.syscall(*[ctypes.c_long(a) for a in args])
    if res < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(res)


def _pidfd_open(pid: int) -> int | None:
    """A pidfd for PID, None when this kernel or python has none (then kill() after the check)."""
    fn = getattr(os, "pidfd_open", None)
    nums = _PIDFD_SYSCALLS.get(os.uname().machine)
    try:
        if fn is not None:
            return int(fn(pid))
        if nums is None:
            return None
        return _syscall(nums[0], pid, 0)
    except OSError as exc:
        if exc.errno == errno.ESRCH:
            raise ProcessLookupError(errno.ESRCH, "No such process") from None
        if exc.errno in (errno.ENOSYS, errno.EPERM):  # an old kernel, or a seccomp filter that forbids it
            return None
        raise


def _pidfd_send_signal(fd: int, sig: int) -> None:
    fn = getattr(signal, "pidfd_send_signal", None)
    if fn is not None:
        fn(fd, sig)
        return
    try:
        _syscall(_PIDFD_SYSCALLS[os.uname().machine][1], fd, sig, 0, 0)
    except OSError as exc:
        if exc.errno == errno.ESRCH:
            raise ProcessLookupError(errno.ESRCH, "No such process") from None
        if exc.errno == errno.EPERM:
            raise PermissionError(errno.EPERM, "Operation not permitted") from None
        raise


def guarded_signal(pid: int, start_time: int, sig: int, proc_root: str = "/proc") -> tuple[str, str]:
    """Signal the process only if (pid, start time) still match: ("sent" | "gone" | "mismatch" | "error",
    detail). The pidfd is opened before the check, so a pid reused between the check and the signal is
    never hit; where there is no pidfd the check is made right before kill()."""
    try:
        fd = _pidfd_open(pid)
    except ProcessLookupError:
        return "gone", ""
    except OSError as exc:
        return "error", exc.strerror or str(exc)
    try:
        st = read_stat(pid, proc_root)
        if st is None:
            return "gone", ""
        if st.state in ("Z", "X"):
            return "gone", "zombie"
        if st.start_time != start_time:
            return "mismatch", f"start time {st.start_time}, expected {start_time}"
        try:
            if fd is not None:
                _pidfd_send_signal(fd, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            return "gone", ""
        except PermissionError:
            return "error", "permission denied"
        except OSError as exc:
            return "error", exc.strerror or str(exc)
        return "sent", ""
    finally:
        if fd is not None:
            os.close(fd)


# --- /proc parsers ------------------------------------------------------------------------------------

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
        rows.append(dict(zip(fields, cells)))  # lengths checked above
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
        import subprocess

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
        return st is not None and st.state not in ("Z", "X") and st.start_time == holder.get("start_time")

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
                if st is None or st.state in ("Z", "X"):  # exited (a zombie holds no files)
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
        state, ppid, start = st.state, st.ppid, st.start_time
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
            info["exe"] = read_exe(pid, self.root)
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
             "ppid": None, "gpus": gpus, "visible": info is not None, "flags": flags, "exe": None}
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
    import subprocess

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



# --- the process table (scan and stat requests) -------------------------------------------------------

_USERS: dict[int, str] = {}


def user_name(uid: int | None) -> str | None:
    if uid is None:
        return None
    if uid not in _USERS:
        try:
            _USERS[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            _USERS[uid] = str(uid)
    return _USERS[uid]


def _read_uid(pid: int, proc_root: str) -> int | None:
    try:
        with open(f"{proc_root}/{pid}/status") as fh:
            return parse_status_uid(fh.read())
    except (OSError, ValueError, IndexError):
        return None


def read_exe(pid: int, proc_root: str = "/proc") -> str | None:
    """The executable's path (readlink /proc/PID/exe): set by the kernel at exec, unlike argv. None when
    unreadable (another user's process without the right to look, a kernel thread, gone)."""
    try:
        return os.readlink(f"{proc_root}/{pid}/exe")
    except OSError:
        return None


def _read_cmdline(pid: int, proc_root: str) -> str:
    try:
        with open(f"{proc_root}/{pid}/cmdline", "rb") as fh:
            return parse_cmdline(fh.read())
    except OSError:
        return ""


def process_table(proc_root: str = "/proc") -> dict[str, Any]:
    """Every process (pid, ppid, start, state, uid, user, cmdline), and who is scanning: this process and
    its ancestors (over SSH: the session's sshd processes and the listening sshd)."""
    me = os.getpid()
    procs = []
    for name in os.listdir(proc_root):
        if not name.isdigit():
            continue
        pid = int(name)
        st = read_stat(pid, proc_root)
        if st is None:
            continue
        uid = _read_uid(pid, proc_root)
        procs.append({"pid": pid, "ppid": st.ppid, "state": st.state, "start": st.start_time, "uid": uid,
                      "user": user_name(uid), "cmdline": _read_cmdline(pid, proc_root),
                      "exe": read_exe(pid, proc_root)})
    return {"self_pid": me, "uid": os.getuid(), "user": user_name(os.getuid()),
            "ancestors": [a.pid for a in ancestry(me, proc_root)], "procs": procs}


# --- GPU sources and the sampler -----------------------------------------------------------------------

def _text(v: Any) -> str | None:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def _err(exc: BaseException) -> str:
    return " ".join((f"{type(exc).__name__}: {exc}").split()).rstrip(":")


_OUT = threading.Lock()


def emit(obj: dict[str, Any]) -> None:
    """Write one line to the channel (whole, whatever thread writes)."""
    line = json.dumps(obj, separators=(",", ":")) + "\n"
    with _OUT:
        sys.stdout.write(line)
        sys.stdout.flush()


def log(level: str, message: str) -> None:
    emit({"t": time.time(), "type": "log", "level": level, "source": "agent", "message": message})


SOURCE_FIELDS = ("sim_dir", "dev_prefix", "proc_root", "nvidia_smi", "no_nvml")


def source_config(req: dict[str, Any]) -> dict[str, Any]:
    cfg = {"sim_dir": req.get("sim_dir"), "dev_prefix": req.get("dev_prefix"),
           "proc_root": req.get("proc_root") or "/proc", "nvidia_smi": req.get("nvidia_smi") or "nvidia-smi",
           "no_nvml": bool(req.get("no_nvml"))}
    if cfg["dev_prefix"] is None:
        cfg["dev_prefix"] = os.path.join(cfg["sim_dir"], "dev", "nvidia") if cfg["sim_dir"] else "/dev/nvidia"
    return cfg


def open_source(cfg: dict[str, Any]) -> Any:
    if cfg["sim_dir"]:
        return SimSource(cfg["sim_dir"], StatReader(cfg["proc_root"]))
    reasons = []
    if not cfg["no_nvml"]:
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
        return SmiSource(cfg["nvidia_smi"])
    except NoDriver as exc:
        reasons.append(f"nvidia-smi: {exc}")
    raise NoDriver("no NVIDIA driver on this host ({})".format(", ".join(reasons)))


def boot_time(proc_root: str = "/proc") -> float | None:
    """When the host booted (unix seconds, ``btime`` of /proc/stat): with the clock tick rate it turns a
    process's start (ticks after boot) into a time of day."""
    try:
        with open(os.path.join(proc_root, "stat")) as fh:
            for line in fh:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def source_info(source: Any) -> dict[str, Any]:
    gpus = len(getattr(source, "handles", None) or getattr(source, "spec", None) or []) or getattr(
        source, "count", 0)
    return {"source": source.name, "driver": source.driver, "gpus": gpus}


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
        procs = build_procs(mem, holders, self.details, self.skip)
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
                log("error", f"sample failed: {_err(exc)}")
            if self.count and self.sampler.seq >= self.count:
                return
            deadline += self.interval
            now = time.monotonic()
            if deadline < now:
                deadline += ((now - deadline) // self.interval + 1) * self.interval
            self.stop.wait(deadline - now if deadline > now else 0)


# --- workers: python started from source sent over the channel, streamed back line by line --------------

class Worker:
    """One worker: its own session and process group; stdout JSON lines go out tagged with its id."""

    TAIL = 8192

    def __init__(self, wid: int, proc: Any, workdir: str) -> None:
        self.id, self.proc, self.workdir = wid, proc, workdir
        self.lock = threading.Lock()
        self.reaped = False
        self.cancelled = False
        self.exited = threading.Event()
        self.stderr = bytearray()

    def start(self) -> None:
        self.out_thread = threading.Thread(target=self._stdout, daemon=True)
        self.err_thread = threading.Thread(target=self._stderr, daemon=True)
        self.out_thread.start()
        self.err_thread.start()
        threading.Thread(target=self._wait, daemon=True).start()

    def _stdout(self) -> None:
        for raw in iter(self.proc.stdout.readline, b""):
            text = raw.decode("utf-8", "replace").rstrip("\r\n")
            msg: dict[str, Any] = {"t": time.time(), "type": "worker_line", "worker": self.id}
            try:
                msg["data"] = json.loads(text)
            except ValueError:
                msg["text"] = text
            try:
                emit(msg)
            except (BrokenPipeError, ValueError):
                pass

    def _stderr(self) -> None:
        while True:
            try:
                chunk = os.read(self.proc.stderr.fileno(), 65536)
            except OSError:
                chunk = b""
            if not chunk:
                return
            self.stderr.extend(chunk)
            if len(self.stderr) > 4 * self.TAIL:
                del self.stderr[: len(self.stderr) - self.TAIL]

    def _wait(self) -> None:
        pid = self.proc.pid
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: its group id is still ours
        except ChildProcessError:
            pass
        with self.lock:
            _killpg(pid, signal.SIGKILL)  # what is left in its group (a child it started) goes with it
            rc = self.proc.wait()
            self.reaped = True
        self.exited.set()
        self.out_thread.join(5.0)
        self.err_thread.join(5.0)
        tail = bytes(self.stderr[-self.TAIL:]).decode("utf-8", "replace") if rc != 0 else ""
        import shutil

        shutil.rmtree(self.workdir, ignore_errors=True)
        try:
            emit({"t": time.time(), "type": "worker_exit", "worker": self.id, "returncode": rc,
                  "cancelled": self.cancelled, "stderr_tail": tail})
        except (BrokenPipeError, ValueError):
            pass

    def signal_group(self, sig: int) -> bool:
        """Signal its process group while the worker is not reaped (the group id cannot be reused then)."""
        with self.lock:
            if self.reaped:
                return False
            return _killpg(self.proc.pid, sig)

    def cancel(self, grace: float) -> bool:
        self.cancelled = True
        sent = self.signal_group(signal.SIGTERM)

        def escalate() -> None:
            if not self.exited.wait(grace):
                self.signal_group(signal.SIGKILL)

        threading.Thread(target=escalate, daemon=True).start()
        return sent


def _killpg(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


# --- requests ---------------------------------------------------------------------------------------------

class RequestError(Exception):
    def __init__(self, message: str, kind: str = "error") -> None:
        Exception.__init__(self, message)
        self.kind = kind


def _argv(req: dict[str, Any]) -> list[str]:
    argv = req.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise RequestError("argv must be a non-empty list of strings", "bad_request")
    return argv


def _env(extra: Any) -> dict[str, str]:
    env = dict(os.environ)
    if extra:
        if not isinstance(extra, dict):
            raise RequestError("env must be an object of strings", "bad_request")
        env.update({str(k): str(v) for k, v in extra.items()})
    return env


class Agent:
    SLOW = ("run", "http_get", "spawn", "topology")
    """Requests answered on a thread of their own (they wait on something else); the rest in turn."""

    def __init__(self, args: Any) -> None:
        self.args = args
        self.pid = os.getpid()
        self.stream: SampleStream | None = None
        self.sources: dict[tuple[Any, ...], Any] = {}
        self.workers: dict[int, Worker] = {}
        self.running: dict[int, Any] = {}  # run requests' processes, killed if the caller goes away
        self.lock = threading.Lock()

    def hello(self) -> dict[str, Any]:
        import socket

        st = read_stat(self.pid)
        v = sys.version_info
        return {"t": time.time(), "type": "hello", "agent_pid": self.pid,
                "start_time": st.start_time if st else None, "protocol": PROTOCOL,
                "python": f"{v[0]}.{v[1]}.{v[2]}", "executable": sys.executable,
                "host": socket.gethostname(), "user": user_name(os.getuid()), "uid": os.getuid(),
                "ancestors": [[a.pid, a.start_time, a.ppid, a.comm] for a in ancestry(self.pid)]}

    # -- dispatch --

    def handle(self, line: bytes) -> None:
        try:
            req = json.loads(line.decode("utf-8", "replace"))
        except ValueError:
            log("warning", f"bad request line (not JSON): {line[:80]!r}")
            return
        if not isinstance(req, dict):
            log("warning", f"bad request line (not an object): {line[:80]!r}")
            return
        op = req.get("op")
        fn = getattr(self, f"op_{op}", None) if isinstance(op, str) and op.isidentifier() else None
        if fn is None:
            self.reply(req.get("id"), None, f"unknown op {op!r}", "bad_request")
        elif op in self.SLOW:
            threading.Thread(target=self.answer, args=(fn, req), daemon=True).start()
        else:
            self.answer(fn, req)

    def answer(self, fn: Any, req: dict[str, Any]) -> None:
        try:
            result = fn(req)
        except RequestError as exc:
            self.reply(req.get("id"), None, str(exc), exc.kind)
        except (KeyError, TypeError, ValueError) as exc:
            self.reply(req.get("id"), None, f"bad request: {_err(exc)}", "bad_request")
        except Exception as exc:
            self.reply(req.get("id"), None, _err(exc), "error")
        else:
            self.reply(req.get("id"), result)

    def reply(self, rid: Any, result: Any, error: str | None = None, kind: str = "error") -> None:
        msg: dict[str, Any] = {"t": time.time(), "type": "reply", "id": rid, "ok": error is None}
        if error is None:
            msg["result"] = result
        else:
            msg["error"], msg["kind"] = " ".join(error.split()), kind
        try:
            emit(msg)
        except (BrokenPipeError, ValueError):
            pass

    # -- telemetry --

    def _source(self, req: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        cfg = source_config(req)
        key = tuple(cfg[k] for k in SOURCE_FIELDS)
        source = self.sources.get(key)
        if source is None or isinstance(source, SimSource):  # a sim driver is re-read from its files
            try:
                source = open_source(cfg)
            except NoDriver as exc:
                raise RequestError(str(exc), "nodriver") from None
            self.sources[key] = source
        return source, cfg

    def op_ping(self, req: dict[str, Any]) -> dict[str, Any]:
        return {"agent_pid": self.pid}

    def op_topology(self, req: dict[str, Any]) -> dict[str, Any]:
        """The interconnect (``collect_topology``): NVML, else nvidia-smi -q -x, else modelled (sim_dir)."""
        return collect_topology(sim_dir=req.get("sim_dir") or None,
                                nvidia_smi=str(req.get("nvidia_smi") or "nvidia-smi"))

    def op_probe(self, req: dict[str, Any]) -> dict[str, Any]:
        return source_info(self._source(req)[0])

    def op_sample(self, req: dict[str, Any]) -> dict[str, Any]:
        self.op_sample_stop(req)
        source, cfg = self._source(req)
        asked = float(req.get("interval") or 0.5)
        if asked < 0.1:
            log("warning", f"interval {asked:.3f}s below the 0.1s minimum: using 0.1s")
        interval = max(0.1, asked)
        scan = float(req.get("scan_interval") or 2.0)
        self.stream = SampleStream(source, cfg, interval, scan, int(req.get("count") or 0))
        info = source_info(source)
        self.stream.start()
        return info

    def op_sample_stop(self, req: dict[str, Any]) -> dict[str, Any]:
        stream, self.stream = self.stream, None
        if stream is None:
            return {"stopped": False}
        stream.stop.set()
        stream.join(10.0)
        return {"stopped": True}

    # -- processes --

    def op_scan(self, req: dict[str, Any]) -> dict[str, Any]:
        return process_table()

    def op_stat(self, req: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for pid in req["pids"]:
            st = read_stat(int(pid))
            if st is not None:
                out[str(int(pid))] = [st.start_time, st.state]
        return {"procs": out}

    def refusal(self, pid: int) -> str | None:
        """Why the agent will not signal this pid, whatever the caller says."""
        if pid < 1:
            return "not a process id"
        if pid == 1:
            return "PID 1 (init)"
        if pid == self.pid:
            return "the agent itself"
        if pid in {a.pid for a in ancestry(self.pid)}:
            return "an ancestor of the agent (its session: the shell, sshd or kimitui)"
        st = read_stat(pid)
        if pid == 2 or (st is not None and st.ppid == 2):
            return "kernel thread"
        return None

    def op_signal(self, req: dict[str, Any]) -> dict[str, Any]:
        pid, start, sig = int(req["pid"]), int(req["start_time"]), int(req["sig"])
        why = self.refusal(pid)
        if why is not None:
            return {"outcome": "refused", "detail": why}
        outcome, detail = guarded_signal(pid, start, sig)
        return {"outcome": outcome, "detail": detail}

    def op_read_file(self, req: dict[str, Any]) -> dict[str, Any]:
        import base64

        path, limit = str(req["path"]), int(req.get("max_bytes") or 16 << 20)
        try:
            with open(path, "rb") as fh:
                data = fh.read(limit + 1)
        except FileNotFoundError:
            raise RequestError(f"no such file: {path}", "not_found") from None
        except PermissionError:
            raise RequestError(f"permission denied: {path}", "permission") from None
        except OSError as exc:
            raise RequestError(f"cannot read {path}: {exc.strerror or exc}", "error") from None
        if len(data) > limit:
            raise RequestError(f"{path} is larger than {limit} bytes", "too_large")
        return {"data": base64.b64encode(data).decode("ascii"), "size": len(data)}

    # -- commands --

    def _popen(self, argv: list[str], **kw: Any) -> Any:
        import subprocess

        try:
            return subprocess.Popen(argv, start_new_session=True, **kw)
        except FileNotFoundError:
            raise RequestError(f"command not found: {argv[0]}", "not_found") from None
        except PermissionError:
            raise RequestError(f"permission denied: {argv[0]}", "permission") from None
        except OSError as exc:
            raise RequestError(f"cannot start {argv[0]}: {exc.strerror or exc}", "error") from None

    def op_run(self, req: dict[str, Any]) -> dict[str, Any]:
        import base64
        import subprocess

        argv, timeout = _argv(req), float(req.get("timeout") or 30.0)
        stdin = base64.b64decode(req["stdin"]) if req.get("stdin") is not None else None
        proc = self._popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(req.get("env")),
                           cwd=req.get("cwd") or None)
        with self.lock:
            self.running[proc.pid] = proc
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            _killpg(proc.pid, signal.SIGKILL)  # not reaped yet: the group id is still the command's
            proc.communicate()
            raise RequestError(f"{argv[0]} timed out after {timeout:.1f}s", "timeout") from None
        finally:
            with self.lock:
                self.running.pop(proc.pid, None)
        return {"rc": proc.returncode, "stdout": out.decode("utf-8", "replace"),
                "stderr": err.decode("utf-8", "replace")}

    def op_spawn(self, req: dict[str, Any]) -> dict[str, Any]:
        import subprocess

        argv, log_path = _argv(req), str(req.get("log") or os.devnull)
        try:
            out = open(log_path, "ab")  # noqa: SIM115 (closed below, once the child has its copy)
        except OSError as exc:
            raise RequestError(f"cannot open log {log_path}: {exc.strerror or exc}", "error") from None
        with out:
            proc = self._popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=_env(req.get("env")),
                               cwd=req.get("cwd") or None)
        start = start_time_of(proc.pid)
        threading.Thread(target=proc.wait, daemon=True).start()  # reaped when it exits, never signalled
        return {"pid": proc.pid, "start_time": start}

    def op_http_get(self, req: dict[str, Any]) -> dict[str, Any]:
        import urllib.error
        import urllib.request

        url, timeout = str(req["url"]), float(req.get("timeout") or 2.0)
        if not url.startswith(("http://", "https://")):
            raise RequestError(f"not an http(s) URL: {url}", "bad_request")
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                return {"status": r.status, "error": None}
        except urllib.error.HTTPError as exc:
            return {"status": exc.code, "error": None}
        except Exception as exc:
            return {"status": None, "error": _err(exc)}

    # -- workers --

    def op_worker_start(self, req: dict[str, Any]) -> dict[str, Any]:
        import subprocess
        import tempfile

        wid, source = int(req["id"]), req["source"]
        args = [str(a) for a in req.get("args") or []]
        python = str(req.get("python") or sys.executable)
        if not isinstance(source, str):
            raise RequestError("source must be a string", "bad_request")
        if wid in self.workers:
            raise RequestError(f"worker {wid} exists", "bad_request")
        workdir = tempfile.mkdtemp(prefix="kimitui-worker-")
        path = os.path.join(workdir, "worker.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(source)
        env = _env(req.get("env"))
        env["PYTHONUNBUFFERED"] = "1"
        try:
            proc = self._popen([python, "-u", path, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env, cwd=req.get("cwd") or None)
        except RequestError as exc:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
            if exc.kind == "not_found":
                raise RequestError(f"worker python not found: {python}", "not_found") from None
            raise
        worker = Worker(wid, proc, workdir)
        self.workers[wid] = worker
        worker.start()
        return {"worker": wid, "pid": proc.pid, "python": python}

    def op_worker_cancel(self, req: dict[str, Any]) -> dict[str, Any]:
        worker = self.workers.get(int(req["worker"]))
        if worker is None:
            raise RequestError(f"no worker {req['worker']}", "not_found")
        return {"signalled": worker.cancel(float(req.get("grace") if req.get("grace") is not None else 5.0))}

    # -- the end --

    def shutdown(self, grace: float = 3.0) -> None:
        """The caller is gone: stop sampling, end every worker and running command (SIGTERM, then SIGKILL)."""
        if self.stream is not None:
            self.stream.stop.set()
        live = [w for w in self.workers.values() if not w.exited.is_set()]
        for w in live:
            w.cancel(grace)
        with self.lock:
            running = list(self.running.values())
        for proc in running:
            if proc.poll() is None:
                _killpg(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + grace + 2.0
        for w in live:
            w.exited.wait(max(0.0, deadline - time.monotonic()))


def parse_args(argv: list[str]) -> Any:
    import argparse

    ap = argparse.ArgumentParser(prog="kimitui-agent", description="Answers requests on stdin (see the module "
                                 "docstring); --sample starts a sample stream at once.")
    ap.add_argument("--sample", action="store_true", help="stream samples from the start")
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--scan-interval", type=float, default=2.0, help="seconds between full fd/maps scans")
    ap.add_argument("--count", type=int, default=0, help="stop after N samples (0: until stdin closes)")
    ap.add_argument("--sim-dir", default=None)
    ap.add_argument("--dev-prefix", default=None)
    ap.add_argument("--proc-root", default="/proc")
    ap.add_argument("--nvidia-smi", default="nvidia-smi")
    ap.add_argument("--no-nvml", action="store_true")
    return ap.parse_args(argv)


def read_requests(agent: Agent) -> None:
    """Until stdin closes: one request a line."""
    buf = b""
    while True:
        try:
            data = os.read(0, 65536)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:
            return
        buf += data
        while b"\n" in buf:
            line, _, buf = buf.partition(b"\n")
            if line.strip():
                agent.handle(line)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    agent = Agent(args)
    emit(agent.hello())
    if args.sample:
        req = {"id": 0, "op": "sample", "interval": args.interval, "scan_interval": args.scan_interval,
               "count": args.count, "sim_dir": args.sim_dir, "dev_prefix": args.dev_prefix,
               "proc_root": args.proc_root, "nvidia_smi": args.nvidia_smi, "no_nvml": args.no_nvml}
        agent.answer(agent.op_sample, req)
    if args.count and agent.stream is not None:
        agent.stream.join()  # --count N runs its N samples whatever stdin does
        return 0
    try:
        read_requests(agent)
    finally:
        agent.shutdown()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
