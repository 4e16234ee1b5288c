"""The nvidia-smi source: ``--query-gpu`` and ``--query-compute-apps`` CSV (where NVML is not there)."""

from __future__ import annotations

from .clocks import reasons_words
from .gpu import NoDriver, new_gpu

TYPE_CHECKING = False  # typing is not imported at run time: this module stays light
if TYPE_CHECKING:
    from typing import Any

    from .gpu import ProcMem


QUERY_GPU_FIELDS = [
    "index", "uuid", "name", "pci.bus_id", "driver_version", "memory.used", "memory.total", "memory.reserved",
    "utilization.gpu", "utilization.memory", "temperature.gpu", "power.draw", "power.limit",
    "clocks.current.sm", "clocks.current.memory", "pstate", "fan.speed",
    "ecc.errors.uncorrected.volatile.total", "compute_mode", "clocks_event_reasons.active",
    "pcie.link.gen.current", "pcie.link.width.current", "pcie.link.gen.max", "pcie.link.width.max",
]
RENAMED = {"clocks_event_reasons.active": "clocks_throttle_reasons.active"}
"""A field an older nvidia-smi knows by another name (it refuses the newer one): tried in its place."""
OPTIONAL = ("memory.reserved", "pstate", "ecc.errors.uncorrected.volatile.total", "clocks_event_reasons.active",
            "clocks_throttle_reasons.active", "pcie.link.gen.current", "pcie.link.width.current",
            "pcie.link.gen.max", "pcie.link.width.max")
"""Fields an nvidia-smi may not know: one it refuses is dropped (or renamed) and the query asked again."""
_LINK = ("pcie.link.gen.current", "pcie.link.width.current", "pcie.link.gen.max", "pcie.link.width.max")
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
        mask = row.get("clocks_event_reasons.active", row.get("clocks_throttle_reasons.active"))
        if mask is not None:
            gpu["throttle"] = _reasons(mask)
        link = [csv_number(row.get(col, "")) for col in _LINK]
        if all(v is not None and 0 < v < 1000 for v in link):
            gpu["pcie"] = [int(v) for v in link]  # type: ignore[arg-type]
        gpus.append(gpu)
    return gpus


def _reasons(cell: str) -> list[str] | None:
    """'0x0000000000000004' -> ['power cap']; '[N/A]' -> None."""
    try:
        return reasons_words(int(cell.strip(), 16))
    except ValueError:
        return None


def refused_field(message: str) -> str | None:
    """The field nvidia-smi names in ``Field "X" is not a valid field to query.`` (either quote)."""
    for quote in ('"', "'"):
        _head, sep, rest = message.partition("Field " + quote)
        if sep and quote in rest:
            return rest.split(quote, 1)[0]
    return None


def parse_query_apps(text: str, fields: list[str] = QUERY_APPS_FIELDS) -> list[tuple[int, float | None, str]]:
    """(pid, MiB or None, gpu uuid) from `nvidia-smi --query-compute-apps=FIELDS --format=csv...`."""
    mem_col = "used_gpu_memory" if "used_gpu_memory" in fields else "used_memory"
    return [(int(r["pid"]), csv_number(r.get(mem_col, "")), r.get("gpu_uuid", "")) for r in _csv_rows(text, fields)]



class SmiSource:
    name = "nvidia-smi"

    def __init__(self, binary: str = "nvidia-smi") -> None:
        self.binary = binary
        self.refusal = ""
        self.gpu_fields = list(QUERY_GPU_FIELDS)
        out = self._query("--query-gpu=" + ",".join(self.gpu_fields))
        while out is None:  # an older nvidia-smi refuses a field it does not know: renamed, else dropped
            field = refused_field(self.refusal)
            if field not in OPTIONAL or field not in self.gpu_fields:
                # one it does not name, or a field we need: without every optional one, once
                self.gpu_fields = [f for f in self.gpu_fields if f not in OPTIONAL]
                out = self._query("--query-gpu=" + ",".join(self.gpu_fields), raise_error=True)
                break
            at = self.gpu_fields.index(field)
            if field in RENAMED:
                self.gpu_fields[at] = RENAMED[field]
            else:
                del self.gpu_fields[at]
            out = self._query("--query-gpu=" + ",".join(self.gpu_fields))
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
            self.refusal = res.stdout
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

