"""Issue 38 item 5: a micro row measured under a clock cap says so. The host side reads NVML's violation
counters and clock event reasons around each row (kimitui/hostside/clocks.py); NVML cannot exist here, so it is
a stand-in object with pynvml's names and NVML's bit values. The surfaces: the CLI's line, the tables' column,
the report's sentence."""

from __future__ import annotations

from types import SimpleNamespace

from kimitui.core.events import GemmRow
from kimitui.core.micro_words import cap_words, gemm_line
from kimitui.hostside.clocks import ClockWatch, reasons_words


class FakeNvml:
    """pynvml's calls the watch makes, with NVML's values: violation time in ns per policy, a reasons mask."""

    NVML_CLOCK_SM = 1

    def __init__(self) -> None:
        self.violation = {0: 0, 1: 0, 2: 0}
        self.mask = 0x1  # GPU idle: no cap
        self.sm = 1980

    def nvmlDeviceGetViolationStatus(self, h: object, policy: int) -> SimpleNamespace:
        return SimpleNamespace(violationTime=self.violation[policy], referenceTime=0)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: object) -> int:
        return self.mask

    def nvmlDeviceGetClockInfo(self, h: object, kind: int) -> int:
        assert kind == self.NVML_CLOCK_SM
        return self.sm


def test_reasons_bits_in_words() -> None:
    assert reasons_words(0x1 | 0x2) == []  # idle, application clocks: no cap
    assert reasons_words(0x4 | 0x80) == ["power brake", "power cap"]
    assert reasons_words(0x20 | 0x40 | 0x10) == ["sync boost", "thermal"]


def test_a_lap_says_the_caps_met_since_the_last_one() -> None:
    nv = FakeNvml()
    watch = ClockWatch(handle=object(), nvml=nv)
    assert watch.lap() == {"throttle": [], "sm_clock_mhz": 1980.0}
    nv.violation[0] += 5_000_000  # 5 ms under the power cap during the row, over by its end
    nv.sm = 1785
    assert watch.lap() == {"throttle": ["power cap"], "sm_clock_mhz": 1785.0}
    nv.mask = 0x20  # the thermal limit holds at the row's end
    assert watch.lap() == {"throttle": ["thermal"], "sm_clock_mhz": 1785.0}
    assert ClockWatch().lap() == {}  # no pynvml or no GPU: nothing said, never a guess


def test_a_capped_row_says_so_on_each_surface() -> None:
    row = GemmRow(1.0, name="o_proj", m=256, n=7168, k=1024, dtype="bf16", backend="bf16", time_us=29.5,
                  throttle=["power cap"], sm_clock_mhz=2235.0)
    plain = GemmRow(1.0, name="o_proj", m=8, n=7168, k=1024, dtype="bf16", backend="bf16", time_us=12.7)
    assert cap_words(row) == "power cap at 2235 MHz" and cap_words(plain) == ""
    assert gemm_line(row).endswith("  [power cap at 2235 MHz]") and "[" not in gemm_line(plain)
