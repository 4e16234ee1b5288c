"""A run file mutated 1,000 ways (tests/fuzz_runs.py: a field's type changed, a key dropped, huge and
non-finite numbers, Unicode of every kind, truncation, lines duplicated, swapped, dropped or corrupted,
unknown types, the header's fields) is read, folded through a Session, replayed, summarised and reported
without an exception; and the precise cases: a line with a wrongly typed field is skipped with a warning
naming its line, the events after it still arrive, and a replay warns about it once however often it
seeks past it."""

from __future__ import annotations

import gzip
import json
import math
import random
import time
from pathlib import Path

import pytest

from kimitui.core.events import decode
from kimitui.core.replay import Player
from kimitui.core.runfile import RunFileError, RunReader
from kimitui.core.session import Session
from kimitui.core.state import fold_all
from kimitui.report.markdown import render_report
from kimitui.report.summary import summarize
from tests.fuzz_runs import Run, load_bundled, mutate, slice_of

SEED = 20261201
MUTATIONS = 1000
FULL_EVERY = 40
"""One mutation in 40 is of the whole bundled run (25 of them), the rest of its slice (all event types,
fewer samples and per-request records), so the thousand take seconds."""
REPLAY_EVERY = 4
"""And one in 4 is replayed as well (a seek, a step, played to the end: the other paths that decode)."""


@pytest.fixture(scope="module")
def bundled() -> Run:
    return load_bundled()


def _write(path: Path, run: Run, lines: list[bytes] | None = None) -> Path:
    path.write_bytes(run.header + b"\n" + b"\n".join(run.lines if lines is None else lines) + b"\n")
    return path


def _changed(run: Run, i: int, **fields: object) -> list[bytes]:
    """The run's lines with event ``i``'s fields set (its key order kept: the index's fast path reads it)."""
    lines = list(run.lines)
    lines[i] = json.dumps({**run.parsed[i], **fields}, separators=(",", ":")).encode()
    return lines


def exercise(path: Path, replay: bool = True) -> tuple[RunReader, str, str]:
    """Everything a run goes through: read, every event folded through a Session, replayed (a seek, a step,
    played to the end), summarised (``kimitui replay --summary``) and reported (``kimitui report``)."""
    reader = RunReader(path)
    session = Session()
    for ev in reader.events():
        session.publish(ev)
    assert session.state.events_folded == len(reader) - len(reader.skipped)
    if replay:
        _replay(reader)
    return reader, summarize(reader), render_report(reader)


def _replay(reader: RunReader) -> None:
    player = Player(reader, clock=lambda: 0.0)
    player.seek_index(len(reader) // 2)
    player.step()  # pauses there
    player.toggle_pause()
    player.advance(0.0)
    player.advance(math.inf)  # plays on to the end
    assert player.finished


def test_a_thousand_mutations_of_the_bundled_run_are_read_folded_replayed_summarised_and_reported(
        bundled: Run, tmp_path: Path) -> None:
    """Whatever a damaged run holds, it is read, folded, replayed, summarised and reported without an error; only a run
    whose header is gone is refused, and every line skipped is warned about once by its line number and listed in
    the report: nothing is skipped silently."""
    rng = random.Random(SEED)
    small = slice_of(bundled)
    assert small.types == bundled.types and len(small.lines) < len(bundled.lines) / 2
    path = tmp_path / "mutant.jsonl"
    warned = refused = 0
    started = time.monotonic()
    for k in range(MUTATIONS):
        mutant = mutate(bundled if k % FULL_EVERY == 0 else small, rng)
        path.write_bytes(mutant.data)
        try:
            reader, summary, report = exercise(path, replay=k % REPLAY_EVERY == 0)
        except RunFileError as exc:
            assert mutant.may_refuse, f"mutation {k} ({mutant.what}) refused: {exc}"
            refused += 1
            continue
        except Exception as exc:
            raise AssertionError(f"mutation {k} ({mutant.what}): {type(exc).__name__}: {exc}") from exc
        where = f"mutation {k} ({mutant.what})"
        assert all("\n" not in w for w in reader.warnings), where
        for i in reader.skipped:  # every event skipped is warned about once, by its line
            assert sum(f": line {reader.line_of(i)} skipped: " in w for w in reader.warnings) == 1, where
        assert all(f"- {w}" in report for w in reader.warnings), where  # nothing skipped silently
        assert "\nwarnings  " in summary and report.endswith("\n"), where
        assert summary.encode("utf-8") and report.encode("utf-8"), where  # printable, whatever the run held
        warned += bool(reader.warnings)
    elapsed = time.monotonic() - started
    # the mutations do reach the checks: many runs have lines skipped, few mutants lose their header
    assert warned > MUTATIONS // 4 and refused < MUTATIONS // 20, (warned, refused)
    print(f"{MUTATIONS} mutations in {elapsed:.1f} s: {warned} with warnings, {refused} refused (header cut)")


def test_a_line_with_a_wrongly_typed_field_is_skipped_by_its_line_number_and_the_rest_arrives(
        bundled: Run, tmp_path: Path) -> None:
    """A line with a wrongly typed field is skipped, named by its line number and field, and every other event arrives.
    """
    i = next(k for k, p in enumerate(bundled.parsed) if p["type"] == "gemm_row")
    path = _write(tmp_path / "run.jsonl", bundled, _changed(bundled, i, m="4096"))
    reader, summary, report = exercise(path)
    line = i + 2  # the header is line 1
    warning = f"run.jsonl: line {line} skipped: bad gemm_row event: field 'm' is str, expected int"
    assert reader.warnings == [warning] and reader.line_of(i) == line
    assert len(reader) == len(bundled.lines)  # indexed (its start looks like an event's), refused when decoded
    evs = list(RunReader(path).events())
    assert len(evs) == len(bundled.lines) - 1
    assert evs[i:] == [decode(raw) for raw in bundled.lines[i + 1:]]  # every event after it arrives
    assert evs[:i] == [decode(raw) for raw in bundled.lines[:i]]
    assert f"warnings  1\n  - {warning}" in summary and f"- {warning}" in report
    assert "gemm_row 60" in summary  # the index counts the line; the fold has one GEMM row less
    assert len(fold_all(evs).gemm) == 59 and len(fold_all([decode(raw) for raw in bundled.lines]).gemm) == 60


def test_a_replay_warns_once_about_a_bad_sample_however_often_it_seeks(bundled: Run, tmp_path: Path) -> None:
    """A replay warns once about a bad sample however often it seeks past it, and plays every other event."""
    samples = [k for k, p in enumerate(bundled.parsed) if p["type"] == "sample"]
    i = samples[len(samples) // 2]
    gpus = [dict(g) for g in bundled.parsed[i]["gpus"]]
    gpus[3]["mem_used_mib"] = "lots"
    path = _write(tmp_path / "run.jsonl", bundled, _changed(bundled, i, gpus=gpus))
    reader = RunReader(path)
    assert reader.warnings == []  # not decoded yet
    player = Player(reader, clock=lambda: 0.0)
    for position in (i + 1, len(reader), i + 1, i + 2, 0, i + 1):
        player.seek_index(position)  # at i + 1 the bad sample is the last one: folded whole
    player.seek_index(i)
    player.advance(0.0)
    player.advance(math.inf)
    assert player.finished and player.session.state.events_folded == len(reader) - 1
    assert reader.warnings == [f"run.jsonl: line {i + 2} skipped: bad sample event: "
                               "field 'gpus[3].mem_used_mib' is str, expected float | None"]
    assert reader.skipped.keys() == {i}


def test_non_finite_numbers_a_run_written_by_python_may_hold(bundled: Run, tmp_path: Path) -> None:
    """json.dumps writes NaN and Infinity: a GEMM row's relative error may be NaN (a broken kernel) and is
    kept; a time that is infinite is no time, and its row is skipped, named."""
    rows = [k for k, p in enumerate(bundled.parsed) if p["type"] == "gemm_row"]
    lines = _changed(bundled, rows[0], rel_err=math.nan, correct=False)
    lines[rows[1]] = _changed(bundled, rows[1], time_us=math.inf)[rows[1]]
    path = _write(tmp_path / "run.jsonl", bundled, lines)
    reader, _, report = exercise(path)
    assert reader.warnings == [f"run.jsonl: line {rows[1] + 2} skipped: bad gemm_row event: field 'time_us' is "
                               "inf, expected a finite float"]
    assert "nan FAIL" in report


def test_a_header_field_of_the_wrong_type_is_left_out_and_the_run_read(bundled: Run, tmp_path: Path) -> None:
    """A header field of the wrong type is left out, said, and the run read whole."""
    head = {**json.loads(bundled.header), "created": "yesterday", "meta": ["not", "a", "map"]}
    path = tmp_path / "run.jsonl.gz"
    path.write_bytes(gzip.compress(json.dumps(head).encode() + b"\n" + b"\n".join(bundled.lines) + b"\n"))
    reader, summary, _ = exercise(path)
    assert reader.warnings == ["run.jsonl.gz: header field 'created' is str, expected float; left out",
                               "run.jsonl.gz: header field 'meta' is list, expected dict[str, any]; left out"]
    assert reader.header.created == 0.0 and reader.header.meta == {} and len(reader) == len(bundled.lines)
    assert "created   1970-01-01 00:00:00 UTC" in summary


def test_an_event_stamped_beyond_any_date_is_folded_and_reported(bundled: Run, tmp_path: Path) -> None:
    """Well typed but absurd: a time of 1e308 s (and everything after it replayed at that time)."""
    i = next(k for k, p in enumerate(bundled.parsed) if p["type"] == "phase_end")
    path = _write(tmp_path / "run.jsonl", bundled, _changed(bundled, i, t=1e308))
    reader, summary, report = exercise(path)
    assert reader.end_time == 1e308 and "1e+308 (not a date)" in report
    assert "events were stamped more than" in summary  # the events after it went back in time


@pytest.mark.parametrize("value", [math.nan, math.inf, -1, 10**400, 2**70, 1e308, "12", [], {}, None, True,
                                   "\u202e\x1b[31m", "\ud800"], ids=lambda v: f"{v!r:.12}")
def test_plain_json_inside_events_takes_any_value(bundled: Run, tmp_path: Path, value: object) -> None:
    """vLLM's metrics, the per-request records, a campaign's settings and a micro plan's shapes are plain
    JSON that decoding does not look into: every key of them set to one odd value, the run still folds,
    replays, summarises and reports (the numbers read there are taken only when finite)."""
    zones = {"macro_point": "metrics", "macro_requests": "requests", "campaign_plan": "settings",
             "micro_plan": "gemms"}
    lines = list(bundled.lines)
    for i, p in enumerate(bundled.parsed):
        zone = zones.get(p["type"])
        if zone is None:
            continue
        inside = p[zone] if isinstance(p[zone], list) else [p[zone]]
        changed = [{key: value for key in item} for item in inside]
        lines[i] = json.dumps({**p, zone: changed if isinstance(p[zone], list) else changed[0]},
                              separators=(",", ":")).encode()
    reader, summary, report = exercise(_write(tmp_path / "run.jsonl", bundled, lines))
    assert reader.warnings == [] and "## Serving sweep (macro)" in report and "macro     " in summary
    assert summary.encode("utf-8") and report.encode("utf-8")
