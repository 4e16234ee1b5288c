"""The NVML source (pynvml, where installed)."""

from __future__ import annotations

from .clocks import reasons_words
from .gpu import MIB, NoDriver, new_gpu, text
from .wire import err

TYPE_CHECKING = False  # typing is not imported at run time: this module stays light
if TYPE_CHECKING:
    from typing import Any

    from .gpu import ProcMem


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
        self.driver = text(self._try(nvml.nvmlSystemGetDriverVersion))
        self.fatal_codes = {getattr(nvml, n) for n in ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_RESET_REQUIRED",
                                                         "NVML_ERROR_UNINITIALIZED") if hasattr(nvml, n)}
        self.v2 = getattr(nvml, "nvmlMemory_v2", None)
        self.reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)  # renamed in newer pynvml
        self.handles: list[tuple[Any, dict[str, Any]]] = []
        self.top_link: dict[int, list[int]] = {}
        """Each GPU's link at most (generation, width): it does not change, so it is read once."""
        for i in range(nvml.nvmlDeviceGetCount()):
            try:
                h = nvml.nvmlDeviceGetHandleByIndex(i)
                self.handles.append((h, new_gpu(i, text(self._try(nvml.nvmlDeviceGetUUID, h)) or "",
                                                text(self._try(nvml.nvmlDeviceGetName, h)) or "")))
                top = [self._try(getattr(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", None), h),
                       self._try(getattr(nvml, "nvmlDeviceGetMaxPcieLinkWidth", None), h)]
                if all(isinstance(v, int) and v > 0 for v in top):
                    self.top_link[i] = top
            except Exception as exc:
                gpu = new_gpu(i, "", "")
                gpu["error"] = err(exc)
                self.handles.append((None, gpu))
        self.xid: dict[int, int] = {}
        """The last XID each GPU's driver reported since the agent started (0: none yet); a GPU not in it cannot
        report them here (no event set, or the driver refused to register it)."""
        self.events = self._xid_events()

    def _xid_events(self) -> Any:
        """An NVML event set of the GPUs' critical XID errors, drained without waiting at each sample (the
        driver gives XIDs only as events: nothing can be read of the ones before the set was made)."""
        nv = self.nv
        kind = getattr(nv, "nvmlEventTypeXidCriticalError", None)
        self.wait = getattr(nv, "nvmlEventSetWait_v2", None) or getattr(nv, "nvmlEventSetWait", None)
        events = self._try(getattr(nv, "nvmlEventSetCreate", None))
        if kind is None or events is None or self.wait is None:
            return None
        self.by_uuid = {static["uuid"]: static["index"] for _h, static in self.handles if static["uuid"]}
        for h, static in self.handles:
            if h is None:
                continue
            try:
                nv.nvmlDeviceRegisterEvents(h, kind, events)
            except Exception:  # not supported here (a vGPU, a container): this GPU reports no XID
                continue
            self.xid[static["index"]] = 0
        return events if self.xid else None

    def _drain_xids(self) -> None:
        """The XID events since the last sample, each GPU's last kept (found by its UUID)."""
        nv = self.nv
        for _ in range(1000):  # a storm is not read forever in one sample
            try:
                data = self.wait(self.events, 0)
            except Exception:  # NVML_ERROR_TIMEOUT: none waiting
                return
            index = self.by_uuid.get(text(self._try(nv.nvmlDeviceGetUUID, data.device)) or "")
            if index in self.xid:
                self.xid[index] = int(data.eventData)

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

    def _reasons(self, h: Any) -> list[str] | None:
        """The clock caps in force, in words (NVML's clocks event reasons; idle and application clocks are not
        caps); None where this pynvml has no such call."""
        return None if self.reasons is None else reasons_words(int(self.reasons(h)))

    def _link(self, h: Any, index: int) -> list[int] | None:
        """[generation, width] now and at most; None where the driver does not say."""
        top = self.top_link.get(index)
        if top is None:
            return None
        return [int(self.nv.nvmlDeviceGetCurrPcieLinkGeneration(h)), int(self.nv.nvmlDeviceGetCurrPcieLinkWidth(h)),
                *top]

    def _fatal(self, exc: Exception) -> bool:
        return getattr(exc, "value", None) in self.fatal_codes

    def sample(self) -> tuple[list[dict[str, Any]], ProcMem]:
        nv = self.nv
        gpus = []
        procs: ProcMem = {}
        if self.events is not None:
            self._drain_xids()
        for h, static in self.handles:
            gpu = dict(static)
            gpus.append(gpu)
            if h is None:
                continue
            gpu["xid"] = self.xid.get(static["index"])
            try:
                for key, fn in (("mem", self._memory),
                                ("util_pct", lambda h: nv.nvmlDeviceGetUtilizationRates(h).gpu),
                                ("temp_c", lambda h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                                ("power_w", lambda h: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
                                ("sm_clock_mhz", lambda h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                                ("throttle", self._reasons),
                                ("pcie", lambda h, i=static["index"]: self._link(h, i)),
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
                    elif key in ("throttle", "pcie"):
                        gpu[key] = value
                    elif key in ("procs", "gprocs"):
                        for p in value or ():
                            used = getattr(p, "usedGpuMemory", None)
                            per = procs.setdefault(int(p.pid), {})
                            # C+G: the same process in both lists; nvidia-smi shows it once
                            per[gpu["index"]] = max(per.get(gpu["index"], 0.0), (used or 0) / MIB)
                    else:
                        gpu[key] = float(value)
            except Exception as exc:  # fell off the bus: this GPU only, null fields and the reason
                gpus[-1] = dict(static, error=err(exc))
                for per in procs.values():
                    per.pop(static["index"], None)
        return gpus, procs

