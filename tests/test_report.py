"""The Markdown report and the text summary, on the sample run and on runs missing sections."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from kimitui.core.events import ConnectionState, HostSample, LogLine
from kimitui.core.runfile import RunReader, write_run
from kimitui.report import render_report
from kimitui.samplegen import campaign_events
from kimitui.summary import summarize

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "kimitui" / "data" / "sample_runs" / "campaign-8x-rtx-pro-6000.jsonl.gz"


@pytest.fixture(scope="module")
def report() -> str:
    return render_report(RunReader(SAMPLE))


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    nxt = text.find("\n## ", start + 1)
    return text[start: nxt if nxt >= 0 else len(text)]


def test_report_header_and_phase_timeline(report):
    assert report.startswith("# kimitui run report: campaign-8x-rtx-pro-6000.jsonl.gz")
    assert "- Host: kimi-node-01" in report
    assert "- Created: 2026-12-01 08:00:00 UTC" in report
    assert "- Duration: 5m 36s" in report
    phases = _section(report, "## Phases")
    rows = [line for line in phases.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [r.split(" | ")[0].strip("| ") for r in rows] == ["macro", "cleanup", "micro", "analysis", "restore"]
    assert all(" | ok | " in r for r in rows)


def test_report_memory_around_each_cleanup_step(report):
    graceful = report[report.index("### Step graceful"): report.index("### Step process")]
    # GPUs 5 and 6 keep their 92,985 MiB (the stuck workers); the others fall to the 574 MiB baseline
    assert "| 5 | 92,985 | 92,985 | +0 | 97,887 |" in graceful
    assert "| 0 | 92,985 | 574 | -92,411 | 97,887 |" in graceful
    assert "| 3 | 94,131 | 1,720 | -92,411 | 97,887 |" in graceful  # the probe still holds 1,146 MiB
    process = report[report.index("### Step process"): report.index("### Step device")]
    assert "| 6 | 92,985 | 574 | -92,411 | 97,887 |" in process
    device = report[report.index("### Step device"): report.index("### Step verify")]
    assert "| 3 | 1,720 | 574 | -1,146 | 97,887 |" in device
    assert "handle only (NVML monitor), not ticked" in device
    assert "Consent: confirmed by ana" in device


def test_report_signals_and_verdict(report):
    signals = report[report.index("### Signals"): report.index("### Verification")]
    rows = [line for line in signals.splitlines() if line.startswith("| +")]
    assert len(rows) == 14
    assert sum("| survived (S) |" in r for r in rows if "| graceful |" in r) == 2
    assert sum("| SIGKILL |" in r and "| exited |" in r for r in rows) == 2
    verification = _section(report, "### Verification")
    assert "**CLEAN**" in verification
    assert verification.count("| yes |") == 8


def test_report_benchmark_tables(report):
    macro = _section(report, "## Serving sweep (macro)")
    assert "Single stream: **49.1 output tok/s**" in macro
    assert "peak **1536 tok/s** at concurrency 128" in macro
    assert len([line for line in macro.splitlines() if line.startswith("| ") and line[2].isdigit()]) == 8
    gemm = _section(report, "## GEMM (micro)")
    assert "| lm_head | 1 | 20480 x 7168 | bf16 |" in gemm
    assert gemm.count("| int4-g32 |") == 8
    allreduce = _section(report, "## All-reduce (micro)")
    assert "| 1 | 14.3 KB | 8 | bfloat16 | 122 |" in allreduce
    assert "| 128 | 1.8 MB | 8 |" in allreduce
    assert "None: every line of the run was read." in _section(report, "## Warnings")


def test_summary_on_the_sample_run():
    text = summarize(RunReader(SAMPLE))
    lines = dict(line.split(None, 1) for line in text.splitlines()[1:] if not line.startswith(" "))
    assert lines["host"] == "kimi-node-01"
    assert lines["duration"] == "5m 36s"
    assert lines["events"].startswith("799 (sample 667,")
    assert "cleanup 32.0 s ok" in lines["phases"]
    assert lines["cleanup"].startswith("CLEAN")
    assert "graceful done, process done, device done, verify done" in lines["cleanup"]
    assert lines["macro"].startswith("peak 1536 tok/s at concurrency 128; single stream 49 tok/s")
    assert lines["warnings"] == "none"


def _telemetry_only(tmp_path: Path) -> RunReader:
    events = [e for e in campaign_events() if isinstance(e, HostSample | ConnectionState | LogLine)][:200]
    path = write_run(tmp_path / "telemetry.jsonl", events, host="kimi-node-01")
    return RunReader(path)


def test_report_and_summary_on_a_telemetry_only_run(tmp_path):
    reader = _telemetry_only(tmp_path)
    text = render_report(reader)
    assert "No phases in this run" in text
    assert "No cleanup in this run." in text
    assert "No macro benchmark points in this run." in text
    assert "No GEMM rows in this run." in text
    assert "No all-reduce rows in this run." in text
    assert "- Samples: " in text and "none (no telemetry)" not in text
    summary = summarize(reader)
    assert "phases    none recorded" in summary
    assert "cleanup   none in this run" in summary
    assert "macro     no benchmark points in this run" in summary
    assert "micro     no GEMM or all-reduce rows in this run" in summary


def test_cleanup_without_samples_and_warnings_reported(tmp_path):
    events = [e for e in campaign_events() if not isinstance(e, HostSample)]
    path = tmp_path / "nosamples.jsonl.gz"
    write_run(path, events, host="h", compress=True)
    # a torn last line: the report lists the reader's warning
    raw = gzip.decompress(path.read_bytes()) + b'{"t":1796112999.0,"type":"log","lev'
    path.write_bytes(gzip.compress(raw))
    reader = RunReader(path)
    text = render_report(reader)
    assert "- Samples: none (no telemetry)" in text
    assert text.count("No samples in this run, so no memory comparison.") == 4
    assert "**CLEAN**" in text
    warnings = _section(text, "## Warnings")
    assert "last line is torn" in warnings
    summary = summarize(reader)
    assert "warnings  1" in summary and "last line is torn" in summary


def test_empty_run(tmp_path):
    path = write_run(tmp_path / "empty.jsonl", [], host="h")
    reader = RunReader(path)
    text = render_report(reader)
    assert "- Duration: no events in this run" in text and "No cleanup in this run." in text
    assert "duration  no events" in summarize(reader)
