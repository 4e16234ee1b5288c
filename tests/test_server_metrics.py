"""The server's own accounting beside the client's: a real streaming server (``FaultyServer``) whose requests
are observed into a real ``prometheus_client`` registry (vLLM's names), served by prometheus_client's own
HTTP exposition; the sweep reads it, publishes its gauges, and reports per level the server's means from
the histograms' deltas next to the client's. SGLang's names, the drain on the same table, a 404."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server

from kimitui.bench.macro import MacroConfig, run_sweep
from kimitui.cleanup.drain import parse_in_flight
from kimitui.core.describe import describe
from kimitui.core.events import Event, LogLine, MacroPoint, ServerSample, decode, encode
from kimitui.core.server_metrics import parse_snapshot
from kimitui.core.state import SessionState, fold
from kimitui.report.bench import macro_section
from tests.faulty_server import Behavior, FaultyServer
from tests.waiting import pilot_until

TTFT_S, ITL_S, E2E_S, QUEUE_S = 0.030, 0.004, 0.050, 0.002
"""What the server observes for each measured request (the calibration's one-token requests observe
CALIBRATION_S for all four: a level whose delta took them in would show it). The stream keeps the same
schedule (first token at TTFT_S, one every ITL_S), so the client's figures cannot be below them."""
CALIBRATION_S = 1.0
KV = 0.25


@dataclass
class VllmRegistry:
    registry: CollectorRegistry
    ttft: Histogram
    itl: Histogram
    e2e: Histogram
    queue: Histogram
    running: Gauge

    @classmethod
    def make(cls) -> VllmRegistry:
        reg = CollectorRegistry()
        labels = ["model_name", "engine"]
        hist = {name: Histogram(f"vllm:{name}", name, labels, registry=reg) for name in (
            "time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds",
            "request_queue_time_seconds")}
        running = Gauge("vllm:num_requests_running", "running", labels, registry=reg)
        Gauge("vllm:num_requests_waiting", "waiting", labels, registry=reg).labels("m", "0").set(0)
        Gauge("vllm:kv_cache_usage_perc", "kv", labels, registry=reg).labels("m", "0").set(KV)
        Counter("vllm:num_preemptions", "preemptions", labels, registry=reg).labels("m", "0").inc(3)
        Histogram("vllm:time_per_output_token_seconds", "deprecated", labels, registry=reg).labels("m", "0").observe(9)
        h = [hist[n].labels("m", "0") for n in hist]
        return cls(reg, *h, running=running)

    def observe(self, max_tokens: int, e2e: bool = True) -> None:
        if max_tokens <= 1:
            for h in (self.ttft, self.queue, *([self.e2e] if e2e else [])):
                h.observe(CALIBRATION_S)
            return
        self.ttft.observe(TTFT_S)
        for _ in range(max_tokens - 1):
            self.itl.observe(ITL_S)
        if e2e:
            self.e2e.observe(E2E_S)
        self.queue.observe(QUEUE_S)


class MeteredServer(FaultyServer):
    """The faulty server's stream, each completion observed into the registry as it is read; with
    ``late_e2e_s``, a measured request's e2e only that long after its response has ended (as an engine
    that records a request's stats after sending its last chunk)."""

    def __init__(self, metrics: VllmRegistry, behavior: Behavior, late_e2e_s: float | None = None) -> None:
        super().__init__(behavior)
        self.metrics, self.late_e2e_s = metrics, late_e2e_s
        self.late: set[asyncio.Task[None]] = set()
        metrics.running.labels("m", "0").set_function(lambda: self.stats.active)

    async def _handle(self, method: str, path: str, raw: bytes, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> bool:
        if not (method == "POST" and path.endswith("completions")):
            return await super()._handle(method, path, raw, reader, writer)
        max_tokens = int(json.loads(raw or b"{}").get("max_tokens") or 16)
        late = self.late_e2e_s is not None and max_tokens > 1  # the calibration's requests: at once
        self.metrics.observe(max_tokens, e2e=not late)
        try:
            return await super()._handle(method, path, raw, reader, writer)
        finally:
            if late and self.late_e2e_s is not None:
                task = asyncio.create_task(self._observe_e2e_later(max_tokens, self.late_e2e_s))
                self.late.add(task)
                task.add_done_callback(self.late.discard)

    async def _observe_e2e_later(self, max_tokens: int, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        self.metrics.e2e.observe(CALIBRATION_S if max_tokens <= 1 else E2E_S)


@pytest.fixture
def vllm_metrics() -> Iterator[tuple[VllmRegistry, str]]:
    metrics = VllmRegistry.make()
    server, thread = start_http_server(0, addr="127.0.0.1", registry=metrics.registry)
    try:
        yield metrics, f"http://127.0.0.1:{server.server_port}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


async def test_per_level_server_means_are_the_observed_ones(vllm_metrics: tuple[VllmRegistry, str]) -> None:
    metrics, metrics_url = vllm_metrics
    events: list[Event] = []
    async with MeteredServer(metrics, Behavior(first_delay_s=TTFT_S, interval_s=ITL_S)) as srv:
        cfg = MacroConfig(url=srv.url, model="fake-model", concurrency=[1, 3], requests=6, warmup=0,
                          max_tokens=8, metrics_url=metrics_url, scrape_s=0.05)
        result = await run_sweep(cfg, events.append)
    for level in result.levels:
        m = level.metrics
        assert m["completed"] == 6 and m["server_engine"] == "vllm"
        assert m["server_requests"] == 6  # the level's own requests: not the calibration's before it
        assert m["server_mean_ttft_ms"] == pytest.approx(TTFT_S * 1000)
        assert m["server_mean_itl_ms"] == pytest.approx(ITL_S * 1000)
        assert m["server_mean_e2e_ms"] == pytest.approx(E2E_S * 1000)
        assert m["server_mean_queue_ms"] == pytest.approx(QUEUE_S * 1000)
        assert m["overhead_ttft_ms"] == pytest.approx(m["mean_ttft_ms"] - TTFT_S * 1000)
        assert m["overhead_itl_ms"] == pytest.approx(m["mean_itl_ms"] - ITL_S * 1000)
        assert m["overhead_ttft_ms"] >= 0 and m["overhead_e2e_ms"] >= 0  # nothing arrives before it is sent
        assert "server_mean_ttft_ms" in json.loads(result.to_json())["levels"][0]
    samples = [e for e in events if isinstance(e, ServerSample)]
    assert {s.level_index for s in samples} == {0, 1}  # each level's marks at least
    assert all(s.engine == "vllm" and s.kv_cache == KV and s.preemptions == 3 for s in samples)
    assert all(decode(encode(s)) == s for s in samples)  # into a run file and back
    assert not [e for e in events if isinstance(e, LogLine) and "server metrics not read" in e.message]
    point = next(e for e in events if isinstance(e, MacroPoint))
    assert "server vllm: TTFT 30.0 ms (client +" in (describe(point) or "")

    state = SessionState()
    for ev in events:
        fold(state, ev)
    report = macro_section(state)
    head = next(i for i, line in enumerate(report) if line.startswith("| concurrency | server requests |"))
    assert "TTFT server | TTFT overhead" in report[head]
    rows = [line.split(" | ") for line in report[head + 2:head + 4]]
    assert [r[1] for r in rows] == ["6", "6"] and all(r[3] == "30.0" and r[6] == "4.0" for r in rows)


async def test_the_level_end_waits_for_the_server_to_count_its_last_requests(
        vllm_metrics: tuple[VllmRegistry, str]) -> None:
    """The server observes each e2e 0.3 s after the response ended: the level's end is read again until
    the server counts every request the client saw complete (bounded by CATCH_UP_S, 2 s)."""
    metrics, metrics_url = vllm_metrics
    async with MeteredServer(metrics, Behavior(n_tokens=2), late_e2e_s=0.3) as srv:
        cfg = MacroConfig(url=srv.url, model="fake-model", concurrency=[2], requests=4, warmup=0, max_tokens=2,
                          metrics_url=metrics_url, scrape_s=0.05)
        result = await run_sweep(cfg, lambda _ev: None)
        await asyncio.gather(*srv.late)
    m = result.levels[0].metrics
    assert m["completed"] == 4 and m["server_requests"] == 4
    assert m["server_mean_e2e_ms"] == pytest.approx(E2E_S * 1000)


async def test_a_server_without_metrics_is_said_once() -> None:
    events: list[Event] = []
    async with FaultyServer(Behavior()) as srv:
        cfg = MacroConfig(url=srv.url, model="fake-model", concurrency=[1, 2], requests=2, warmup=0,
                          max_tokens=4, scrape_s=0.05)
        result = await run_sweep(cfg, events.append)
    said = [e.message for e in events if isinstance(e, LogLine) and "server metrics" in e.message]
    assert len(said) == 1 and "HTTP 404" in said[0] and said[0].startswith("no server metrics")
    assert next(e for e in events if isinstance(e, LogLine) and e.message == said[0]).level == "warning"
    assert not [e for e in events if isinstance(e, ServerSample)]
    assert [lv.metrics["completed"] for lv in result.levels] == [2, 2]
    assert not any(k.startswith("server_") for lv in result.levels for k in lv.metrics)


def _sglang_page() -> str:
    reg = CollectorRegistry()
    labels = ["model_name"]
    Gauge("sglang:num_running_reqs", "r", labels, registry=reg).labels("m").set(5)
    Gauge("sglang:num_queue_reqs", "q", labels, registry=reg).labels("m").set(2)
    Gauge("sglang:token_usage", "kv", labels, registry=reg).labels("m").set(0.5)
    ttft = Histogram("sglang:time_to_first_token_seconds", "ttft", labels, registry=reg).labels("m")
    for v in (0.1, 0.3):
        ttft.observe(v)
    return generate_latest(reg).decode()


def test_sglang_names_are_read_and_drained() -> None:
    snap = parse_snapshot(_sglang_page())
    assert (snap.engine, snap.running, snap.waiting, snap.kv_cache) == ("sglang", 5, 2, 0.5)
    assert snap.histograms["ttft"] == pytest.approx((0.4, 2))
    got = parse_in_flight(_sglang_page())  # the drain reads the same table
    assert (got.running, got.waiting) == (5, 2)


def test_the_deprecated_tpot_histogram_is_not_the_itl() -> None:
    page = ("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"
            "# TYPE vllm:time_per_output_token_seconds histogram\n"
            "vllm:time_per_output_token_seconds_sum 9\nvllm:time_per_output_token_seconds_count 1\n")
    assert parse_snapshot(page).histograms == {}


async def test_the_benchmarks_tab_plots_the_servers_gauges_through_the_sweep() -> None:
    from pathlib import Path

    from textual.app import App, ComposeResult

    from kimitui.tui.views.macro_view import BenchView

    class BenchApp(App[None]):
        CSS_PATH = str(Path(__file__).resolve().parent.parent / "kimitui" / "tui" / "app.tcss")

        def compose(self) -> ComposeResult:
            yield BenchView(id="bench")

    state = SessionState()
    fold(state, MacroPoint(t=100.0, concurrency=1, metrics={"completed": 1, "output_throughput": 10.0}))
    app = BenchApp()
    async with app.run_test(size=(120, 60)) as pilot:
        view = app.query_one(BenchView)
        view.show(state)
        await pilot.pause()
        assert not view.query_one("#server-plots").display  # nothing read: no empty plots
        for k, (running, waiting) in enumerate([(1, 0), (4, 2), (3, None)]):
            fold(state, ServerSample(t=100.0 + k * 0.2, engine="vllm", running=running, waiting=waiting,
                                     kv_cache=0.1 * k))
        view.show(state)
        await pilot_until(pilot, lambda: view.query_one("#server-plots").display, "the server plots shown")
        requests, kv = view.plotted_server["server-requests"], view.plotted_server["server-kv"]
        assert [v for _, v in requests[0]] == [1, 4, 3] and [v for _, v in requests[1]] == [0, 2]
        assert [round(t, 6) for t, _ in requests[0]] == [0, 0.2, 0.4]
        assert [round(v, 6) for _, v in kv[0]] == [0, 10, 20]


def test_phase_3_checks_each_decode_step_against_the_servers_itl() -> None:
    from kimitui.phases.analysis import decode_budget

    state = SessionState()
    fold(state, MacroPoint(t=1.0, concurrency=4, metrics={"completed": 8, "output_throughput": 400.0,
                                                          "median_tpot_ms": 10.0, "server_mean_itl_ms": 9.25}))
    fold(state, MacroPoint(t=2.0, concurrency=8, metrics={"completed": 8, "output_throughput": 700.0,
                                                          "median_tpot_ms": 11.0}))
    rows = {r.m: r for r in decode_budget(state).rows}
    assert "the server's own ITL 9.25 ms against a TPOT of 10.00 ms (+0.75 ms" in " ".join(rows[4].notes)
    assert not any("server's own ITL" in n for n in rows[8].notes)  # no metrics read: nothing claimed


def test_the_cli_refuses_a_bad_scrape_interval_or_metrics_url(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from kimitui.commands.bench import add_parser, cmd_bench

    parser = argparse.ArgumentParser(prog="kimitui")
    add_parser(parser.add_subparsers(dest="command"))
    for argv, message in [(["--scrape-interval", "0.01"], "must be 0 (off) or 0.05 to 60 s"),
                          (["--metrics-url", "http://[::1/metrics"], "is not a valid URL")]:
        args = parser.parse_args(["bench", "macro", "--url", "http://127.0.0.1:9", "--model", "m", *argv])
        assert cmd_bench(args) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("kimitui bench macro: ") and message in err and "Traceback" not in err, err


async def test_on_the_simulator_the_server_figures_are_the_clients_less_the_overhead() -> None:
    """The simulator's own vLLM histograms: every request the client completed is counted there, and the
    client's TTFT and e2e are the server's plus an overhead that cannot be negative (the server's clock
    starts after the request left the client and stops before the chunk reaches it)."""
    from kimitui.hosts.sim.batching import BatchingModel
    from kimitui.hosts.sim.openai_server import SimOpenAIServer

    async with SimOpenAIServer(batching=BatchingModel(base_s=0.005, per_seq_s=0.0, max_batch=8)) as srv:
        cfg = MacroConfig(url=srv.url, concurrency=[1, 4], requests=8, max_tokens=8, scrape_s=0.1)
        result = await run_sweep(cfg, lambda _ev: None)
    for level in result.levels:
        m = level.metrics
        assert m["server_engine"] == "vllm" and m["server_requests"] == m["completed"] == 8
        assert m["overhead_ttft_ms"] >= 0 and m["overhead_e2e_ms"] >= 0, m
        assert m["server_mean_itl_ms"] > 0 and m["server_mean_queue_ms"] >= 0
