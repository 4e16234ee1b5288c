"""Speed and CPU figures that tests used to assert under load (issue 31): python benchmarks/timing_figures.py
[--only NAME ...]

The tests now hold the order of events, the state reached and the counts the code keeps; how fast or how
cheaply this machine does it is printed here, next to what the model or the design says. Take the figures
with nothing else running (on a busy 2-core box they are the scheduler's, not the code's).

Figures (each a function registered in FIGURES; add yours the same way):
  sim-steps      the simulated decode loop (kimitui/hosts/sim/batching.py) at 1, 128 and 256 streams: tok/s
                 against the model's, and the batching gain (model: 30.7x at 128, the plateau beyond); the
                 wait for a first token behind a 10- and a 1,000-token prompt (model: 80x apart).
                 Was tests/test_sim_batching.py's ratios.
  sim-http       the simulated OpenAI server over HTTP: one stream against 16 (model: 10.8x), and the instant
                 mode's tok/s to 8 clients against the stepped reference model's ceiling.
                 Was tests/test_sim_openai.py's ratios.
  sweep-curve    ``kimitui bench macro --host demo`` (a subprocess, the simulated host): output tok/s per
                 level, each doubling's gain (model: 1.9x) and the knee the verdict finds (model: c=128 for
                 the reference host; a run stops at 16, so none, or where this machine flattens it).
                 Was tests/test_macro_cli.py's and tests/test_macro_verdict.py's curve.
  ttft-prompt    TTFT of a 16- and a 2,048-token prompt on a simulated server that prefills 8,000 tok/s
                 (model: 3 ms against 257 ms). Was tests/test_macro_lengths.py's ratio.
  schedule       how far above a server's schedule the load generator's figures land: TTFT, E2EL and a
                 level's duration against a server that writes its first chunk at 80 ms and then every 20 ms
                 (the tests check only that nothing comes before it). Was tests/test_loadgen.py's slack.
  client-cpu     the load generator's own CPU share in a level (client_cpu_pct) while a busy loop holds its
                 event loop 4 ms of every 10, against the CPU share that loop got. Was
                 tests/test_macro_client.py's comparison.
  idle-wakeups   a Textual app idle on a pty for --idle-s seconds: voluntary context switches of each of
                 its threads, with kimitui's quiet driver and with Textual's LinuxDriver (whose input thread
                 wakes ten times a second). Was tests/test_quiet_driver.py's count.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import sys
import tempfile
import termios
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def sim_steps(args: argparse.Namespace) -> None:
    from kimitui.hosts.sim.batching import BatchingModel, DecodeScheduler

    async def drain(seq: object, tokens: int) -> None:
        for _ in range(tokens):
            await seq.queue.get()  # type: ignore[attr-defined]

    async def consume(sched: DecodeScheduler, streams: int, tokens: int) -> float:
        seqs = [sched.submit(tokens) for _ in range(streams)]
        t0 = time.perf_counter()
        await asyncio.gather(*(drain(s, tokens) for s in seqs))
        return streams * tokens / (time.perf_counter() - t0)

    async def run() -> None:
        model = BatchingModel.from_targets(single_stream_tps=250, plateau_tps=7680, plateau_batch=128)
        sched = DecodeScheduler(model)
        sched.start()
        try:
            tps = {n: await consume(sched, n, tokens) for n, tokens in ((1, 50), (128, 24), (256, 12))}
        finally:
            await sched.stop()
        for n, figure in tps.items():
            print(f"sim-steps  {n:>3} streams  {figure:8.0f} tok/s  model {model.throughput(n):6.0f}  "
                  f"({figure / model.throughput(n):.0%})")
        print(f"sim-steps  batching gain at 128: {tps[128] / tps[1]:.1f}x (model 30.7x); 256 against 128: "
              f"{tps[256] / tps[128]:.2f} (model 1.00)")
        prefill = BatchingModel.from_targets(single_stream_tps=1000, plateau_tps=8000, plateau_batch=16,
                                             prefill_tps=2000)
        sched = DecodeScheduler(prefill)
        sched.start()
        try:
            waits = []
            for prompt in (10, 1000):
                t0 = time.perf_counter()
                seq = sched.submit(1, prompt_tokens=prompt)
                await seq.queue.get()
                waits.append(time.perf_counter() - t0)
        finally:
            await sched.stop()
        print(f"sim-steps  first token behind 10 / 1,000 prompt tokens: {waits[0] * 1000:.1f} / "
              f"{waits[1] * 1000:.1f} ms ({waits[1] / waits[0]:.0f}x; model 80x)")

    asyncio.run(run())


def sim_http(args: argparse.Namespace) -> None:
    import httpx

    from kimitui.hosts.sim.batching import BatchingModel
    from kimitui.hosts.sim.openai_server import SimOpenAIServer

    async def stream(c: httpx.AsyncClient, tokens: int) -> int:
        async with c.stream("POST", "/v1/completions", json={
                "prompt": "x", "max_tokens": tokens, "stream": True, "ignore_eos": True}) as resp:
            return len([line async for line in resp.aiter_lines() if line.startswith("data: {")])

    async def run() -> None:
        model = BatchingModel.from_targets(single_stream_tps=100, plateau_tps=1600, plateau_batch=32)
        async with SimOpenAIServer(batching=model) as srv, httpx.AsyncClient(
                base_url=srv.url, timeout=60, limits=httpx.Limits(max_connections=64)) as c:
            await stream(c, 2)  # connection warm-up
            t0 = time.perf_counter()
            await stream(c, 30)
            single = 30 / (time.perf_counter() - t0)
            t0 = time.perf_counter()
            await asyncio.gather(*(stream(c, 30) for _ in range(16)))
            sixteen = 480 / (time.perf_counter() - t0)
        print(f"sim-http   1 stream {single:6.0f} tok/s (model 100), 16 streams {sixteen:6.0f} tok/s "
              f"(model {model.throughput(16):.0f}): {sixteen / single:.1f}x (model 10.8x)")
        async with SimOpenAIServer(batching=BatchingModel.instant()) as srv, httpx.AsyncClient(
                base_url=srv.url, timeout=60, limits=httpx.Limits(max_connections=64)) as c:
            t0 = time.perf_counter()
            await asyncio.gather(*(stream(c, 2000) for _ in range(8)))
            rate = 16_000 / (time.perf_counter() - t0)
        ceiling = BatchingModel.from_targets().throughput(8)
        print(f"sim-http   instant mode, 8 clients: {rate:8.0f} tok/s, {rate / ceiling:.0f}x the stepped "
              f"reference model's {ceiling:.0f}")

    asyncio.run(run())


def sweep_curve(args: argparse.Namespace) -> None:
    from kimitui.bench.macro.verdict import knee

    with tempfile.TemporaryDirectory() as data:
        res = subprocess.run(
            [sys.executable, "-m", "kimitui", "bench", "macro", "--host", "demo", "--concurrency", "1,2,4,8,16",
             "--requests", "4x", "--max-tokens", "16", "--input-len", "32", "--json"],
            cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "XDG_DATA_HOME": data})
    if res.returncode != 0:
        print(f"sweep-curve  failed: {res.stderr.strip()[-500:]}")
        return
    levels = [json.loads(x) for x in res.stdout.splitlines()]
    toks = [(x["concurrency"], x["output_throughput"]) for x in levels]
    for (c, t), prev in zip(toks, [None, *toks[:-1]], strict=True):
        gain = f"  x{t / prev[1]:.2f} over c={prev[0]}" if prev else ""
        print(f"sweep-curve  c={c:<3} {t:8.1f} tok/s{gain}")
    print(f"sweep-curve  whole curve x{toks[-1][1] / toks[0][1]:.1f} (model 1.9x a doubling); knee: {knee(toks)}")


def ttft_prompt(args: argparse.Namespace) -> None:
    from kimitui.bench.macro import MacroConfig, run_sweep
    from kimitui.hosts.sim.batching import BatchingModel
    from kimitui.hosts.sim.openai_server import SimOpenAIServer

    async def run() -> None:
        model = BatchingModel.from_targets(single_stream_tps=1000, plateau_tps=16000, plateau_batch=16,
                                           prefill_tps=8000)
        ttft = {}
        async with SimOpenAIServer(batching=model) as srv:
            for n in (16, 2048):
                cfg = MacroConfig(url=srv.url, concurrency=[1], requests=3, input_len=n, max_tokens=2, warmup=0)
                ttft[n] = (await run_sweep(cfg, lambda e: None)).levels[0].metrics["mean_ttft_ms"]
        for n, ms in ttft.items():
            modelled = (model.step_time(1) + model.prefill_time(n)) * 1000
            print(f"ttft-prompt  {n:>5} tokens  {ms:7.1f} ms  model {modelled:.1f}")

    asyncio.run(run())


def schedule(args: argparse.Namespace) -> None:
    from kimitui.bench.macro import MacroConfig, run_sweep
    from tests.faulty_server import Behavior, FaultyServer

    first, gap = 0.08, 0.02

    async def run() -> None:
        async with FaultyServer(Behavior(first_delay_s=first, interval_s=gap, tokens_per_chunk=4)) as srv:
            cfg = MacroConfig(url=srv.url, model="m", concurrency=[4], requests=8, max_tokens=20, warmup=2)
            m = (await run_sweep(cfg, lambda e: None)).levels[0].metrics
        late = {"TTFT": m["mean_ttft_ms"] - first * 1000, "E2EL": m["mean_e2el_ms"] - (first + 4 * gap) * 1000,
                "duration": (m["duration"] - 2 * (first + 4 * gap)) * 1000}
        print("schedule   above the server's schedule: " + ", ".join(f"{k} +{v:.1f} ms" for k, v in late.items()))

    asyncio.run(run())


def client_cpu(args: argparse.Namespace) -> None:
    from kimitui.bench.macro import MacroConfig, run_sweep
    from tests.faulty_server import Behavior, FaultyServer

    async def run() -> None:
        loop = asyncio.get_running_loop()
        stop: list[bool] = []
        hog_cpu = [0.0]

        def hog() -> None:  # 4 ms of computing every 10 ms on the event loop
            if stop:
                return
            c0 = time.thread_time()
            end = time.perf_counter() + 0.004
            while time.perf_counter() < end:
                pass
            hog_cpu[0] += time.thread_time() - c0
            loop.call_later(0.006, hog)

        async with FaultyServer(Behavior(interval_s=0.002, n_tokens=40)) as srv:
            cfg = MacroConfig(url=srv.url, model="m", concurrency=[2], requests=16, max_tokens=40, warmup=0)
            wall0 = time.perf_counter()
            loop.call_soon(hog)
            try:
                m = (await run_sweep(cfg, lambda e: None)).levels[0].metrics
            finally:
                stop.append(True)
            hog_share = 100 * hog_cpu[0] / (time.perf_counter() - wall0)
        print(f"client-cpu  client {m['client_cpu_pct']:.1f} % of a core, the busy loop's own share "
              f"{hog_share:.1f} % (the client's includes it); loop lag p99 {m['client_loop_lag_p99_ms']:.1f} ms")

    asyncio.run(run())


IDLE_APP = textwrap.dedent("""
    import sys
    from textual.app import App
    from textual.widgets import Static
    if sys.argv[1] == "quiet":
        from kimitui.tui.quiet_driver import QuietLinuxDriver as Driver
    else:
        from textual.drivers.linux_driver import LinuxDriver as Driver

    class Idle(App[None]):
        def compose(self):
            yield Static("ready")

    Idle(driver_class=Driver).run()
""")


def _switches(pid: int) -> dict[str, int]:
    counts = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:
            continue
        counts[tid] = int(next(line.split()[1] for line in status.splitlines() if line.startswith("voluntary_ctxt")))
    return counts


def idle_wakeups(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "idle.py"
        script.write_text(IDLE_APP)
        for driver in ("quiet", "textual"):
            master, slave = pty.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
            proc = subprocess.Popen([sys.executable, str(script), driver], stdin=slave, stdout=slave, stderr=slave,
                                    env={**os.environ, "TERM": "xterm-256color", "PYTHONPATH": str(ROOT)},
                                    start_new_session=True)
            os.close(slave)
            out = b""
            try:
                end = time.monotonic() + 60
                while b"ready" not in out and time.monotonic() < end:
                    if select.select([master], [], [], 0.1)[0]:
                        out += os.read(master, 65536)
                time.sleep(1.0)  # past the start's own work
                before = _switches(proc.pid)
                t0 = time.monotonic()
                while time.monotonic() - t0 < args.idle_s:
                    if select.select([master], [], [], 0.1)[0]:
                        os.read(master, 65536)
                woke = {tid: n - before.get(tid, 0) for tid, n in _switches(proc.pid).items()}
            finally:
                proc.kill()
                proc.wait()
                os.close(master)
            per_s = sorted((n / args.idle_s for n in woke.values()), reverse=True)
            print(f"idle-wakeups  {driver:<8} wake-ups a second by thread, busiest first: "
                  + ", ".join(f"{x:.1f}" for x in per_s))


FIGURES: dict[str, Callable[[argparse.Namespace], None]] = {
    "sim-steps": sim_steps,
    "sim-http": sim_http,
    "sweep-curve": sweep_curve,
    "ttft-prompt": ttft_prompt,
    "schedule": schedule,
    "client-cpu": client_cpu,
    "idle-wakeups": idle_wakeups,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="+", choices=sorted(FIGURES), help="these figures only")
    ap.add_argument("--idle-s", type=float, default=5.0, help="idle-wakeups: seconds of nothing to count over")
    args = ap.parse_args(argv)
    for name in args.only or FIGURES:
        FIGURES[name](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
