"""kimitui bench micro's text output words the plan, the topology, each worker's findings and each part's end
as the event log does (``describe``, with ``details`` under it); only the rows are tables of its own."""

from __future__ import annotations

import io

from kimitui.bench.micro.tables import TextPrinter
from kimitui.core.describe import describe, details
from kimitui.core.events import Event, MicroEnd, MicroEnv, MicroPlan, ProcRef, Topology
from kimitui.core.runfile import RunReader
from kimitui.core.state import fold_all
from kimitui.resources import bundled_runs_dir


def words(ev: Event) -> list[str]:
    text = describe(ev)
    assert text is not None
    return [text, *details(ev)]


def test_the_printer_says_what_the_event_log_says() -> None:
    events = list(RunReader(bundled_runs_dir() / "micro-1x-h200.jsonl.gz").events())
    worded = [e for e in events if isinstance(e, MicroPlan | Topology | MicroEnv | MicroEnd)]
    assert {type(e) for e in worded} >= {MicroPlan, MicroEnv, MicroEnd}
    out, err = io.StringIO(), io.StringIO()
    printer = TextPrinter(out, err, tty=lambda: False)
    for ev in events:
        printer(ev)
    printed = out.getvalue().splitlines()
    for ev in worded:
        lines = words(ev)
        k = printed.index(lines[0])
        assert printed[k: k + len(lines)] == lines
    log = [entry.message for entry in fold_all(events).log]
    assert all(describe(ev) in log for ev in worded)  # the same line in the dashboard's event log


def test_a_refusal_names_its_holders_and_a_workers_notes_are_printed() -> None:
    out = io.StringIO()
    printer = TextPrinter(out, io.StringIO(), tty=lambda: False)
    env = MicroEnv(1.0, run_id="r", part="gemm", device="cuda:0", torch="2.5", mem_bw_gbps=4000.0,
                   datasheet_gbps=4800.0, backends={"marlin": "not available: no vllm"}, notes=["L2 flushed"])
    end = MicroEnd(2.0, run_id="r", part="all", status="refused", detail="GPU 0 holds memory",
                   holders=[ProcRef(pid=42, start_time=1, gpus=[0], mem_mib=9000.0, cmdline="python serve.py")])
    printer(env)
    printer(end)
    assert out.getvalue().splitlines() == [
        "gemm on cuda:0 (torch 2.5, copy 4000 GB/s measured, datasheet 4800 GB/s)",
        "  marlin: not available: no vllm",
        "  note: L2 flushed",
        "all: refused after 0.0s, 0 rows (GPU 0 holds memory); holders: pid 42 serve.py (9000 MiB on GPU 0)",
    ]
