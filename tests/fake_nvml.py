"""pynvml's surface as the agent uses it, answering with the real H200 capture (tests/fixtures/h200x2/
nvml-sample.json), and the fields the captures' nvidia-smi was asked for."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from kimitui.hostside import smi
from tests.support import FIXTURES

CAPTURED_FIELDS = smi.QUERY_GPU_FIELDS[:19]
"""The fields the H200 captures asked for (the agent asks for the clock caps and the PCIe link too since)."""


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


class NVMLError(Exception):
    def __init__(self, value: int, text: str) -> None:
        super().__init__(text)
        self.value = value


class FakeNvml:
    """pynvml's surface as the agent uses it, answering with nvml-sample.json; v2 memory reports the
    616 MiB reserved apart, as the driver does (v1 'used' includes it)."""

    NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_GPU_IS_LOST = 3, 15
    NVML_TEMPERATURE_GPU, NVML_CLOCK_SM = 0, 1
    RESERVED = 616 * 1048576

    def __init__(self, v2: bool = True, lost: set[int] | None = None, no_util: bool = False) -> None:
        self.data = json.loads(fixture("nvml-sample.json"))
        self.lost, self.no_util = lost or set(), no_util
        if v2:
            self.nvmlMemory_v2 = 0x02000028

    def _gpu(self, h: int) -> dict[str, Any]:
        if h in self.lost:
            raise NVMLError(self.NVML_ERROR_GPU_IS_LOST, "GPU is lost")
        return self.data["gpus"][h]

    def nvmlInit(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: return self.data["driver"]
    def nvmlDeviceGetCount(self) -> int: return len(self.data["gpus"])
    def nvmlDeviceGetHandleByIndex(self, i: int) -> int: return i
    def nvmlDeviceGetUUID(self, h: int) -> str: return self._gpu(h)["uuid"]
    def nvmlDeviceGetName(self, h: int) -> str: return self._gpu(h)["name"]

    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None) -> SimpleNamespace:
        g = self._gpu(h)
        if version is None:
            return SimpleNamespace(used=g["mem_used"], total=g["mem_total"], free=g["mem_free"])
        return SimpleNamespace(used=g["mem_used"] - self.RESERVED, total=g["mem_total"], free=g["mem_free"],
                               reserved=self.RESERVED)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        if self.no_util:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED, "Not Supported")
        return SimpleNamespace(gpu=self._gpu(h)["util"], memory=0)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int: return self._gpu(h)["temp"]
    def nvmlDeviceGetPowerUsage(self, h: int) -> int: return self._gpu(h)["power_mw"]
    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int: return self._gpu(h)["sm_clock"]

    def nvmlDeviceGetFanSpeed(self, h: int) -> int:  # H200: NotSupported (the agent does not ask)
        raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED, "Not Supported")

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p["used"]) for p in self._gpu(h)["procs"]]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p["used"]) for p in self._gpu(h)["gprocs"]]
