"""Issue 36 item 1: a macro level's figures come from one typed level result (``core.level_result``) and its
requests from one typed record (``core.events.RequestRecord``): one level reads the same on the Benchmarks tab,
in ``bench macro``'s line, in the log, in the report, in ``kimitui compare`` and in the post-restart check; a
figure no level has is an error, not a blank; a damaged record loses that request, not the session."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kimitui.bench.macro.config import SLO
from kimitui.bench.macro.metrics import LevelContext, summarize
from kimitui.bench.sweep_output import format_level
from kimitui.core.describe import describe
from kimitui.core.events import LevelResult, MacroPoint, MacroRequests, RequestRecord
from kimitui.core.level_requests import level_requests
from kimitui.core.runfile import RunReader, RunWriter
from kimitui.core.sweep_state import sweep_failure
from kimitui.phases.check import compare
from kimitui.report.compare import load_runs, macro_compare
from kimitui.report.markdown import render_report
from kimitui.tui.views.result_tables import macro_cells


def _ok(start: float, ttft: float, gap: float, n: int) -> RequestRecord:
    chunks = [ttft + gap * i for i in range(n)]
    return RequestRecord(start_ms=start, end_ms=chunks[-1] + 1, chunk_ms=chunks, input_tokens=128,
                         output_tokens=n, target_input=128, max_tokens=n)


RECORDS = [_ok(0.0, 41.0, 12.0, 16), _ok(5.0, 44.0, 13.0, 16), _ok(9.0, 52.0, 11.5, 16),
           RequestRecord(start_ms=12.0, end_ms=3.0, error="HTTP 503: busy", max_tokens=16)]
METRICS = summarize(RECORDS, LevelContext(concurrency=4, concurrency_reached=3, slo=SLO(ttft_ms=50.0),
                                          input_len_method="tokenize", percentiles=(50.0, 99.0)))


def _cells(point: MacroPoint) -> list[str]:
    return [c if isinstance(c, str) else c.plain for c in macro_cells(point)]


@pytest.fixture
def run_file(tmp_path: Path) -> Path:
    path = tmp_path / "one-level.jsonl"
    with RunWriter(path, host="node") as w:
        for ev in MacroRequests(1.0, concurrency=4, origin=100.0, total=4,
                                requests=[r.to_json() for r in RECORDS]), MacroPoint(2.0, 4, metrics=METRICS):
            w.append(ev)
    return path


def test_one_level_reads_the_same_on_every_surface(run_file: Path) -> None:
    point = MacroPoint(2.0, concurrency=4, metrics=METRICS)
    r = point.result
    tok, ttft_mean, tpot_mean, tpot_p99 = r.output_throughput, r.ttft.mean, r.tpot.mean, r.tpot.p(99)
    assert None not in (tok, ttft_mean, tpot_mean, tpot_p99)
    assert (r.completed, r.failed, r.num_prompts, r.first_error) == (3, 1, 4, "HTTP 503: busy")
    assert tok == METRICS["output_throughput"] and tpot_p99 == METRICS["p99_tpot_ms"]

    # the Benchmarks tab's row
    cells = _cells(point)
    assert cells[:10] == ["4", f"{tok:.0f}", "3/4", f"{tok / 4:.1f}", f"{ttft_mean:.0f}", f"{r.ttft.p(99):.0f}",
                          f"{ttft_mean:.0f}", "0", f"{tpot_mean:.1f}", f"{tpot_p99:.1f}"]  # no thinking: TTFO = TTFT
    # bench macro's line on stdout
    line = format_level(r)
    assert f"out {tok:>9.1f} tok/s" in line and f"TTFT {ttft_mean:>8.1f} ms (p99 {r.ttft.p(99):.1f})" in line
    assert f"TPOT {tpot_mean:>7.2f} ms" in line and "[1 x HTTP 503: busy]" in line
    # the log
    assert describe(point) == f"concurrency 4: {tok:.0f} tok/s"
    # the report's table
    report = render_report(RunReader(run_file))
    row = next(x for x in report.splitlines() if x.startswith("| 4 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:7] == ["4", "3/1", f"{tok:.1f}", f"{ttft_mean:.1f}", f"{r.ttft.p(99):.1f}", f"{tpot_mean:.1f}",
                         f"{tpot_p99:.1f}"]
    # kimitui compare, a run against itself
    compared = "\n".join(macro_compare(load_runs([RunReader(run_file), RunReader(run_file)])))
    assert f"| 4 | output tok/s | {tok:.1f} | {tok:.1f} |" in compared
    # the post-restart check, the level as its own baseline
    probe = compare(r, point, 10.0, 25.0, 3.0)
    assert (probe.tok_s, probe.baseline_tok_s, probe.ttft_ms, probe.drift) == (tok, tok, r.ttft.median, False)
    # the fold's per-request distributions: the same records, typed once
    level = level_requests([ev for ev in RunReader(run_file).events() if isinstance(ev, MacroRequests)])
    assert level is not None and (level.received, level.failed) == (4, 1)
    assert level.ttft_ms == [41.0, 44.0, 52.0] and sorted(level.tpot_ms) == [11.5, 12.0, 13.0]


def test_a_figure_no_level_has_is_an_error() -> None:
    r = LevelResult.from_json(4, METRICS)
    assert r.figure("p99_tpot_ms") == r.tpot.p(99) and r.figure("mean_ttft_ms") == r.ttft.mean
    assert r.figure("request_goodput") == METRICS["request_goodput"]
    assert r.figure("p50_itl_ms") == METRICS["p50_itl_ms"]
    for typo in ("p99_tpot_mss", "output_throughput_", "mean_ttfts_ms", "server_mean_ttfts_ms"):
        with pytest.raises(KeyError):
            r.figure(typo)


@pytest.mark.parametrize("bad", [float("nan"), math.inf, "12.5", True, [1.0], {"x": 1}, 10**400])
def test_a_level_read_from_any_json_has_none_for_what_is_no_number(bad: object) -> None:
    m = {**METRICS, "output_throughput": bad, "mean_ttft_ms": bad, "completed": bad, "percentiles": [bad, 99],
         "failures": {"x": bad}, "client_warnings": bad, "server_mean_itl_ms": bad}
    r = LevelResult.from_json(4, m)
    assert (r.output_throughput, r.ttft.mean, r.completed, r.first_error, r.server.mean_ms) == (None, None, None,
                                                                                               None, {})
    assert r.percentiles == (99.0,) and r.client_warnings == ()
    assert r.to_json() == m  # what was recorded is kept as it was
    assert _cells(MacroPoint(1.0, 4, metrics=m))[1] == "-"
    assert format_level(r).startswith("c=4      n/a ok")


def test_a_failed_sweep_is_judged_from_its_typed_levels() -> None:
    failed = LevelResult.from_json(1, {"completed": 0, "failed": 2, "num_prompts": 2, "failures": {"HTTP 500": 2}})
    assert failed.all_failed and not LevelResult.from_json(4, METRICS).all_failed
    assert sweep_failure([failed]) == "every request failed at 1 level: HTTP 500"
    assert sweep_failure([failed, LevelResult.from_json(4, METRICS)]) is None


@pytest.mark.parametrize("damage", [
    {"start_ms": "0"}, {"end_ms": None}, {"chunk_ms": [1.0, float("nan")]}, {"chunk_ms": [1.0, True]},
    {"chunk_ms": "12"}, {"in": 1.5}, {"out": "3"}, {"error": 500}, {"first_ms": "x"}, {"target_in": 12.0},
    {"chunk_ms": [1e308, 1e308]},
])
def test_a_damaged_record_loses_that_request_only(damage: dict[str, object]) -> None:
    good = [r.to_json() for r in RECORDS]
    ev = MacroRequests(1.0, concurrency=4, origin=100.0, total=5, requests=[*good[:2], {**good[2], **damage},
                                                                            good[3], ["not", "an", "object"]])
    assert ev.records(keep_malformed=True)[2] is None and ev.records(keep_malformed=True)[4] is None
    assert ev.records() == [RECORDS[0], RECORDS[1], RECORDS[3]]
    with pytest.raises(ValueError):
        RequestRecord.from_json({**good[2], **damage})
    level = level_requests([ev])
    assert level is not None and (level.received, level.failed, len(level.ttft_ms)) == (5, 1, 2)
