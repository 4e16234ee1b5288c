"""Engines other than vLLM: request fields found, not assumed (a 4xx naming ``ignore_eos`` is retried
without it, the run goes without it, one warning), and TTFT at the first token-bearing chunk (a role-only
delta ahead of it and a content-free finish chunk after the last token are not token chunks).

The servers are real HTTP servers on loopback (``tests/faulty_server.py``) with transformers serve's ways:
``reject_fields`` (its 422), ``role_chunk`` + ``role_gap_s``, ``finish_chunk``, ``done=False``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimitui.bench.macro import ConfigError, MacroConfig, run_sweep
from kimitui.bench.macro import records as rec
from kimitui.bench.macro.fields import named_fields
from kimitui.bench.macro.request import RequestOutcome, StreamAccount
from kimitui.campaign.config import parse_config
from kimitui.campaign.examples import INIT_TEXT
from kimitui.commands.bench import add_parser, cmd_bench
from kimitui.core.describe import describe, level_of
from kimitui.core.events import Event, LogLine, MacroPoint, MacroRequests, RequestFieldsDropped, decode, encode
from kimitui.core.runfile import RunReader
from kimitui.phases.check import check_phase
from kimitui.tui.screens.macro_dialog import form_defaults, parse_form
from tests.faulty_server import Behavior, FaultyServer
from tests.support import ROOT
from tests.waiting import until

ROLE_GAP_S = 0.3
"""Between the role-only chunk and the first token: a TTFT taken at the role chunk is far below it."""
TRANSFORMERS = {"reject_fields": ("ignore_eos",), "role_chunk": True, "finish_chunk": True, "done": False}
REFUSAL = "Unexpected fields in the request: {'ignore_eos'}"


def dropped_events(events: list[Event]) -> list[RequestFieldsDropped]:
    return [e for e in events if isinstance(e, RequestFieldsDropped)]


# -- request fields -----------------------------------------------------------------------------------------
async def test_a_refused_ignore_eos_is_dropped_for_the_run_with_one_warning() -> None:
    async with FaultyServer(Behavior(reject_fields=("ignore_eos",))) as srv:
        events: list[Event] = []
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[1, 2], requests=4, max_tokens=6, warmup=1)
        result = await run_sweep(cfg, events.append)
        bodies = srv.stats.bodies
    # the first request (the field check) carried it and was refused; nothing after it carried it
    assert bodies[0]["ignore_eos"] is True and all("ignore_eos" not in b for b in bodies[1:])
    assert len(bodies) >= 1 + 2 * (1 + 4)
    assert [lv.metrics["completed"] for lv in result.levels] == [4, 4]
    assert all(lv.metrics["failed"] == 0 and lv.metrics["request_fields_dropped"] == ["ignore_eos"]
               for lv in result.levels)
    (ev,) = dropped_events(events)
    assert ev.fields == ["ignore_eos"] and REFUSAL in ev.reason and ev.reason.startswith("HTTP 422")
    line = describe(ev)
    assert line is not None and "refused ignore_eos" in line and "lengths come from usage" in line
    assert level_of(ev) == "warning"
    assert not [e for e in events if isinstance(e, LogLine) and "422" in e.message]  # one warning, no failures
    saved = result.to_dict()
    assert saved["request_fields_dropped"] == ["ignore_eos"] and REFUSAL in saved["request_fields_dropped_reason"]
    assert saved["config"]["omit_fields"] == ["ignore_eos"] or saved["config"]["omit_fields"] == ("ignore_eos",)
    assert decode(encode(ev)) == ev


async def test_two_refused_fields_are_both_dropped_and_other_refusals_drop_nothing() -> None:
    async with FaultyServer(Behavior(reject_fields=("ignore_eos", "stream_options"))) as srv:
        events: list[Event] = []
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[1], requests=2, max_tokens=3, warmup=0)
        result = await run_sweep(cfg, events.append)
        last = srv.stats.bodies[-1]
    (ev,) = dropped_events(events)
    assert ev.fields == ["ignore_eos", "stream_options"]
    assert "ignore_eos" not in last and "stream_options" not in last and last["max_tokens"] == 3
    assert result.levels[0].metrics["completed"] == 2
    # a 4xx that names no optional field (here max_tokens, which is not one) drops nothing: the sweep fails as before
    body = '{"error": {"message": "max_tokens must be at least 1"}}'
    async with FaultyServer(Behavior(mode="status", status=400, body=body)) as srv:
        events = []
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[1], requests=2, max_tokens=3, warmup=0)
        result = await run_sweep(cfg, events.append)
        assert all("ignore_eos" in b for b in srv.stats.bodies)
    assert not dropped_events(events) and result.levels[0].metrics["failed"] == 2


def test_a_field_is_named_as_a_whole_word_and_only_if_sent() -> None:
    sent = {"model": 1, "ignore_eos": True, "stream_options": {}}
    assert named_fields(REFUSAL, sent) == ["ignore_eos"]
    assert named_fields("extra_forbidden: body.stream_options", sent) == ["stream_options"]
    assert named_fields("unknown field ignore_eos_x", sent) == []
    assert named_fields(REFUSAL, {"model": 1}) == []  # not sent: not ours to drop


@pytest.fixture
def transformers_url() -> Iterator[str]:
    """transformers serve's ways in a server process of its own: 422 to ignore_eos, a role chunk first
    (``ROLE_GAP_S`` before the first token), a content-free finish chunk with the usage, no [DONE]."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "faulty_server.py"), "--transformers",
                             "--role-gap", str(ROLE_GAP_S)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("PORT "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        proc.wait(5)


def test_default_cli_against_a_transformers_like_server(transformers_url: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    out = tmp_path / "sweep.json"
    parser = argparse.ArgumentParser(prog="kimitui")
    add_parser(parser.add_subparsers(dest="command"))
    rc = cmd_bench(parser.parse_args(["bench", "macro", "--url", transformers_url, "--endpoint", "chat",
                                      "--concurrency", "1,2", "--requests", "2", "--max-tokens", "4",
                                      "--json", "--output", str(out)]))
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    lines = [json.loads(x) for x in captured.out.splitlines()]
    assert [x["completed"] for x in lines] == [2, 2] and all(x["failed"] == 0 for x in lines)
    assert all(x["request_fields_dropped"] == ["ignore_eos"] for x in lines)
    assert all(x["mean_ttft_ms"] >= ROLE_GAP_S * 1000 for x in lines)  # not the role chunk's arrival
    warnings = [x for x in captured.err.splitlines() if "ignore_eos" in x]
    assert len(warnings) == 1 and warnings[0].startswith("warning: the server refused ignore_eos"), captured.err
    saved = json.loads(out.read_text())
    assert saved["request_fields_dropped"] == ["ignore_eos"] and saved["finished"] is True
    (run_path,) = re.findall(r"session recorded to (\S+)", captured.err)
    evs = list(RunReader(Path(run_path)).events())
    (ev,) = dropped_events(evs)
    assert ev.fields == ["ignore_eos"]
    records = rec.from_events([e for e in evs if isinstance(e, MacroRequests)])
    assert len(records) == 4 and all(r.success and len(r.chunk_ms) == 4 for r in records)
    # the role chunk, where it was read before the first token, is kept beside it (build_keeps_the_role_chunk)
    assert all(r.first_ms is None or r.first_ms < r.ttft_ms for r in records)
    assert [p.concurrency for p in evs if isinstance(p, MacroPoint)] == [1, 2]


async def test_the_post_restart_probe_drops_a_refused_field_too() -> None:
    async with FaultyServer(Behavior(reject_fields=("ignore_eos",))) as srv:
        events: list[Event] = []
        result = await check_phase(events.append, srv.url, None, requests=3, max_tokens=4, input_len=16,
                                   endpoint="completions", model="m", margin_pct=10, ttft_margin_pct=50,
                                   cancel=asyncio.Event())
        assert "ignore_eos" not in srv.stats.bodies[-1]
    assert result.requests == 3 and result.failed == 0 and result.tok_s is not None
    assert [e.fields for e in dropped_events(events)] == [["ignore_eos"]]


async def test_ignore_eos_off_sends_none_and_finds_nothing_to_drop() -> None:
    async with FaultyServer(Behavior(reject_fields=("ignore_eos",))) as srv:
        events: list[Event] = []
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[1], requests=2, max_tokens=3, warmup=0,
                          ignore_eos=False)
        await run_sweep(cfg, events.append)
        assert all("ignore_eos" not in b for b in srv.stats.bodies)
    assert not dropped_events(events)


def test_ignore_eos_is_a_key_of_the_campaign_and_a_field_of_the_dialog() -> None:
    import tomllib

    example = parse_config(tomllib.loads(INIT_TEXT))
    assert example.macro.ignore_eos is True and example.macro.macro_config("http://x").ignore_eos is True
    assert re.search(r"^ignore_eos = true", INIT_TEXT, re.MULTILINE)
    data = tomllib.loads(INIT_TEXT)
    data["macro"]["ignore_eos"] = False
    assert parse_config(data).macro.macro_config("http://x").ignore_eos is False
    assert form_defaults("http://x")["ignore-eos"] == "yes"
    cfg = parse_form({**form_defaults("http://x"), "ignore-eos": "no"})
    assert cfg.ignore_eos is False and form_defaults("http://x", cfg)["ignore-eos"] == "no"


def test_the_dialog_takes_goodput_slos_and_keeps_them_for_the_next_sweep() -> None:
    assert form_defaults("http://x")["goodput"] == "" and parse_form(form_defaults("http://x")).slo.ttft_ms is None
    cfg = parse_form({**form_defaults("http://x"), "goodput": "ttft:200, tpot:50"})
    assert (cfg.slo.ttft_ms, cfg.slo.tpot_ms, cfg.slo.e2el_ms) == (200.0, 50.0, None)
    assert form_defaults("http://x", cfg)["goodput"] == "ttft:200,tpot:50"
    with pytest.raises(ConfigError, match="goodput takes ttft:MS"):
        parse_form({**form_defaults("http://x"), "goodput": "ttft=200"})


# -- TTFT at the first token ---------------------------------------------------------------------------------
@pytest.mark.parametrize("client", ["lean", "httpx"])
async def test_ttft_waits_for_the_first_token_not_the_role_chunk(client: str) -> None:
    b = Behavior(role_chunk=True, role_gap_s=ROLE_GAP_S, interval_s=0.001)
    async with FaultyServer(b) as srv:
        cfg = MacroConfig(url=srv.url, model="m", endpoint="chat", concurrency=[1], requests=2, max_tokens=3,
                          warmup=0, client=client)
        result = await run_sweep(cfg, lambda e: None)
    level = result.levels[0]
    assert level.metrics["completed"] == 2 and level.metrics["mean_ttft_ms"] >= ROLE_GAP_S * 1000
    for r in level.records:
        assert len(r.chunk_ms) == 3  # the 3 tokens, not the role chunk
        # TTFT is the first token's (at or after the server's hold: causal); the role chunk, read before it,
        # is kept apart (when a busy machine reads both at once they are one arrival: no role chunk time)
        assert r.ttft_ms >= ROLE_GAP_S * 1000 and (r.first_ms is None or r.first_ms < r.ttft_ms)
        assert rec.RequestRecord.from_json(r.to_json()) == r


@pytest.mark.parametrize("client", ["lean", "httpx"])
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
async def test_a_content_free_finish_chunk_without_done_is_no_inter_token_gap(client: str, endpoint: str) -> None:
    b = Behavior(finish_chunk=True, done=False, final_delay_s=ROLE_GAP_S)
    async with FaultyServer(b) as srv:
        cfg = MacroConfig(url=srv.url, model="m", endpoint=endpoint, concurrency=[1], requests=2,  # type: ignore[arg-type]
                          max_tokens=5, warmup=0, client=client)
        result = await run_sweep(cfg, lambda e: None)
    level = result.levels[0]
    m = level.metrics
    assert m["completed"] == 2 and m["total_output_tokens"] == 10 and m["usage_missing"] == 0
    for r in level.records:
        assert len(r.chunk_ms) == 5 and r.first_ms is None  # 5 tokens: the finish chunk is not one
        # E2EL at the last token, the end at the finish chunk after the server's hold: in that order, the end
        # at least the hold after the first token was sent (causal)
        assert r.e2el_ms == r.chunk_ms[-1] <= r.end_ms and r.end_ms >= ROLE_GAP_S * 1000


def test_build_keeps_the_role_chunk_apart_from_the_first_token() -> None:
    """The record of a request: TTFT and E2EL at the first and last token; a chunk with a choice but no token
    read before the first token (a role chunk) is kept as first_ms, and none when it came with the token."""
    role_first = RequestOutcome(t0=10.0, end=10.9, success=True, times=[10.4, 10.5, 10.6], first_chunk=10.1,
                                output_tokens=3)
    together = RequestOutcome(t0=20.0, end=20.9, success=True, times=[20.4, 20.5], first_chunk=20.4,
                              output_tokens=2)
    a, b = rec.build([rec.Sent(role_first, None, 3), rec.Sent(together, None, 2)], origin=10.0)
    assert (a.first_ms, a.ttft_ms, a.e2el_ms, a.end_ms) == (100.0, 400.0, 600.0, 900.0)
    assert (b.first_ms, b.ttft_ms, b.e2el_ms) == (None, 400.0, 500.0)
    assert rec.RequestRecord.from_json(a.to_json()) == a and a.to_json()["first_ms"] == 100.0


def _account(chat: bool, events: list[dict[str, object] | str]) -> RequestOutcome:
    out = RequestOutcome(t0=0.0)
    account = StreamAccount(out, chat)
    for i, obj in enumerate(events, 1):
        payload = obj if isinstance(obj, str) else json.dumps(obj)
        account.feed(f"data: {payload}\n\n".encode(), float(i))
    account.finish()
    return out


def test_what_carries_a_token() -> None:
    def delta(**d: object) -> dict[str, object]:
        return {"choices": [{"index": 0, "delta": d, "finish_reason": None}]}

    out = _account(True, [delta(role="assistant"), delta(reasoning_content="hm"), delta(content="a"),
                          delta(tool_calls=[{"index": 0, "function": {"name": "f"}}]), delta(reasoning="r"),
                          delta(content=""), {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                                              "usage": {"completion_tokens": 4, "prompt_tokens": 2}}])
    assert out.times == [2.0, 3.0, 4.0, 5.0] and out.first_chunk == 1.0 and out.ttft == 2.0
    assert out.output_tokens == 4 and out.latency == 5.0
    # vLLM: a role chunk with empty content, then the tokens: TTFT at the first content
    vllm = _account(True, [delta(role="assistant", content=""), delta(content="a"), delta(content="b"), "[DONE]"])
    assert vllm.times == [2.0, 3.0] and vllm.first_chunk == 1.0
    # an output that is only its end: timed by its choice chunks, as before
    eos = _account(False, [{"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}, "[DONE]"])
    assert eos.times == [1.0] and eos.ttft == 1.0


async def test_cancel_during_the_field_check_ends_the_sweep() -> None:
    """A server that stalls the check's request: cancel ends the sweep, well before the read timeout."""
    async with FaultyServer(Behavior(mode="stall", fail_after=0)) as srv:
        cancel = asyncio.Event()
        cfg = MacroConfig(url=srv.url, model="m", concurrency=[1], requests=2, max_tokens=3, warmup=0)
        cfg.timeouts.read_s = cfg.timeouts.total_s = 600.0
        sweep = asyncio.ensure_future(run_sweep(cfg, lambda e: None, cancel=cancel))
        await until(lambda: srv.stats.requests >= 1, "the check's request at the server")
        assert srv.stats.requests == 1
        cancel.set()
        result = await asyncio.wait_for(sweep, 60)
    assert result.cancelled and not result.levels and result.fields_dropped == ()
