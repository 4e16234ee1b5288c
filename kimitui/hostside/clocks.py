"""The GPU's SM clock and what capped it while a micro row was measured (issue 38 item 5): a GEMM measured while
the GPU throttles is a different number, and its row says so.

Per row, between one row's report and the next (the row's measurement inside): NVML's violation counters
(``nvmlDeviceGetViolationStatus``: nanoseconds spent under the power cap, the thermal limit, sync boost) moved,
or the clock event reasons at the row's end (``nvmlDeviceGetCurrentClocksEventReasons``, named
``...ThrottleReasons`` in older pynvml) hold a cap. The row gets ``throttle`` (the caps seen, in words) and
``sm_clock_mhz`` (the SM clock at its end). Without pynvml, or a call the driver does not offer, there is
nothing to say and the row says nothing (never a guess). Python 3.8 and the standard library (pynvml where the
host has it): this runs on the GPU host.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

REASONS = ((0x4, "power cap"), (0x80, "power brake"), (0x20, "thermal"), (0x40, "thermal"), (0x8, "hw slowdown"),
           (0x10, "sync boost"))
"""NVML's clocks event reason bits that cap the clock (GPU idle, application or display clocks do not)."""
POLICIES = ((0, "power cap"), (1, "thermal"), (2, "sync boost"))
"""NVML_PERF_POLICY_POWER, _THERMAL, _SYNC_BOOST: their violation time counters."""


def link_text(gen: int, width: int, top_gen: int, top_width: int) -> str:
    """``PCIe Gen4 x16 of Gen5 x16`` for a link below its maximum generation or width; "" for one at it."""
    if gen >= top_gen and width >= top_width:
        return ""
    return f"PCIe Gen{gen} x{width} of Gen{top_gen} x{top_width}"


def reasons_words(mask: int) -> list:
    """The caps a clocks event reasons mask holds, in words (sorted, each once)."""
    return sorted({word for bit, word in REASONS if mask & bit})


class ClockWatch:
    """Laps over one GPU's clock caps; ``lap()`` returns the row fields since the last lap (empty: unknown)."""

    def __init__(self, handle: Any = None, nvml: Any = None, link: bool = False) -> None:
        self.nv, self.h, self.link = nvml, handle, link
        self._reasons = None
        if nvml is not None:
            self._reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
                nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        self._last = self._violations()

    @classmethod
    def for_device(cls, torch: Any, device: str, link: bool = False) -> ClockWatch:
        """The watch of torch's ``device`` (found by its PCI bus id: CUDA_VISIBLE_DEVICES renumbers GPUs, NVML
        does not); a watch that says nothing where pynvml or the GPU cannot be had. LINK: also say when the PCIe
        link ran below its maximum generation or width at a row's end (``link_words``)."""
        if not device.startswith("cuda"):
            return cls()
        try:
            import pynvml as nv  # type: ignore

            nv.nvmlInit()
            props = torch.cuda.get_device_properties(device)
            bus = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
            get = getattr(nv, "nvmlDeviceGetHandleByPciBusId_v2", None) or nv.nvmlDeviceGetHandleByPciBusId
            return cls(get(bus), nv, link)
        except Exception:  # no pynvml, no driver, an older torch without the PCI ids: nothing to say
            return cls()

    @classmethod
    def for_devices(cls, torch: Any, devices: list) -> GroupWatch:
        """One watch over several of torch's devices (an all-reduce's ranks, read from rank 0: NVML sees every
        GPU from any process)."""
        return GroupWatch([cls.for_device(torch, d, link=True) for d in devices])

    def _violations(self) -> dict:
        out = {}
        if self.nv is None or self.h is None:
            return out
        for policy, word in POLICIES:
            try:
                out[word] = out.get(word, 0) + int(self.nv.nvmlDeviceGetViolationStatus(self.h, policy).violationTime)
            except Exception:
                continue
        return out

    def lap(self) -> dict:
        """``{"throttle": [...], "sm_clock_mhz": N}`` for the time since the last lap; {} where NVML says nothing."""
        if self.nv is None or self.h is None:
            return {}
        now = self._violations()
        seen = {word for word, ns in now.items() if ns > self._last.get(word, ns)}
        self._last = now
        if self._reasons is not None:
            try:
                seen.update(reasons_words(int(self._reasons(self.h))))
            except Exception:
                pass
        if self.link:
            seen.update(self.link_words())
        out: dict = {"throttle": sorted(seen)}
        try:
            out["sm_clock_mhz"] = float(self.nv.nvmlDeviceGetClockInfo(self.h, getattr(self.nv, "NVML_CLOCK_SM", 1)))
        except Exception:
            pass
        return out


    def link_words(self) -> list:
        """``["PCIe Gen4 x16 of Gen5 x16"]`` when the link runs below its maximum generation or width now (just
        after a row, the GPU busy: an idle GPU trains its link down to save power, a busy one should not); []
        when it does not, or NVML cannot say."""
        try:
            now = (int(self.nv.nvmlDeviceGetCurrPcieLinkGeneration(self.h)),
                   int(self.nv.nvmlDeviceGetCurrPcieLinkWidth(self.h)))
            top = (int(self.nv.nvmlDeviceGetMaxPcieLinkGeneration(self.h)),
                   int(self.nv.nvmlDeviceGetMaxPcieLinkWidth(self.h)))
        except Exception:
            return []
        words = link_text(now[0], now[1], top[0], top[1])
        return [words] if words else []


class GroupWatch:
    """Laps over several GPUs at once: the caps any of them met, and the lowest SM clock among them (a collective
    runs at its slowest rank's pace)."""

    def __init__(self, watches: list) -> None:
        self.watches = watches

    def lap(self) -> dict:
        laps = [w.lap() for w in self.watches]
        known = [lap for lap in laps if lap]
        if not known:
            return {}
        out: dict = {"throttle": sorted({word for lap in known for word in lap.get("throttle", [])})}
        clocks = [lap["sm_clock_mhz"] for lap in known if lap.get("sm_clock_mhz") is not None]
        if clocks:
            out["sm_clock_mhz"] = min(clocks)
        return out
