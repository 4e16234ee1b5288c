"""``kimitui bench macro`` headless: one line (or JSON object) per level, vLLM key names, --output."""

from __future__ import annotations

import argparse
import csv
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimitui.commands.bench import add_parser, cmd_bench
from kimitui.core.events import PhaseEnd, PhaseStart
from kimitui.core.runfile import RunReader
from kimitui.core.state import fold_all
from kimitui.hostside.procfs import start_time_of
from tests.support import ROOT
from tests.waiting import wait_until


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


@pytest.fixture(autouse=True)
def data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run files of the in-process sweeps go here, not to the user's ~/.local/share."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path / "data"


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
        # a plain URL records no GPU power: no energy figure, and why (issue 38 item 3)
        assert x["output_tokens_per_joule"] is None and "no GPU power" in x["energy_note"]
    saved = json.loads(out.read_text())
    assert saved["model_id"] == "fake-model"  # --model omitted: GET /v1/models
    assert [lv["concurrency"] for lv in saved["levels"]] == [1, 4]
    assert saved["single_stream_tok_s"] == pytest.approx(lines[0]["output_throughput"])


@pytest.mark.parametrize("client", ["lean", "httpx", "aiohttp"])
def test_client_choice(server_url: str, tmp_path: Path, client: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep.json"
    assert _run(["--url", server_url, "--model", "m", "--concurrency", "3", "--requests", "6", "--max-tokens", "5",
                 "--json", "--client", client, "--output", str(out)]) == 0
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert line["completed"] == 6 and line["failed"] == 0 and line["total_output_tokens"] == 30
    assert json.loads(out.read_text())["config"]["client"] == client
    with pytest.raises(SystemExit):
        _run(["--url", server_url, "--client", "urllib"])
    assert "invalid choice" in capsys.readouterr().err


def test_text_output_and_errors(server_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["--url", server_url, "--model", "m", "--concurrency", "2", "--requests", "2",
                 "--max-tokens", "40", "--endpoint", "chat"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("c=2") and "tok/s" in text and "reached 2" in text
    assert _run(["--url", server_url, "--concurrency", "600"]) == 2
    assert "out of range" in capsys.readouterr().err


def test_a_server_that_does_not_answer_is_a_recorded_phase_that_could_not_start(
        data_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert _run(["--url", f"http://127.0.0.1:{port}", "--concurrency", "1", "--connect-timeout", "1"]) == 1
    err = capsys.readouterr().err
    (cause,) = [line for line in err.splitlines() if line.startswith("kimitui bench macro: ")]
    assert f"GET http://127.0.0.1:{port}/v1/models" in cause and err.endswith(cause + "\n"), err
    (path,) = (data_home / "kimitui" / "runs").glob("*.jsonl*")
    events = list(RunReader(path).events())
    phases = [e for e in events if isinstance(e, PhaseStart | PhaseEnd)]
    assert [type(e) for e in phases] == [PhaseStart, PhaseEnd] and phases[0].phase == "macro"  # type: ignore[attr-defined]
    end = phases[1]
    assert isinstance(end, PhaseEnd) and not end.ok
    assert end.note == "could not start: " + cause.removeprefix("kimitui bench macro: ")
    span = fold_all(events).phases[-1]
    assert span.phase == "macro" and span.ok is False


def test_a_model_list_that_fails_names_the_way_round_it(capsys: pytest.CaptureFixture[str], data_home: Path) -> None:
    """transformers 5.17 pinned to a folder answers ``GET /v1/models`` with 500 when the Hugging Face cache folder
    is missing (seen on the device): the one line says to name the model, and naming it runs the sweep."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "faulty_server.py"), "--models-status", "500"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = f"http://127.0.0.1:{int(proc.stdout.readline().split()[1])}"
        assert _run(["--url", url, "--concurrency", "1", "--requests", "1", "--max-tokens", "4"]) == 1
        (cause,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kimitui bench macro: ")]
        assert cause.endswith(f"GET {url}/v1/models: HTTP 500 (name the model instead: --model, or [macro] model "
                              "in a campaign file)"), cause
        assert _run(["--url", url, "--model", "m", "--concurrency", "1", "--requests", "1", "--max-tokens", "4"]) == 0
    finally:
        proc.terminate()
        proc.wait(5)


@pytest.fixture(scope="module")
def refusing_url() -> Iterator[str]:
    """A real server that lists a model and answers every completion 503."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "faulty_server.py"), "--status", "503"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("PORT "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        proc.wait(5)


def test_every_request_of_every_level_refused_exits_1(refusing_url: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep.json"
    assert _run(["--url", refusing_url, "--concurrency", "1,2", "--requests", "2", "--max-tokens", "4",
                 "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert "kimitui bench macro: every request failed at 2 levels" in err and "503" in err, err
    assert json.loads(out.read_text())["finished"] is True  # what was measured (nothing) is still written


def test_a_level_that_measured_something_is_not_a_failed_sweep(server_url: str, capsys: pytest.CaptureFixture[str]
                                                               ) -> None:
    assert _run(["--url", server_url, "--model", "m", "--concurrency", "1", "--requests", "1",
                 "--max-tokens", "2"]) == 0


def _sim_processes_of(owner_pid: int) -> list[int]:
    """Live processes a simulated host started for ``owner_pid`` (they carry its owner mark)."""
    mark = f"KIMITUI_SIM_OWNER={owner_pid}:".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if mark in (entry / "environ").read_bytes() and start_time_of(int(entry.name)) is not None:
                found.append(int(entry.name))
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
    return found


def test_host_demo_starts_a_simulated_host_for_the_sweep_and_removes_it(tmp_path: Path) -> None:
    import os

    proc = subprocess.Popen(
        [sys.executable, "-m", "kimitui", "bench", "macro", "--host", "demo", "--concurrency", "1,2,4,8,16",
         "--requests", "4x", "--max-tokens", "16", "--input-len", "32", "--json"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        env=dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data")))
    # while it runs, its simulated host's processes are there (what the check below looks for)
    wait_until(lambda: _sim_processes_of(proc.pid) or proc.poll() is not None, "the simulated host's processes")
    assert proc.poll() is None, "the sweep ended before its simulated host's processes were seen"
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
    # about 50 tok/s for one stream, as the reference host; never more (causal: steps never end early). How
    # the curve climbs with the concurrency is a figure of the machine: benchmarks/timing_figures.py
    assert toks[0] < 50 * 1.05
    assert all(x["mean_input_tokens"] == 32 and x["input_len_method"] == "tokenize" for x in lines)
    # the simulated host is gone: its directory and every process it started
    sim_dir = next(line.split("ready: ")[1].split(",")[0] for line in err.splitlines() if "ready: " in line)
    assert not Path(sim_dir).exists()
    wait_until(lambda: _sim_processes_of(proc.pid) == [], "every process of the simulated host gone")


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


# --- a bad URL, the default request count ---------------------------------------------------------------

@pytest.mark.parametrize("url", ["http://127.0.0.1:abc", "http://[::1", "http://:8000", "http://127.0.0.1:99999"])
def test_a_bad_url_is_a_one_line_usage_error(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["--url", url, "--concurrency", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"kimitui bench macro: url {url!r}"), err
    from kimitui.bench.macro import ConfigError
    from kimitui.tui.screens.macro_dialog import form_defaults, parse_form

    with pytest.raises(ConfigError, match="url"):  # the M dialog checks it the same way
        parse_form({**form_defaults(url)})


def test_the_cli_and_the_dialog_default_to_the_same_request_count(server_url: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from kimitui.bench.macro.config import DEFAULT_REQUESTS
    from kimitui.tui.screens.macro_dialog import form_defaults, parse_form

    dialog = parse_form(form_defaults(server_url))
    assert (dialog.requests_per_stream, DEFAULT_REQUESTS) == (4, "4x")
    assert _run(["--url", server_url, "--model", "m", "--concurrency", "1,3", "--max-tokens", "4", "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(x["concurrency"], x["completed"]) for x in lines] == [(1, 4), (3, 12)]  # 4 per slot, as the dialog


# --- every sweep recorded; --output whole after each level; progress on stderr ----------------------------

def test_the_sweep_is_recorded_and_replays_and_reports(server_url: str, data_home: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from kimitui.commands.main import main
    from kimitui.core.events import MacroPoint, MacroProgress, PhaseEnd, PhaseStart
    from kimitui.core.runfile import RunReader

    assert _run(["--url", server_url, "--concurrency", "1,4", "--requests", "4", "--max-tokens", "8", "--json"]) == 0
    err = capsys.readouterr().err
    (run,) = (data_home / "kimitui" / "runs").glob("*.jsonl")
    assert f"recording this session to {run}" in err and f"kimitui replay {run}" in err
    reader = RunReader(run)
    events = list(reader.events())
    assert reader.header.meta["command"] == "bench macro" and reader.header.meta["url"] == server_url
    assert isinstance(events[0], MacroProgress) and events[0].status == "starting"  # the panel's, recorded
    assert isinstance(events[1], PhaseStart) and events[1].phase == "macro"
    assert [e.concurrency for e in events if isinstance(e, MacroPoint)] == [1, 4]
    assert isinstance(events[-2], PhaseEnd) and events[-2].ok
    assert isinstance(events[-1], MacroProgress) and events[-1].status == "done"
    assert main(["replay", "--summary", str(run)]) == 0
    assert "peak" in capsys.readouterr().out
    assert main(["report", str(run)]) == 0
    report = capsys.readouterr().out
    assert "## Serving sweep (macro)" in report and "No macro benchmark points" not in report


@pytest.fixture(scope="module")
def slow_url() -> Iterator[str]:
    """Each token 20 ms apart: a request of 20 tokens takes 0.4 s."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "faulty_server.py"), "--interval", "0.02"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        proc.wait(5)


def test_output_is_whole_after_each_level_and_survives_kill_9(slow_url: str, tmp_path: Path) -> None:
    import os
    import signal

    out = tmp_path / "sweep.json"
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    proc = subprocess.Popen([sys.executable, "-m", "kimitui", "bench", "macro", "--url", slow_url, "--model", "m",
                             "--concurrency", "1,2", "--requests", "1x", "--max-tokens", "20", "--warmup", "0",
                             "--output", str(out), "--json"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_until(lambda: proc.poll() is not None or (out.exists() and json.loads(out.read_text())["levels"]),
                   "the first level in the output")
        assert proc.poll() is None, proc.communicate()
        os.kill(proc.pid, signal.SIGKILL)  # in the middle of the second level
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    saved = json.loads(out.read_text())
    assert saved["finished"] is False and [lv["concurrency"] for lv in saved["levels"]] == [1]
    assert saved["levels"][0]["completed"] == 1 and saved["model_id"] == "m"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".sweep.json.")]  # no temporary left
    from kimitui.core.events import MacroPoint
    from kimitui.core.runfile import RunReader

    (run,) = (tmp_path / "data" / "kimitui" / "runs").glob("*.jsonl")
    assert [e.concurrency for e in RunReader(run).events() if isinstance(e, MacroPoint)] == [1]


def test_progress_on_stderr_a_line_per_level_off_a_terminal(slow_url: str, tmp_path: Path) -> None:
    import os

    res = subprocess.run([sys.executable, "-m", "kimitui", "bench", "macro", "--url", slow_url, "--model", "m",
                          "--concurrency", "1,2", "--requests", "2x", "--max-tokens", "5", "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data")))
    assert res.returncode == 0, res.stderr
    levels = [line for line in res.stderr.splitlines() if line.startswith("kimitui bench macro: level ")]
    assert len(levels) == 2 and "\r" not in res.stderr
    assert levels[0].startswith("kimitui bench macro: level 1/2 c=1 done in ") and "2 ok, 0 failed" in levels[0]
    assert levels[1].startswith("kimitui bench macro: level 2/2 c=2 done in ") and "4 ok, 0 failed" in levels[1]
    assert [json.loads(x)["concurrency"] for x in res.stdout.splitlines()] == [1, 2]  # stdout: JSON only


def test_progress_on_a_terminal_is_one_live_line(slow_url: str, tmp_path: Path) -> None:
    import os
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "kimitui", "bench", "macro", "--url", slow_url, "--model", "m",
                             "--concurrency", "1", "--requests", "3", "--max-tokens", "20", "--json"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
                            env=dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data")))
    os.close(slave)
    err = b""
    try:
        out, _ = proc.communicate(timeout=60)
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the other side closed
                break
            if not chunk:
                break
            err += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert proc.returncode == 0
    text = err.decode(errors="replace")
    updates = [u for u in text.split("\r\x1b[K") if u.startswith("kimitui bench macro: level 1/1 c=1: ")]
    assert len(updates) >= 3, text  # ~1.2 s of requests, rewritten about 10 times a second
    assert any("requests done" in u and "/3" in u for u in updates)
    assert "level 1/1 c=1 done in" not in text  # the per-level line is for logs, not the terminal
    assert json.loads(out)["completed"] == 3


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
        energy = {"output_tokens_per_joule", "joules_per_request", "energy_note"}  # the host's power, not the records
        assert {"concurrency": level["concurrency"], **again} == {k: v for k, v in level.items() if k not in energy}
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


def test_goodput_comma_form_and_the_sweeps_verdict(server_url: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep.json"
    assert _run(["--url", server_url, "--model", "m", "--concurrency", "1,4", "--requests", "4", "--max-tokens", "8",
                 "--output", str(out), "--goodput", "ttft:5000,tpot:1000"]) == 0
    text = capsys.readouterr().out
    assert "verdict: SLOs ttft:5000,tpot:1000 ms met at p99 up to c=4" in text
    saved = json.loads(out.read_text())
    assert [lv["goodput_slo_ms"] for lv in saved["levels"]] == [{"ttft": 5000.0, "tpot": 1000.0}] * 2
    verdict = saved["verdict"]
    assert verdict["goodput_slo_ms"] == {"ttft": 5000.0, "tpot": 1000.0}
    assert verdict["slo_met_at_p99"] == [1, 4] and verdict["max_concurrency_meeting_slo"] == 4
    assert verdict["peak_output_throughput"] == max(lv["output_throughput"] for lv in saved["levels"])
    # an SLO no request can meet (a TTFT of 0 ms): no level meets it, said so, and goodput is 0
    assert _run(["--url", server_url, "--model", "m", "--concurrency", "2", "--requests", "2", "--max-tokens", "4",
                 "--json", "--goodput", "ttft:0"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out.splitlines()[0])["request_goodput"] == 0
    assert "verdict: SLOs ttft:0 ms met at p99 at no level" in captured.err  # stdout is a JSON object a level
    for bad in ("ttft:fast", "itl:5", "tpot:-1"):
        assert _run(["--url", server_url, "--concurrency", "1", "--goodput", bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("kimitui bench macro: goodput takes ttft:MS") and err.count("\n") == 1, err
