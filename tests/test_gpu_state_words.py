"""A GPU's state in words (its last XID, its clock caps, a busy link below its maximum), the one rule the fleet
and the dashboard share, and the dashboard's GPU table saying it on each GPU's row: from the simulated driver,
through the telemetry and the fold, on screen, and in the run as recorded."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from rich.text import Text

from kimitui.core.events import GpuSample, HostSample
from kimitui.core.gpu_words import busy_link, busy_link_words, gpu_state_words
from kimitui.core.runfile import RunReader, RunWriter
from kimitui.core.session import Session
from kimitui.tui.palette import Colors
from kimitui.tui.widgets.gpu_table import gpu_cells
from tests.app_probe import ProbedApp
from tests.screen_text import screen_text
from tests.support import BIG
from tests.waiting import pilot_until

COLORS = Colors(primary="#0178D4", accent="#ffa62b", success="#4EBF71", warning="#ffa62b", error="#ba3c5b",
                muted="#808080", foreground="#e0e0e0")


def gpu(**kw: object) -> GpuSample:
    return GpuSample(0, "GPU-0", "NVIDIA H200", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("util", "link", "low"), [
    (95.0, [4, 16, 5, 16], (4, 16, 5, 16)),     # busy, a generation low
    (95.0, [5, 8, 5, 16], (5, 8, 5, 16)),       # busy, half its lanes
    (95.0, [5, 16, 5, 16], None),               # at its maximum
    (3.0, [1, 16, 5, 16], None),                # idle: trained down to save power, as it should
    (None, [1, 16, 5, 16], None),               # utilisation unknown: not judged
    (95.0, [4, None, 5, 16], None),             # a value missing
    (95.0, [4, 16, 5, 100000], None),           # out of range
    (95.0, [4, 16], None),                      # not [now, most]
    (95.0, None, None),
])
def test_a_link_is_judged_only_while_the_gpu_works(util: float | None, link: list[int] | None,
                                                   low: tuple[int, ...] | None) -> None:
    assert busy_link(util, link) == low
    words = "" if low is None else f"PCIe Gen{low[0]} x{low[1]} of Gen{low[2]} x{low[3]}"
    assert busy_link_words(util, link) == words


def test_the_words_go_gravest_first_and_say_nothing_of_a_quiet_gpu() -> None:
    assert gpu_state_words(gpu(util_pct=100.0, throttle=["power cap", "thermal"], pcie=[4, 8, 5, 16], xid=79)) == [
        "XID 79", "power cap", "thermal", "Gen4 x8"]
    assert gpu_state_words(gpu(util_pct=5.0, throttle=[], pcie=[1, 16, 5, 16], xid=0)) == []
    assert gpu_state_words(gpu()) == []  # a source that says none of it (an older run, nvidia-smi's XID)


def test_watch_says_a_gpus_state_beside_its_memory() -> None:
    from kimitui.commands.live import _sample_line

    sample = HostSample(1.0, host="h", seq=4, gpus=[
        GpuSample(0, "GPU-0", "NVIDIA H200", mem_used_mib=92411.0, util_pct=3.0, pcie=[1, 16, 5, 16], xid=0),
        GpuSample(1, "GPU-1", "NVIDIA H200", mem_used_mib=92411.0, util_pct=100.0, throttle=["power cap"], xid=79)])
    assert _sample_line(sample) == "h seq 4: 0:92411MiB 1:92411MiB(XID 79, power cap); 0 processes"


def test_the_name_cell_keeps_the_state_when_both_do_not_fit() -> None:
    def name_cell(g: GpuSample, width: int) -> Text:
        cell = gpu_cells(g, COLORS, width)[1]
        assert isinstance(cell, Text)
        return cell

    quiet = name_cell(gpu(util_pct=5.0, throttle=[], pcie=[1, 16, 5, 16], xid=0), 24)
    assert quiet.plain == "H200" and not quiet.spans
    capped = name_cell(gpu(util_pct=100.0, throttle=["power cap"], pcie=[5, 16, 5, 16]), 24)
    assert capped.plain == "H200  power cap"
    assert [str(s.style) for s in capped.spans] == [COLORS.warning]
    xid = name_cell(gpu(util_pct=100.0, throttle=["power cap"], pcie=[4, 8, 5, 16], xid=79), 24)
    assert xid.plain == "XID 79, power cap, Gen4…"  # the name goes first, then the words are cut
    assert [str(s.style) for s in xid.spans] == [COLORS.error]
    long_name = GpuSample(0, "GPU-0", "NVIDIA H100 80GB HBM3", util_pct=100.0, throttle=["power cap"])
    assert name_cell(long_name, 24).plain == "H100  power cap"  # the name's first word where the whole does not fit
    assert name_cell(long_name, 30).plain == "H100 80GB HBM3  power cap"


async def test_the_dashboard_says_each_gpus_xid_caps_and_slow_link_from_the_simulated_driver(tmp_path: Path) -> None:
    """GPU 0 reported XID 79; both GPUs draw their power limit (the driver caps their clocks); GPU 1's slot
    trains to Gen4 x8. The rows say so, the run records it, and once the GPUs are half busy the caps go and the
    slow link stays (an idle GPU's link is never judged)."""
    from kimitui.hosts.sim.host import SimHost
    from kimitui.hosts.telemetry import TelemetrySource

    async with SimHost(gpus=2, load_time=0.05) as host:
        sim = Path(host.sim_dir)
        spec = json.loads((sim / "gpus.json").read_text())
        spec["gpus"][1]["pcie_best"] = [4, 8]
        (sim / "gpus.json").write_text(json.dumps(spec))
        (sim / "load.json").write_text(json.dumps({"util": 100}))
        (sim / "xid.json").write_text(json.dumps({"0": 79}))
        source = TelemetrySource(host, interval=0.1, sim_dir=host.sim_dir, dev_prefix=host.dev_prefix)
        run_path = tmp_path / "run.jsonl"
        session = Session(RunWriter(run_path, host=host.name))
        app = ProbedApp(session, sources=[source], run_path=run_path)

        def row(index: int) -> str:
            return next((ln for ln in screen_text(app).splitlines() if ln.lstrip("│ ").startswith(f"{index} ")
                         and "GiB" in ln), "")
        try:
            async with app.run_test(size=BIG) as pilot:
                await pilot_until(pilot, lambda: "XID 79, power cap" in row(0) and "power cap, Gen4 x8" in row(1),
                                  "both rows' state on screen")
                assert "XID" not in row(1)
                (sim / "load.json").write_text(json.dumps({"util": 50}))
                await pilot_until(pilot, lambda: "power cap" not in row(0) + row(1), "the caps gone")
                assert "XID 79" in row(0) and "Gen4 x8" in row(1) and "Gen" not in row(0)
        finally:
            source.stop()
            session.close()
    samples = [e for e in RunReader(run_path).events() if isinstance(e, HostSample)]
    capped = [s for s in samples if all(g.throttle == ["power cap"] for g in s.gpus)]
    assert capped and capped[0].gpus[0].xid == 79 and capped[0].gpus[1].pcie == [4, 8, 5, 16]
    assert samples[-1].gpus[1].throttle == [] and samples[-1].gpus[1].pcie == [4, 8, 5, 16]


def test_the_demos_gpu_faults_are_parsed_and_said_back_as_words() -> None:
    from kimitui.hosts.sim.layout import GpuFaults

    faults = GpuFaults.parse(["6:79", "0:48"], ["7:4x16", "3:Gen5x8"], 8)
    assert faults.xid == {6: 79, 0: 48} and faults.pcie_best == {7: (4, 16), 3: (5, 8)}
    assert faults.words() == ["--xid", "0:48", "--xid", "6:79", "--pcie", "3:5x8", "--pcie", "7:4x16"]
    assert GpuFaults.parse(faults.words()[1::2][:2], faults.words()[1::2][2:], 8) == faults
    for xid, link, bad in ((["8:79"], [], "--xid '8:79'"), (["6:-1"], [], "--xid '6:-1'"), (["679"], [], "--xid '679'"),
                           ([], ["7:4x3"], "--pcie '7:4x3'"), ([], ["7:9x16"], "--pcie '7:9x16'"),
                           ([], ["7"], "--pcie '7'")):
        with pytest.raises(ValueError, match="^" + re.escape(bad)):
            GpuFaults.parse(xid, link, 8)


def test_the_fleet_demos_troubled_host_opens_a_dashboard_whose_driver_says_the_same() -> None:
    """demo-04 of the fleet demo has XID 79 on GPU 6 and GPU 7's link at Gen4: its dashboard (a ``kimitui demo``
    of its own) is started with them, the others with nothing."""
    from kimitui.commands.fleet import demo_faults

    faults = demo_faults(8)
    assert faults["demo-04"].words() == ["--xid", "6:79", "--pcie", "7:4x16"]
    assert [name for name, f in faults.items() if f.words()] == ["demo-04"]


async def test_the_demo_with_gpu_faults_shows_them_through_the_agent() -> None:
    from kimitui.hosts.sim.layout import GpuFaults
    from kimitui.hosts.telemetry import TelemetrySource
    from kimitui.live.targets import open_target

    faults = GpuFaults(xid={6: 79}, pcie_best={7: (4, 16)})
    async with open_target("demo", gpus=8, gpu_faults=faults) as opened:
        assert opened.sim_dir is not None
        (Path(opened.sim_dir) / "load.json").write_text(json.dumps({"util": 50}))
        source = TelemetrySource(opened.host, 0.1, **opened.telemetry_args)
        try:
            async with asyncio.timeout(60):  # a deadline, not a pace: the first loaded sample ends the wait
                async for ev in source.events():
                    if isinstance(ev, HostSample) and ev.gpus and ev.gpus[7].util_pct:
                        break
        finally:
            source.stop()
    assert ev.gpus[6].xid == 79 and ev.gpus[7].pcie == [4, 16, 5, 16] and ev.gpus[0].pcie == [5, 16, 5, 16]
    assert gpu_state_words(ev.gpus[6]) == ["XID 79"] and gpu_state_words(ev.gpus[7]) == ["Gen4 x16"]


def test_a_bad_gpu_fault_on_the_command_line_is_one_line() -> None:
    import subprocess
    import sys

    from tests.support import ROOT

    done = subprocess.run([sys.executable, "-m", "kimitui", "demo", "--pcie", "7:4x3"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2 and done.stderr.splitlines() == [
        "kimitui: --pcie '7:4x3': GPU:GENxWIDTH, a GPU from 0 to 7, a generation from 1 to 6 and a width of 1, 2, 4, "
        "8, 16, 32 (7:4x16)"]
