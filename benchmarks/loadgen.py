"""The load generator's own ceiling on this machine (issue 5, item 7).

1. Output tok/s it can measure at concurrency 64 and 256 against servers that stream with no delay,
   each in a separate process (so the server does not run on the client's event loop; it still shares
   the machine's cores, and on a 2-core machine that matters: say so when reporting):
     sim     the simulated vLLM server, ``--instant``: one token per SSE event, but up to 256 events in
             one HTTP chunk (one write), so the client's HTTP stack (h11) sees few chunks
     burst   tests/faulty_server.py writing each whole response at once, one SSE event per HTTP chunk
             and one token per event: how vLLM (uvicorn) frames a stream; the realistic worst case
     burst4  the same with 4 tokens per event (vLLM ``--stream-interval 4``; tokens counted via usage)
2. The latency the client adds per chunk: ITL p99 measured at concurrency 64 against a server that sends
   a chunk every ``--interval`` ms, minus that interval (the server's own timer jitter is included, so
   this is an upper bound of what the client adds).
3. Where a chunk's CPU goes on the client: SSE split + JSON decode alone, in-process.
4. The floor of figure 2 on this machine: the same stamped server read by a bare asyncio Protocol that
   does nothing but find the stamps (no HTTP parsing, no JSON, no accounting). What is left between this
   floor and a client's figure is that client's own cost; the floor itself is the event loop, the
   syscalls and the machine (CPU steal, other load).
5. The per-request records (issue 14): while requests stream, the client only appends each chunk's
   arrival time; the records, the level's summary and the run-file events are built when the level ends.
   Their cost per chunk at that moment, and the run file's bytes per chunk.

6. The cost of reading the server's own accounting (issue 19): the lean client's c=256 ceiling against the
   simulated server (which serves vLLM's histograms) with its /metrics read every 200 ms during the level, as
   a sweep does by default, beside the same level with no reads; runs alternate off/on, the best of each kept.
   Target: the ceiling with the reads within 10% of the one without.

Each throughput line also gives the client process's CPU per chunk (its CPU time over the chunks of the
sweep, warm-up and length calibration included): steadier than tok/s on a machine shared with others.

Every figure is measured for each HTTP client (``--clients lean,httpx,aiohttp``): ``lean`` is the load generator's
default (kimitui/bench/macro/http_stream.py), ``httpx`` its fallback, ``aiohttp`` the library it is held against
(kimitui/bench/macro/aiohttp_stream.py: the same accounting; the hand-written client stays only while it is at
least 2x cheaper in CPU per chunk).

Targets: >= 50,000 tok/s at c=256; added ITL <= 1 ms p99 at c=64.
Run: ``.venv/bin/python benchmarks/loadgen.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kimitui.bench.macro import MacroConfig, run_sweep  # noqa: E402
from kimitui.bench.macro.sse import SSEDecoder  # noqa: E402
from kimitui.core.events import ServerSample  # noqa: E402

TARGET_TOK_S = 50_000.0
TARGET_ADDED_ITL_MS = 1.0
TARGET_SCRAPE_RATIO = 0.9
SCRAPE_S = 0.2


@contextlib.contextmanager
def server(kind: str, interval_s: float = 0.0) -> Iterator[str]:
    """Start a zero-delay (or fixed-interval) server in its own process; yield its URL."""
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        if kind == "sim":
            port_file = Path(tmp) / "port"
            cmd = [py, "-m", "kimitui.hosts.sim.openai_server", "--instant", "--port-file", str(port_file)]
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)
            deadline = time.monotonic() + 20
            while not (port_file.exists() and port_file.read_text().strip()):
                if time.monotonic() > deadline or proc.poll() is not None:
                    proc.kill()
                    raise RuntimeError("the simulated server did not start")
                time.sleep(0.05)
            port = int(port_file.read_text())
        else:
            args = ["--interval", str(interval_s)]
            if kind.startswith("burst"):
                args += ["--burst", "--tokens-per-chunk", kind[5:] or "1"]
            if kind == "stamped":
                args += ["--stamp"]
            proc = subprocess.Popen([py, str(ROOT / "tests" / "faulty_server.py"), *args], cwd=ROOT,
                                    stdout=subprocess.PIPE, text=True)
            assert proc.stdout is not None
            port = int(proc.stdout.readline().split()[1])
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)


async def level(url: str, c: int, requests: int, max_tokens: int, client: str = "lean",
                model: str | None = None, scrape_s: float = 0.0) -> dict:
    """One measured level; SCRAPE_S > 0 reads the server's /metrics that often through it (as a sweep does by
    default), 0 leaves the server's accounting alone (the client's ceiling alone)."""
    cfg = MacroConfig(url=url, model=model, concurrency=[c], requests=requests, max_tokens=max_tokens,
                      input_len=16, warmup=c, client=client, scrape_s=scrape_s)  # type: ignore[arg-type]
    cpu = time.process_time()
    reads = [0]

    def publish(event: object) -> None:
        if isinstance(event, ServerSample):
            reads[0] += 1

    result = await run_sweep(cfg, publish)
    m = dict(result.levels[0].metrics)
    m["server_reads"] = reads[0]
    m["sweep_cpu_s"] = time.process_time() - cpu
    return m


def records_cost(requests: int = 1024, chunks: int = 256) -> tuple[float, float]:
    """(µs per chunk, run-file bytes per chunk) of building a level's records, its summary and its
    MacroRequests events from finished requests (what happens once, when a level ends)."""
    from kimitui.bench.macro import records
    from kimitui.bench.macro.metrics import LevelContext, summarize
    from kimitui.bench.macro.request import RequestOutcome
    from kimitui.core.events import encode

    sent = []
    for i in range(requests):
        t0 = 1000.0 + i * 0.01
        times = [t0 + 0.05 + k * 0.0201 for k in range(chunks)]
        out = RequestOutcome(t0=t0, end=times[-1] + 0.001, success=True, ttft=0.05, latency=times[-1] - t0,
                             times=times, output_tokens=chunks, prompt_tokens=128, prompt_from_usage=True)
        sent.append(records.Sent(out, 128, chunks))
    t = time.perf_counter()
    recs = records.build(sent, 1000.0)
    summarize(recs, LevelContext(concurrency=64))
    lines = [encode(ev) for ev in records.events(recs, t=time.time(), concurrency=64, level_index=0, origin=0.0)]
    elapsed = time.perf_counter() - t
    n = requests * chunks
    return elapsed / n * 1e6, sum(len(x) + 1 for x in lines) / n


def stamped_timings(url: str, c: int, requests: int, max_tokens: int,
                    client: str = "lean") -> tuple[list[float], list[float]]:
    """Per chunk, at concurrency c: the one-way delay (server write -> the client's parser) and the ITL the
    client adds (its gap between two chunks of one stream minus the server's gap between writing them).

    The stamped server writes "sent": perf_counter() into every chunk; perf_counter is CLOCK_MONOTONIC,
    one clock for every process on Linux. The decoder the load generator uses is wrapped (measurement
    only) to note when each payload reaches it. The added ITL is what the issue's target is about: the
    distortion of the ITL the client reports, free of the server's own timer jitter. The one-way delay
    also holds the queueing of 64 chunks written at one instant (as a real server's decode step does).
    """
    from kimitui.bench.macro import request as request_mod

    delays: list[float] = []
    added_itl: list[float] = []
    base = request_mod.SSEDecoder

    class Timed(base):  # type: ignore[misc, valid-type]
        last: tuple[float, float] | None = None

        def feed(self, block: bytes) -> list[bytes]:
            now = time.perf_counter()
            payloads = super().feed(block)
            for p in payloads:
                at = p.find(b'"sent":')
                if at >= 0:
                    sent = float(p[at + 7:].split(b"}", 1)[0].split(b",", 1)[0])
                    delays.append(now - sent)
                    if self.last is not None:
                        added_itl.append(abs((now - self.last[0]) - (sent - self.last[1])))
                    self.last = (now, sent)
            return payloads

    request_mod.SSEDecoder = Timed  # type: ignore[misc]
    try:
        asyncio.run(level(url, c, requests, max_tokens, client))
    finally:
        request_mod.SSEDecoder = base  # type: ignore[misc]
    return delays, added_itl


def _med_p99_ms(values: list[float]) -> tuple[float, float]:
    s = sorted(values)
    return s[len(s) // 2] * 1e3, s[min(len(s) - 1, int(0.99 * len(s)))] * 1e3


def bare_floor_delays(url: str, c: int, requests_per_conn: int, max_tokens: int) -> list[float]:
    """One-way delays seen by a do-nothing asyncio Protocol client (c connections, same server)."""
    delays: list[float] = []
    host, port = url.rsplit("/", 1)[1].rsplit(":", 1)

    class Bare(asyncio.Protocol):
        def __init__(self, done: asyncio.Future[None]) -> None:
            self.done = done

        def data_received(self, data: bytes) -> None:
            now = time.perf_counter()
            i = data.find(b'"sent": ')
            while i >= 0:
                j = data.find(b"}", i)
                delays.append(now - float(data[i + 8:j].split(b",", 1)[0]))
                i = data.find(b'"sent": ', j)
            if data.endswith(b"0\r\n\r\n") and not self.done.done():
                self.done.set_result(None)

    body = json.dumps({"model": "m", "prompt": "x", "max_tokens": max_tokens, "stream": True}).encode()
    req = b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        host.encode(), len(body), body)

    async def one() -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        proto = Bare(done)
        transport, _ = await loop.create_connection(lambda: proto, host, int(port))
        for _ in range(requests_per_conn):
            transport.write(req)
            await done
            proto.done = done = loop.create_future()
        transport.close()

    async def run() -> None:
        await asyncio.gather(*(one() for _ in range(c)))

    asyncio.run(run())
    return delays


def parse_cost_us(n: int = 100_000) -> float:
    """µs of client CPU per chunk for SSE splitting + JSON decoding (no HTTP)."""
    event = (b'data: {"id":"cmpl-sim00000001","object":"text_completion","created":1700000000,'
             b'"model":"moonshotai/Kimi-K2.5","choices":[{"index":0,"text":" tok","logprobs":null,'
             b'"finish_reason":null}]}\n\n')
    blob = event * 64
    loads = json.loads
    t = time.perf_counter()
    for _ in range(n // 64):
        dec = SSEDecoder()
        for payload in dec.feed(blob):
            obj = loads(payload)
            if obj.get("choices"):
                obj["choices"][0].get("text")
    return (time.perf_counter() - t) / (n // 64 * 64) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer requests (noisier)")
    ap.add_argument("--interval", type=float, default=10.0, help="chunk interval for the ITL test, ms")
    ap.add_argument("--servers", default="sim,burst,burst4")
    ap.add_argument("--clients", default="lean,httpx,aiohttp", help="HTTP clients to measure (lean, httpx, aiohttp)")
    a = ap.parse_args()
    waves = 2 if a.quick else 4
    max_tokens = 256
    clients = a.clients.split(",")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} "
          "(servers run in their own process but share these cores)")
    print(f"client parse cost (SSE split + json.loads): {parse_cost_us():.2f} µs/chunk")
    rows = []
    for kind in a.servers.split(","):
        with server(kind) as url:
            for client in clients:
                for c in (64, 256):
                    m = asyncio.run(level(url, c, c * waves, max_tokens, client))
                    chunks = m["total_output_tokens"] / (4 if kind == "burst4" else 1)
                    rows.append((client, kind, c, m["output_throughput"]))
                    cpu_us = m["sweep_cpu_s"] / (2 * chunks) * 1e6  # the warm-up streamed as many again
                    print(f"  {client:5} {kind:7} c={c:<4} {m['output_throughput']:>9,.0f} tok/s  "
                          f"{chunks / m['duration']:>9,.0f} chunks/s  client CPU {cpu_us:5.2f} µs/chunk  "
                          f"failed {m['failed']}  reached {m['concurrency_reached']}", flush=True)
    scrape: tuple[float, float] | None = None
    if "lean" in clients and "sim" in a.servers.split(","):
        best = {0.0: 0.0, SCRAPE_S: 0.0}
        reads = 0
        with server("sim") as url:
            for _ in range(1 if a.quick else 2):
                for scrape_s in best:
                    m = asyncio.run(level(url, 256, 256 * waves * 4, max_tokens, "lean", scrape_s=scrape_s))
                    best[scrape_s] = max(best[scrape_s], m["output_throughput"])
                    reads = max(reads, m["server_reads"]) if scrape_s else reads
        scrape = (best[0.0], best[SCRAPE_S])
        print(f"  lean  sim     c=256 server /metrics read every {SCRAPE_S * 1000:.0f} ms: {scrape[1]:>9,.0f} tok/s, "
              f"not read: {scrape[0]:>9,.0f} tok/s (ratio {scrape[1] / scrape[0]:.3f}; {reads} reads in a level)",
              flush=True)
    interval = a.interval / 1000
    added: dict[str, tuple[float, float]] = {}
    for client in clients:
        with server("interval", interval) as url:
            m = asyncio.run(level(url, 64, 64 * (2 if a.quick else 3), 64, client))
        print(f"  {client:5} interval {a.interval:g} ms, c=64: ITL median {m['median_itl_ms']:.3f} ms, "
              f"p99 {m['p99_itl_ms']:.3f} ms, failed {m['failed']} (includes the server's own timer jitter)")
        with server("stamped", interval) as url:
            delays, itl = stamped_timings(url, 64, 64 * (2 if a.quick else 3), 64, client)
        added[client] = _med_p99_ms(itl)
        one_way = _med_p99_ms(delays)
        print(f"  {client:5} stamped chunks at c=64: added ITL median {added[client][0]:.3f} ms, p99 "
              f"{added[client][1]:.3f} ms; one-way delay server write -> client parser median {one_way[0]:.3f} ms, "
              f"p99 {one_way[1]:.3f} ms over {len(delays):,} chunks", flush=True)
    with server("stamped", interval) as url:
        floor = sorted(bare_floor_delays(url, 64, 2 if a.quick else 3, 64))
    floor_ms = _med_p99_ms(floor)
    print(f"  floor: a bare asyncio Protocol reading the same stamped server: one-way delay median "
          f"{floor_ms[0]:.3f} ms, p99 {floor_ms[1]:.3f} ms")
    cost_us, size = records_cost()
    print(f"  records at the level's end (1,024 requests of 256 chunks): {cost_us:.2f} µs/chunk to build records, "
          f"summary and events; {size:.1f} run-file bytes/chunk")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    print()
    print(f"{'figure':56} {'measured':>12} {'target':>12}  verdict")
    for client, kind, c, tok_s in rows:
        target = f">= {TARGET_TOK_S:,.0f}" if c == 256 else "-"
        verdict = ("PASS" if tok_s >= TARGET_TOK_S else "MISS") if c == 256 else ""
        print(f"{f'{client}: output tok/s, c={c}, {kind} server':56} {tok_s:>12,.0f} {target:>12}  {verdict}")
    if scrape is not None:
        ratio = scrape[1] / scrape[0]
        print(f"{'lean: c=256 ceiling with /metrics read / without':56} {ratio:>12.3f} "
              f"{f'>= {TARGET_SCRAPE_RATIO:g}':>12}  {'PASS' if ratio >= TARGET_SCRAPE_RATIO else 'MISS'}")
    for client, (med, p99) in added.items():
        print(f"{f'{client}: added ITL p99 at c=64 (ms)'[:56]:56} {p99:>12.3f} "
              f"{f'<= {TARGET_ADDED_ITL_MS:g}':>12}  {'PASS' if p99 <= TARGET_ADDED_ITL_MS else 'MISS'}")
        print(f"{f'{client}: added ITL median at c=64 (ms)'[:56]:56} {med:>12.3f} {'-':>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
