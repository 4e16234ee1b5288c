"""The Markdown report and the text summary, on the sample run and on runs missing sections."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kimitui.core.describe import describe, signal_status
from kimitui.core.events import ConnectionState, Event, HostSample, LogLine, MacroPoint, PhaseStart
from kimitui.core.runfile import RunReader, write_run
from kimitui.core.state import SessionState, fold_all
from kimitui.report.format import fmt_duration
from kimitui.report.markdown import render_report
from kimitui.report.summary import summarize

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_runs" / "campaign-demo-8x-rtx-pro-6000.jsonl.gz"


def campaign_events() -> list[Event]:
    """The bundled campaign (a recording of kimitui demo --campaign --headless)."""
    return list(RunReader(SAMPLE).events())


@pytest.fixture(scope="module")
def report() -> str:
    return render_report(RunReader(SAMPLE))


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    nxt = text.find("\n## ", start + 1)
    return text[start: nxt if nxt >= 0 else len(text)]


def test_report_header_and_phase_timeline(report, folded):
    _, state = folded
    reader = RunReader(SAMPLE)
    assert report.startswith(f"# kimitui run report: {SAMPLE.name}")
    assert f"- Host: {reader.header.host}" in report and reader.header.host
    assert reader.header.meta and all(f"- {k}: {v}" in report for k, v in reader.header.meta.items())
    assert f"- Duration: {fmt_duration(reader.end_time - reader.start_time)}" in report
    phases = _section(report, "## Phases")
    rows = [line for line in phases.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(state.phases) > 1
    assert [r.split(" | ")[0].strip("| ") for r in rows] == [p.phase for p in state.phases]
    for r, p in zip(rows, state.phases, strict=True):
        assert f" | {fmt_duration(p.end - p.start)} | {'ok' if p.ok else 'FAILED'} | " in r  # type: ignore[operator]


def test_report_campaign_budget_and_check(report, folded):
    _, state = folded
    budget, probe, campaign_state = state.budget, state.probe, state.campaign
    assert budget is not None and probe is not None and campaign_state is not None and campaign_state.end
    assert budget.plateau_m is not None and budget.bound
    section = _section(report, "## Phase 3: where a decode step's time goes")
    assert f"**Verdict:** {budget.verdict}" in section and f"| {budget.plateau_m} ({budget.level}) |" in section
    assert budget.verdict.startswith(f"At the {budget.level} (") and budget.level
    assert all(f"M={r.m:<5}" in section for r in budget.rows) and "# all-reduce (122 per step)" in section
    check = _section(report, "## Post-restart check")
    assert ("**DRIFT**" if probe.drift else "within the margin") in check and f"{probe.tok_s:.1f} tok/s" in check
    campaign = _section(report, "## Campaign")
    end = campaign_state.end
    assert f"Result: **{end.status.upper()}**: {end.note}." in campaign
    assert f"| transition | {campaign_state.phases['cleanup'].status} |" in campaign
    memory = _section(report, "## GPU memory through the transition")
    assert "| GPU | start | drain | graceful | process | others | device | verify | reset | end |" in memory


@pytest.fixture(scope="module")
def folded() -> tuple[list[Event], SessionState]:
    events = list(RunReader(SAMPLE).events())
    return events, fold_all(events)


def _mem_at(events: list[Event], t: float, after: bool) -> dict[int, float]:
    """GPU memory of the last sample at or before t (after=False) or the first at or after t (after=True)."""
    samples = [e for e in events if isinstance(e, HostSample)]
    pick = next(s for s in samples if s.t >= t) if after else [s for s in samples if s.t <= t][-1]
    return {g.index: g.mem_used_mib for g in pick.gpus if g.mem_used_mib is not None}


def _row(i: int, before: float, after: float, total: float) -> str:
    return f"| {i} | {before:,.0f} | {after:,.0f} | {after - before:+,.0f} | {total:,.0f} |"


def _begin(step) -> float:
    times = [e.t for e in (step.preview, step.consent) if e is not None]
    return min([*times, step.result.t - (step.elapsed_s or 0.0)])


def _after_step(events: list[Event], state: SessionState, name: str) -> dict[int, float]:
    """GPU memory of the last sample before the next step or phase began after the step ``name``."""
    cleanup = state.cleanup
    assert cleanup is not None
    step = cleanup.steps[name]
    begin = _begin(step)
    later = [_begin(o) for o in cleanup.steps.values() if o is not step and o.result is not None]
    later += [p.start for p in state.phases] + [p.end for p in state.phases if p.end is not None]
    nxt = min(t for t in later if t > begin)
    samples = [e for e in events if isinstance(e, HostSample) and e.t < nxt]
    return {g.index: g.mem_used_mib for g in samples[-1].gpus if g.mem_used_mib is not None}


def test_report_memory_around_each_cleanup_step(report, folded):
    """Expected figures from the folded run: the sample before each step's consent, and after it the last
    sample before the next step or phase began."""
    events, state = folded
    cleanup = state.cleanup
    assert cleanup is not None
    totals = {i: g.mem_total_mib for i, g in state.gpus.items()}
    names = list(cleanup.steps)
    asked = [n for n in names[:-1] if cleanup.steps[n].consent is not None]
    assert "graceful" in asked  # looked at below
    for name in asked:
        k = names.index(name)
        step = cleanup.steps[name]
        section = report[report.index(f"### Step {name}"): report.index(f"### Step {names[k + 1]}")]
        assert step.consent is not None and step.result is not None
        before = _mem_at(events, step.consent.t, after=False)
        after = _after_step(events, state, name)
        for i in sorted(before):
            assert _row(i, before[i], after[i], totals[i]) in section, (name, i)
        assert f"Consent: {describe(step.consent)}" in section
        assert f"in {step.elapsed_s:.2f} s" in section.splitlines()[0]
    # what the run says of them: the stuck workers keep theirs through graceful
    graceful = cleanup.steps["graceful"]
    kept = [i for i, m in _after_step(events, state, "graceful").items() if m > 90_000]
    assert kept == sorted({g for ref in graceful.preview.targets for g in ref.gpus  # type: ignore[union-attr]
                           if ref.pid in {o.pid for o in graceful.outcomes if o.outcome == "survived"}})


def test_report_credits_memory_to_the_step_that_freed_it(report):
    """Issue 20 item 3 on the bundled campaign: the skipped drain frees nothing (its "after" sample is no
    longer the one after the graceful SIGTERM), and the verify step's GPU 0 is clean (not 2,860 MiB of
    Phase 2's benchmark, started after the cleanup ended); the transition table says the same."""
    drain = report[report.index("### Step drain"): report.index("### Step graceful")]
    assert "| 0 | 92,411 | 92,411 | +0 | 97,887 |" in drain and "-92,411" not in drain
    verify = report[report.index("### Step verify"): report.index("### Step reset")]
    assert "| 0 | 0 | 0 | +0 | 97,887 |" in verify and "2,860" not in verify
    memory = _section(report, "## GPU memory through the transition")
    assert "| 0 | 92,411 | 92,411 | 0 | 0 | 0 | 0 | 0 | 0 |" in memory
    assert "2,860" not in memory


def test_report_gives_gpu_memory_in_mib_throughout(report):
    """Issue 20 item 8: one unit in the report: the transition's table is in MiB, as the steps' tables and
    the verification are (it was in GiB beside them)."""
    memory = _section(report, "## GPU memory through the transition")
    assert "Used memory per GPU in MiB" in memory
    assert "GiB" not in report
    assert "| GPU | used MiB | baseline MiB | clean | holders |" in report


def test_report_signals_show_start_times_and_distinct_commands(report, folded):
    """Issue 20 item 3: the Signals table's start is a time of day (the preview's STARTED words), never
    raw clock ticks, and its command keeps what tells the processes apart (not `…/python -S -m kim…`)."""
    _, state = folded
    cleanup = state.cleanup
    assert cleanup is not None
    signals = report[report.index("### Signals"): report.index("### Verification")]
    rows = [line.split(" | ") for line in signals.splitlines() if line.startswith("| +")]
    records = [r.sent for step in cleanup.steps.values() for r in step.signals]
    assert rows and len(rows) == len(records)
    for cells, sent in zip(rows, records, strict=True):
        assert str(sent.start_time) not in cells[4] and len(cells[4]) == 8 and cells[4].count(":") == 2, cells
        assert cells[5].startswith(("kimitui.hosts.sim.", "VLLM::Worker_TP")), cells
    assert {c[5] for c in rows} >= {c[5] for c in rows if "service" in c[5]} and len({c[5] for c in rows}) > 1
    preview = report[report.index("### Step graceful"): report.index("### Step process")]
    assert all(c[4] in preview for c in rows)  # the same words as the preview's STARTED column


def test_report_signals_and_verdict(report, folded):
    _, state = folded
    cleanup = state.cleanup
    assert cleanup is not None and cleanup.verification is not None
    signals = report[report.index("### Signals"): report.index("### Verification")]
    rows = [line for line in signals.splitlines() if line.startswith("| +")]
    records = [r for step in cleanup.steps.values() for r in step.signals]
    assert len(rows) == len(records)
    # each row ends with the fold's pairing in describe's words, the Cleanup tab's
    assert all(row.rstrip(" |").endswith(signal_status(r)) for row, r in zip(rows, records, strict=True))
    survived = [o for o in cleanup.steps["process"].outcomes if o.outcome == "survived" and o.signal == "SIGTERM"]
    assert survived  # the stuck workers ignore SIGTERM
    assert sum("| SIGTERM |" in r and "| survived after " in r and "(state S) |" in r
               for r in rows if "| process |" in r) == len(survived)
    killed = [r for r in records if r.sent.signal == "SIGKILL"]
    assert sum("| SIGKILL |" in r and "| exited after " in r for r in rows) == len(killed)
    verification = _section(report, "### Verification")
    assert ("**CLEAN**" if cleanup.clean else "**NOT CLEAN**") in verification
    assert describe(cleanup.verification) in verification
    assert verification.count("| yes |") == sum(g.clean for g in cleanup.verification.gpus)


def test_report_benchmark_tables(report, folded):
    _, state = folded
    macro = _section(report, "## Serving sweep (macro)")
    single = state.single_stream_tok_s()
    assert single is not None and f"Single stream: **{single:.1f} output tok/s**" in macro
    peak = max(state.macro_by_level.values(), key=lambda p: p.metrics["output_throughput"])
    assert f"peak **{peak.metrics['output_throughput']:.0f} tok/s** at concurrency {peak.concurrency}" in macro
    levels = macro.split("\n\n| concurrency | ok/failed |", 1)[1].split("\n\n", 1)[0]  # the per-level table
    rows = [line for line in levels.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == len(state.macro_by_level)
    gemm = _section(report, "## GEMM (micro)")
    for row in state.gemm:
        assert f"| {row.name} | {row.m} | {row.n} x {row.k} | {row.dtype} |" in gemm
    allreduce = _section(report, "## All-reduce (micro)")
    assert len([line for line in allreduce.splitlines() if line.startswith("| ") and "| bfloat16 |" in line]) == \
        len(state.allreduce)
    assert "None: every line of the run was read." in _section(report, "## Warnings")


def test_report_shows_a_failed_level_as_failed(tmp_path):
    points = [MacroPoint(1.0, concurrency=1, metrics={"output_throughput": 50.0, "completed": 4, "failed": 0,
                                                      "num_prompts": 4}),
              MacroPoint(2.0, concurrency=2, metrics={"output_throughput": 0.0, "completed": 0, "failed": 8,
                                                      "num_prompts": 8, "failures": {"HTTP 503: model loading": 8}})]
    path = write_run(tmp_path / "failed.jsonl", [PhaseStart(0.5, phase="macro"), *points], host="h")
    macro = _section(render_report(RunReader(path)), "## Serving sweep (macro)")
    assert "| 2 | 0/8 | FAILED: HTTP 503: model loading |" in macro
    assert "peak **50 tok/s** at concurrency 1" in macro and "1 level(s) FAILED" in macro


def test_report_names_the_request_fields_the_server_rejected(tmp_path):
    """A sweep that went without ``ignore_eos`` (the server answered 422 naming it) says so in the report, once,
    beside what follows for the output lengths."""
    metrics = {"output_throughput": 50.0, "completed": 4, "failed": 0, "num_prompts": 4,
               "request_fields_dropped": ["ignore_eos"]}
    points = [MacroPoint(1.0, concurrency=1, metrics=metrics), MacroPoint(2.0, concurrency=2, metrics=metrics)]
    path = write_run(tmp_path / "dropped.jsonl", [PhaseStart(0.5, phase="macro"), *points], host="h")
    macro = _section(render_report(RunReader(path)), "## Serving sweep (macro)")
    assert macro.count("Request fields the server rejected: `ignore_eos`") == 1, macro
    assert "usage count" in macro


def test_summary_on_the_sample_run(folded):
    _, state = folded
    text = summarize(RunReader(SAMPLE))
    lines = dict(line.split(None, 1) for line in text.splitlines()[1:] if not line.startswith(" "))
    reader = RunReader(SAMPLE)
    assert lines["host"] == reader.header.host
    assert lines["duration"] == fmt_duration(reader.end_time - reader.start_time)
    assert lines["events"].startswith(f"{len(reader)} (")
    span = next(p for p in state.phases if p.phase == "cleanup")
    assert span.end is not None and f"cleanup {span.end - span.start:.1f} s ok" in lines["phases"]
    cleanup, budget, campaign, probe = state.cleanup, state.budget, state.campaign, state.probe
    assert cleanup is not None and cleanup.verification is not None
    assert lines["cleanup"].startswith("CLEAN" if cleanup.verification.clean else "NOT CLEAN")
    assert ", ".join(f"{n} {st.status}" for n, st in cleanup.steps.items()) in lines["cleanup"]
    assert budget is not None and lines["budget"] == f"bound by {budget.bound} at concurrency {budget.plateau_m}"
    assert campaign is not None and campaign.end is not None and probe is not None
    assert lines["campaign"].endswith(f"{campaign.end.status}: {campaign.end.note}; post-restart "
                                      + ("DRIFT" if probe.drift else "within the margin"))
    single = state.single_stream_tok_s()
    peak = max(state.macro_by_level.values(), key=lambda p: p.metrics["output_throughput"])
    assert single is not None
    assert lines["macro"].startswith(f"peak {peak.metrics['output_throughput']:.0f} tok/s at concurrency "
                                     f"{peak.concurrency}; single stream {single:.0f} tok/s")
    assert lines["warnings"] == "none"


def _telemetry_only(tmp_path: Path) -> RunReader:
    events = [e for e in campaign_events() if isinstance(e, HostSample | ConnectionState | LogLine)][:200]
    path = write_run(tmp_path / "telemetry.jsonl", events, host="demo")
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
    cleanup = fold_all(events).cleanup
    assert cleanup is not None
    with_result = sum(1 for step in cleanup.steps.values() if step.result is not None)
    assert text.count("No samples in this run, so no memory comparison.") == with_result
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


def _with_every(key: str, value: object, obj: object) -> object:
    """``obj`` (parsed JSON) with every integer under ``key`` set to ``value``."""
    if isinstance(obj, dict):
        return {k: value if k == key and type(v) is int else _with_every(key, value, v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_with_every(key, value, v) for v in obj]
    return obj


def test_a_process_started_beyond_any_date_is_reported_as_na(tmp_path: Path) -> None:
    """Every process of the bundled campaign started 10**20 ticks after boot (a year no calendar holds):
    the report still renders, the STARTED column says n/a."""
    header, *lines = [line for line in gzip.decompress(SAMPLE.read_bytes()).split(b"\n") if line]
    changed = [json.dumps(_with_every("start_time", 10**20, json.loads(line))).encode() for line in lines]
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join([header, *changed]) + b"\n")
    reader = RunReader(path)
    assert reader.warnings == []
    report = render_report(reader)
    rows = [line for line in report.splitlines() if "VLLM::Worker_TP" in line and line.split()[0].isdigit()]
    assert rows and all(line.split()[1] == "n/a" for line in rows), rows
    assert summarize(reader)


def test_a_negative_duration_reads_as_one() -> None:
    assert fmt_duration(-100) == "-1m 40s" and fmt_duration(-3725) == "-1h 02m 05s" and fmt_duration(-1.5) == "-1.5 s"
    assert fmt_duration(-1e308) != "n/a" and fmt_duration(float("-inf")) == "n/a"


def _report_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kimitui", "report", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize(("where", "says"), [
    ("folder", "is a directory; give the file to write"),
    ("missing/report.md", "no such directory"),
    ("a-file/report.md", "no such directory"),
    ("/proc/report.md", "No such file or directory"),  # not writable whoever runs it (root included)
])
def test_report_to_a_path_it_cannot_write_is_one_line_exit_2_and_nothing_written(tmp_path: Path, where: str,
                                                                                 says: str) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "a-file").write_text("kept\n")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    proc = _report_cli([str(SAMPLE), "-o", where], tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"kimitui: report -o {where}: ")
    assert says in proc.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == before and (tmp_path / "a-file").read_text() == "kept\n"


def test_report_to_a_file_replaces_it_whole_through_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "report.md"
    target.write_text("old\n")
    (tmp_path / "link.md").symlink_to(target)
    proc = _report_cli([str(SAMPLE), "-o", "link.md"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "link.md").is_symlink() and target.read_text() == render_report(RunReader(SAMPLE))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.md", "report.md"]  # no temporary file left
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
