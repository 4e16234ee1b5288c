"""``kimitui bench macro`` headless: one line (or JSON object) per level, vLLM key names, --output."""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

from kimitui.bench.cli import add_parser, cmd_bench
from tests.conftest import ROOT

POLL_S = 0.05
"""Interval between checks of a condition waited on with a deadline."""


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "faulty_server.py"), "--interval", "0.001"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("PORT "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        proc.wait(5)


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kimitui")
    add_parser(parser.add_subparsers(dest="command"))
    return cmd_bench(parser.parse_args(["bench", "macro", *argv]))


def test_json_lines_per_level_and_output_file(server_url: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep.json"
    rc = _run(["--url", server_url, "--concurrency", "1,4", "--requests", "4", "--max-tokens", "8",
               "--json", "--output", str(out), "--goodput", "ttft:5000", "tpot:1000"])
    assert rc == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["concurrency"] for x in lines] == [1, 4]
    for x in lines:
        assert x["completed"] == 4 and x["failed"] == 0 and x["total_output_tokens"] == 32
        assert x["output_throughput"] > 0 and x["mean_ttft_ms"] > 0 and x["max_concurrency"] == x["concurrency"]
        assert x["request_goodput"] == pytest.approx(x["request_throughput"])
    saved = json.loads(out.read_text())
    assert saved["model_id"] == "fake-model"  # --model omitted: GET /v1/models
    assert [lv["concurrency"] for lv in saved["levels"]] == [1, 4]
    assert saved["single_stream_tok_s"] == pytest.approx(lines[0]["output_throughput"])


@pytest.mark.parametrize("client", ["lean", "httpx"])
def test_client_choice(server_url: str, tmp_path: Path, client: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep.json"
    assert _run(["--url", server_url, "--model", "m", "--concurrency", "3", "--requests", "6", "--max-tokens", "5",
                 "--json", "--client", client, "--output", str(out)]) == 0
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert line["completed"] == 6 and line["failed"] == 0 and line["total_output_tokens"] == 30
    assert json.loads(out.read_text())["config"]["client"] == client
    with pytest.raises(SystemExit):
        _run(["--url", server_url, "--client", "aiohttp"])
    assert "invalid choice" in capsys.readouterr().err


def test_text_output_and_errors(server_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["--url", server_url, "--model", "m", "--concurrency", "2", "--requests", "2",
                 "--max-tokens", "40", "--endpoint", "chat"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("c=2") and "tok/s" in text and "reached 2" in text
    assert _run(["--url", server_url, "--concurrency", "600"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert _run(["--url", "http://127.0.0.1:9", "--concurrency", "1", "--connect-timeout", "1"]) == 2
    assert "/v1/models" in capsys.readouterr().err


def _sim_processes_of(owner_pid: int) -> list[int]:
    """Live processes a simulated host started for ``owner_pid`` (they carry its owner mark)."""
    mark = f"KIMITUI_SIM_OWNER={owner_pid}:".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if mark in (entry / "environ").read_bytes():
                stat = (entry / "stat").read_text().rpartition(")")[2].split()
                if stat and stat[0] != "Z":
                    found.append(int(entry.name))
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
    return found


def test_host_demo_starts_a_simulated_host_for_the_sweep_and_removes_it(tmp_path: Path) -> None:
    import os
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "kimitui", "bench", "macro", "--host", "demo", "--concurrency", "1,2,4,8,16",
         "--requests", "4x", "--max-tokens", "16", "--input-len", "32", "--json"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        env=dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data")))
    # while it runs, its simulated host's processes are there (what the check below looks for)
    seen: list[int] = []
    deadline = time.monotonic() + 60
    while not seen and proc.poll() is None and time.monotonic() < deadline:
        seen = _sim_processes_of(proc.pid)
        time.sleep(POLL_S)
    assert seen
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    lines = [json.loads(x) for x in out.splitlines()]
    assert [x["concurrency"] for x in lines] == [1, 2, 4, 8, 16]
    for x in lines:  # vLLM's key names, 4 requests per concurrency slot
        assert x["completed"] == 4 * x["concurrency"] and x["failed"] == 0
        assert x["total_output_tokens"] == 16 * x["completed"] and x["max_concurrency"] == x["concurrency"]
        for key in ("output_throughput", "request_throughput", "mean_ttft_ms", "median_tpot_ms", "p99_itl_ms"):
            assert x[key] > 0, key
    toks = [x["output_throughput"] for x in lines]
    # the simulated server batches: each doubling of the concurrency nearly doubles the throughput (the
    # model says 1.9x; a busy machine takes some of it), and the whole curve climbs
    assert all(b > 1.2 * a for a, b in pairwise(toks)) and toks[-1] > 5 * toks[0]
    assert 25 < toks[0] < 50 * 1.05  # about 50 tok/s for one stream, as the reference host; never more
    assert all(x["mean_input_tokens"] == 32 and x["input_len_method"] == "tokenize" for x in lines)
    # the simulated host is gone: its directory and every process it started
    sim_dir = next(line.split("ready: ")[1].split(",")[0] for line in err.splitlines() if "ready: " in line)
    assert not Path(sim_dir).exists()
    deadline = time.monotonic() + 10
    while _sim_processes_of(proc.pid) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    assert _sim_processes_of(proc.pid) == []


def test_url_or_host_exactly_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _run(["--concurrency", "1"])
    assert "one of the arguments --url --host is required" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _run(["--url", "http://127.0.0.1:9", "--host", "demo"])
    assert "not allowed with" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _run(["--host", "gpu-node-7"])
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _run(["--host", "demo", "--requests", "0x"])
    assert "at least 1" in capsys.readouterr().err


def test_requests_out_csv_and_percentiles(server_url: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    reqs, table, sweep = tmp_path / "requests.jsonl", tmp_path / "levels.csv", tmp_path / "sweep.json"
    rc = _run(["--url", server_url, "--model", "m", "--concurrency", "1,3", "--requests", "6", "--max-tokens", "5",
               "--input-len", "40", "--percentiles", "50,90,95,99,99.9", "--json", "--requests-out", str(reqs),
               "--csv", str(table), "--output", str(sweep)])
    assert rc == 0
    captured = capsys.readouterr()
    lines = [json.loads(x) for x in captured.out.splitlines()]
    assert "12 requests written to" in captured.err
    for x in lines:
        keys = {f"p{p}_{s}_ms" for p in ("50", "90", "95", "99", "99.9") for s in ("ttft", "tpot", "itl", "e2el")}
        assert keys <= set(x)
        assert x["percentiles"] == [50, 90, 95, 99, 99.9] and x["mean_input_tokens"] == 40
    rows = [json.loads(x) for x in reqs.read_text().splitlines()]
    assert [r["concurrency"] for r in rows] == [1] * 6 + [3] * 6
    assert [r["index"] for r in rows] == list(range(6)) * 2
    first = rows[0]
    assert first["status"] == "ok" and first["error"] is None and first["input_tokens"] == 40
    assert first["output_tokens"] == 5 and len(first["chunk_ms"]) == 5 and first["ttft_ms"] == first["chunk_ms"][0]
    assert first["start"] > 1.7e9 and first["start_ms"] == 0.0  # unix time of the level's first dispatch
    # the requests recompute each level's summary exactly (the summary is derived from them)
    from kimitui.bench.macro.metrics import LevelContext, summarize
    from kimitui.bench.macro.records import RequestRecord

    for level in lines:
        records = [RequestRecord(start_ms=r["start_ms"], end_ms=r["end_ms"], chunk_ms=r["chunk_ms"],
                                 input_tokens=r["input_tokens"], output_tokens=r["output_tokens"], error=r["error"],
                                 input_from_usage=not r["input_estimated"], usage_missing=r["usage_missing"],
                                 target_input=r["target_input_tokens"], max_tokens=r["max_tokens"])
                   for r in rows if r["concurrency"] == level["concurrency"]]
        again = summarize(records, LevelContext.from_metrics(level))
        assert {"concurrency": level["concurrency"], **again} == level
    with table.open() as fh:
        table_rows = list(csv.DictReader(fh))
    assert [r["concurrency"] for r in table_rows] == ["1", "3"]
    assert float(table_rows[1]["p99.9_ttft_ms"]) == pytest.approx(lines[1]["p99.9_ttft_ms"])
    assert table_rows[0]["failures"] == "" and table_rows[0]["completed"] == "6"
    assert json.loads(sweep.read_text())["levels"][1]["p95_itl_ms"] == lines[1]["p95_itl_ms"]


def test_arrival_options_and_their_errors(server_url: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"timestamp": 100.0, "input_len": 30}\n{"timestamp": 100.05}\n'
                     '{"timestamp": 100.2, "output_len": 2}\n')
    assert _run(["--url", server_url, "--model", "m", "--concurrency", "2", "--trace", str(trace),
                 "--max-tokens", "4", "--json"]) == 0
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert line["completed"] == 3 and line["arrival"] == "trace trace.jsonl"
    assert line["total_output_tokens"] == 4 + 4 + 2 and line["max_input_tokens"] == 128
    assert line["min_input_tokens"] == 30
    assert _run(["--url", server_url, "--model", "m", "--concurrency", "2", "--requests", "4", "--max-tokens", "2",
                 "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "20", "--ramp-up-end-rps", "80",
                 "--burstiness", "0.5", "--json"]) == 0
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert line["completed"] == 4 and line["arrival"] == "linear ramp-up 20 to 80 req/s (gamma, burstiness 0.5)"
    assert line["client_send_late_p99_ms"] is not None
    for argv, message in [
        (["--ramp-up-strategy", "linear"], "needs --ramp-up-start-rps and --ramp-up-end-rps"),
        (["--ramp-up-end-rps", "5"], "need --ramp-up-strategy"),
        (["--burstiness", "0.5"], "give --request-rate or a ramp-up"),
        (["--request-rate", "5", "--trace", str(trace)], "choose one arrival mode"),
        (["--input-len-stddev", "-1"], "cannot be negative"),
        (["--trace", str(tmp_path / "missing.jsonl")], "missing.jsonl"),
        (["--requests-out", str(tmp_path / "no" / "such" / "dir.jsonl")], "cannot write"),
    ]:
        assert _run(["--url", server_url, "--model", "m", "--concurrency", "1", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("kimitui bench macro: ") and message in err and "Traceback" not in err, err
    with pytest.raises(SystemExit):
        _run(["--url", server_url, "--percentiles", "50,101"])
    assert "out of range" in capsys.readouterr().err
