"""``kimitui bench macro`` headless: one line (or JSON object) per level, vLLM key names, --output."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimitui.bench.cli import add_parser, cmd_bench
from tests.conftest import ROOT


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


def test_text_output_and_errors(server_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["--url", server_url, "--model", "m", "--concurrency", "2", "--requests", "2",
                 "--max-tokens", "40", "--endpoint", "chat"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("c=2") and "tok/s" in text and "reached 2" in text
    assert _run(["--url", server_url, "--concurrency", "600"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert _run(["--url", "http://127.0.0.1:9", "--concurrency", "1", "--connect-timeout", "1"]) == 2
    assert "/v1/models" in capsys.readouterr().err
