"""Issue 38 item 5: a micro row measured under a clock cap says so. The host side reads NVML's violation
counters and clock event reasons around each row (kimitui/hostside/clocks.py); NVML cannot exist here, so it is
a stand-in object with pynvml's names and NVML's bit values. The surfaces: the CLI's line, the tables' column,
the report's sentence; for an all-reduce, rank 0 watches every rank's GPU (``GroupWatch``)."""

from __future__ import annotations

from types import SimpleNamespace

from textual.app import App, ComposeResult

from kimitui.bench.micro.runner import LineState, parse_worker_line
from kimitui.core.events import AllReduceRow, GemmRow
from kimitui.core.micro_words import burst_line, cap_words, gemm_line, nccl_line
from kimitui.core.state import fold_all
from kimitui.hostside.allreduce import row
from kimitui.hostside.clocks import ClockWatch, GroupWatch, reasons_words
from kimitui.report.bench import allreduce_section
from kimitui.tui.views.result_tables import AllReduceTable, nccl_cells


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


# --- all-reduce rows: rank 0 watches every rank's GPU ------------------------------------------------------

def test_a_group_watch_says_the_caps_any_gpu_met_and_the_lowest_clock() -> None:
    a, b = FakeNvml(), FakeNvml()
    group = GroupWatch([ClockWatch(handle=object(), nvml=a), ClockWatch(handle=object(), nvml=b), ClockWatch()])
    assert group.lap() == {"throttle": [], "sm_clock_mhz": 1980.0}
    b.violation[1] += 1_000_000  # GPU 1 met its thermal limit during the row
    b.sm = 1500
    assert group.lap() == {"throttle": ["thermal"], "sm_clock_mhz": 1500.0}
    a.mask = 0x4
    assert group.lap() == {"throttle": ["power cap"], "sm_clock_mhz": 1500.0}
    assert GroupWatch([ClockWatch(), ClockWatch()]).lap() == {}  # no NVML: nothing said


def _ar_rows() -> list[AllReduceRow]:
    """The worker's rows (its own ``row``) through the runner's line parser, as a run records them."""
    args = SimpleNamespace(dtype="bfloat16", ranks=2, backend="nccl")
    cap = {"throttle": ["thermal"], "sm_clock_mhz": 1500.0}
    lines = [dict(type="row", **row(args, 1 << 20, None, "eager", 61.0, 0, clocks={"throttle": [],
                                                                                   "sm_clock_mhz": 1980.0})),
             dict(type="row", **row(args, 1 << 20, None, "graph", 55.0, 0, clocks=cap)),
             dict(type="row", **row(args, 14336, 1, "graph", 9.0, 0, 122, 1098.0, clocks=cap)),
             dict(type="row", **row(args, 2 << 20, None, "eager", 90.0, 0))]  # CPU, or no NVML: no clock fields
    st = LineState()
    out = [parse_worker_line(line, "r1", "allreduce", st, 1.0) for line in lines]
    assert all(isinstance(r, AllReduceRow) for r in out), out
    return [r for r in out if isinstance(r, AllReduceRow)]


def test_a_capped_all_reduce_row_says_so_on_each_surface() -> None:
    eager, graph, burst, plain = _ar_rows()
    assert (graph.throttle, graph.sm_clock_mhz, plain.throttle, plain.sm_clock_mhz) == (["thermal"], 1500.0, [], None)
    assert nccl_line(eager, graph).endswith("  [graph: thermal at 1500 MHz]")
    assert "[" not in nccl_line(plain, None)
    assert burst_line(burst).endswith(" [thermal at 1500 MHz]")
    assert nccl_cells({"eager": eager, "graph": graph})[-1].plain == "graph: thermal at 1500 MHz"
    report = "\n".join(allreduce_section(fold_all([eager, graph, burst, plain])))
    assert ("Measured under a clock cap (NVML's clock event reasons and violation counters of the ranks' GPUs "
            "while the row ran; the lowest SM clock among them): 1.0 MB graph: thermal at 1500 MHz; 14.3 KB graph "
            "burst of 122: thermal at 1500 MHz.") in report, report


async def test_the_all_reduce_table_shows_the_cap_column_only_when_a_row_was_capped() -> None:
    eager, graph, _, plain = _ar_rows()

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield AllReduceTable(id="t")

    async with One().run_test() as pilot:
        table = pilot.app.query_one(AllReduceTable)
        table.show([eager, plain])
        assert table.columns[table._column_index["cap"]].hidden
        table.show([eager, graph, plain])
        assert not table.columns[table._column_index["cap"]].hidden
