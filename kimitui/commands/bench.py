"""``kimitui bench macro``: the serving sweep, headless. Each level prints as soon as it ends; progress goes
to stderr; the sweep is recorded to a run file like every live session (replay and report read it), and
``--output`` is rewritten whole as each level ends.
This module imports only the standard library at load time (the benchmark's own modules pull httpx in).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

TELEMETRY_S = 0.5
"""With --host, the host's samples every this many seconds during the sweep (each level's energy is from them)."""

DEMO_PLACEHOLDER_URL = "http://demo.invalid"
"""Validates the rest of the configuration before the simulated host starts (its URL comes after)."""


def _arg(name: str) -> Any:
    """An argparse ``type=``: a parser of ``bench.macro.config`` (imported when used: it pulls httpx in), its
    ConfigError shown as the option's error."""

    def convert(text: str) -> Any:
        from kimitui.bench.macro import config

        try:
            return getattr(config, name)(text)
        except config.ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = name.removeprefix("parse_")
    return convert


def _goodput(items: list[str]) -> Any:
    from kimitui.bench.macro.verdict import parse_goodput

    return parse_goodput(items)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``bench`` (with its ``macro`` subcommand) to the top-level subparsers."""
    bench = subparsers.add_parser("bench", help="benchmarks: macro (serving sweep against an OpenAI server), "
                                                "micro (GEMMs and all-reduces on the GPU host)")
    sub = bench.add_subparsers(dest="bench_command")
    p = sub.add_parser("macro", help="concurrency sweep against an OpenAI-compatible server (vLLM metrics)",
                       description="Streamed requests at each concurrency level; metrics as vLLM's "
                                   "`vllm bench serve` defines them (TTFT, TPOT, ITL, E2EL, throughput).")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="server base URL, e.g. http://127.0.0.1:8000")
    target.add_argument("--host", choices=("demo",),
                        help="demo: start a simulated 8-GPU vLLM host for this command and benchmark its "
                             "server (removed afterwards)")
    p.add_argument("--model", help="model name (default: the first one GET /v1/models lists)")
    p.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    p.add_argument("--concurrency", type=_arg("parse_levels"), default=None,
                   help="comma-separated levels, 1 to 512 (default 1,2,4,...,128)")
    p.add_argument("--requests", type=_arg("parse_requests"), default=None,
                   help="requests per level: a count, or Nx for N per concurrency slot (default 4x: 4 at c=1, "
                        "512 at c=128, as the dashboard's M dialog)")
    p.add_argument("--duration", type=float, help="seconds per level instead of a request count")
    p.add_argument("--request-rate", type=float, nargs="+", metavar="RPS",
                   help="Poisson arrivals, requests/s (default: as fast as allowed); several rates (2 4 8) are the "
                        "levels, each sending 10 s of its arrivals (at least 32 requests) under one --concurrency "
                        "cap (default 512); with --search, the lowest and highest rate to search between")
    p.add_argument("--burstiness", type=float, default=1.0,
                   help="gamma-distributed gaps between arrivals (vLLM's): 1 Poisson (default), <1 burstier, "
                        ">1 more regular; with --request-rate or a ramp-up")
    p.add_argument("--ramp-up-strategy", choices=("linear", "exponential"),
                   help="ramp the request rate from --ramp-up-start-rps to --ramp-up-end-rps over each level")
    p.add_argument("--ramp-up-start-rps", type=float, help="request rate at the start of the ramp-up")
    p.add_argument("--ramp-up-end-rps", type=float, help="request rate at the end of the ramp-up")
    p.add_argument("--trace", type=Path, metavar="FILE.jsonl",
                   help='replay arrivals: {"timestamp": seconds} a line (optional input_len, output_len); '
                        "each level sends the trace, the level's concurrency at most at once")
    p.add_argument("--warmup", type=int, default=1, help="warm-up requests per level, not counted (default 1)")
    p.add_argument("--max-tokens", "--output-len", dest="max_tokens", type=int, default=128,
                   help="output tokens per request (default 128)")
    p.add_argument("--output-len-stddev", "--max-tokens-stddev", dest="max_tokens_stddev", type=float, default=0.0,
                   help="spread of the output lengths: a normal draw per request (default 0)")
    p.add_argument("--input-len", type=int, default=128,
                   help="synthetic prompt length in tokens, exact where the server counts them (default 128)")
    p.add_argument("--input-len-stddev", type=float, default=0.0,
                   help="spread of the input lengths: a normal draw per request (default 0)")
    p.add_argument("--percentiles", "--metric-percentiles", dest="percentiles", type=_arg("parse_percentiles"),
                   default=None, help="percentiles reported for TTFT, TPOT, ITL, E2EL, e.g. 50,90,95,99,99.9 "
                                      "(default 90,99)")
    p.add_argument("--dataset", type=Path, help='JSONL prompts: {"prompt": ...} or {"messages": [...]} a line')
    p.add_argument("--ignore-eos", dest="ignore_eos", action="store_true", default=True,
                   help="send vLLM's ignore_eos, so every output is --max-tokens long (the default; a server "
                        "that refuses it gets the run without it, and a warning)")
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                   help="do not send ignore_eos (outputs may end early: lengths come from usage)")
    p.add_argument("--seed", type=int, default=None,
                   help="seeds the lengths, the arrivals and the prompts: the same N repeats a run's prompts "
                        "exactly (default: lengths and arrivals seeded 0, prompts fresh each run, so that a "
                        "server's prefix cache cannot serve them from an earlier run)")
    p.add_argument("--goodput", "--slo", nargs="+", default=[], metavar="KEY:MS", dest="goodput",
                   help="SLOs in ms (vLLM's form), e.g. ttft:200,tpot:50 or ttft:200 tpot:50 (keys ttft, tpot, "
                        "e2el): goodput per level, and the highest concurrency meeting them at p99")
    p.add_argument("--prefix-len", type=int, default=0, metavar="N",
                   help="every prompt starts with N tokens of a shared prefix before its own --input-len tokens "
                        "(vLLM's --random-prefix-len): the sweep measures the server's prefix cache, whose hit "
                        "rate each level reports (default 0: no two prompts share a prefix)")
    p.add_argument("--num-prefixes", type=int, default=1, metavar="K",
                   help="with --prefix-len: the prompts take K different prefixes in turn (default 1)")
    p.add_argument("--turns", type=int, default=1, metavar="T",
                   help="chat: each slot holds conversations of T turns, each turn sent after the answer to the "
                        "last with the whole history and a new --input-len message; every turn is a request "
                        "(the level reports the first turn's TTFT beside the later ones')")
    p.add_argument("--search", action="store_true",
                   help="with --slo: find the highest concurrency meeting the SLOs at p99 by bracketing and "
                        "bisection between the lowest and the highest --concurrency (default 1 to 128), each "
                        "probe at least 4 requests per slot, instead of running every level; with --request-rate "
                        "LOW HIGH, the highest request rate (to 10 %%)")
    p.add_argument("--connect-timeout", type=float, default=10.0)
    p.add_argument("--read-timeout", type=float, default=60.0, help="longest silence between chunks (s)")
    p.add_argument("--request-timeout", type=float, default=600.0, help="longest single request (s)")
    p.add_argument("--api-key", help="bearer token (default: $OPENAI_API_KEY if set)")
    p.add_argument("--client", choices=("lean", "httpx", "aiohttp"), default="lean",
                   help="HTTP client of the streamed requests: lean (default; an asyncio protocol that times each "
                        "chunk as it arrives), aiohttp (the serve extra's) or httpx")
    p.add_argument("--metrics-url", help="the server's Prometheus metrics, read during the sweep (default: "
                                         "<url>/metrics)")
    p.add_argument("--scrape-interval", type=float, default=0.2, metavar="S",
                   help="read the server's metrics every S seconds during the sweep (0: not read; default 0.2)")
    p.add_argument("--reset-prefix-cache", action="store_true",
                   help="ask the server to drop its prefix cache before each level (vLLM's POST "
                        "/reset_prefix_cache, served with VLLM_SERVER_DEV_MODE=1; said once where it is not)")
    p.add_argument("--json", action="store_true", help="one JSON object per level (vLLM's key names)")
    p.add_argument("--output", type=Path,
                   help="the sweep as JSON in this file, rewritten as each level ends (\"finished\": false until "
                        "the command ends)")
    p.add_argument("--csv", type=Path, help="write the levels as CSV to this file (one row a level)")
    p.add_argument("--requests-out", type=Path, metavar="FILE.jsonl",
                   help="write every measured request (start, TTFT, chunk times, tokens, error) as JSON Lines")
    # --- micro (kimitui/commands/micro.py) ---------------------------------------------------------------
    from kimitui.commands import micro as micro_cli

    micro_cli.add_micro_parser(sub)
    # --- end micro ----------------------------------------------------------------------------------------
    return bench


def _config(args: argparse.Namespace) -> Any:
    import os

    from kimitui.bench.macro import ConfigError, MacroConfig, RampUp, Timeouts
    from kimitui.bench.macro.config import (
        DEFAULT_LEVELS,
        DEFAULT_REQUESTS,
        MAX_CONCURRENCY,
        PERCENTILES,
        parse_requests,
    )

    slo = _goodput(args.goodput)
    rates: list[float] = args.request_rate or []
    rate_levels = rates if len(rates) > 1 or (rates and args.search) else []
    concurrency = args.concurrency or (list(DEFAULT_LEVELS) if not rate_levels else [MAX_CONCURRENCY])
    per_stream, requests = args.requests or parse_requests(DEFAULT_REQUESTS)
    ramp = None
    if args.ramp_up_strategy is not None:
        if args.ramp_up_start_rps is None or args.ramp_up_end_rps is None:
            raise ConfigError("--ramp-up-strategy needs --ramp-up-start-rps and --ramp-up-end-rps")
        ramp = RampUp(args.ramp_up_strategy, args.ramp_up_start_rps, args.ramp_up_end_rps)
    elif args.ramp_up_start_rps is not None or args.ramp_up_end_rps is not None:
        raise ConfigError("--ramp-up-start-rps and --ramp-up-end-rps need --ramp-up-strategy")
    return MacroConfig(
        url=args.url or DEMO_PLACEHOLDER_URL, model=args.model, endpoint=args.endpoint,
        concurrency=concurrency, requests=requests, rate_levels=rate_levels,
        requests_per_stream=per_stream,
        duration_s=args.duration, request_rate=rates[0] if rates and not rate_levels else None, warmup=args.warmup,
        input_len=args.input_len, dataset=args.dataset, max_tokens=args.max_tokens,
        ignore_eos=args.ignore_eos, seed=args.seed or 0, input_len_stddev=args.input_len_stddev,
        max_tokens_stddev=args.max_tokens_stddev, percentiles=args.percentiles or PERCENTILES,
        burstiness=args.burstiness, ramp_up=ramp, trace=args.trace,
        timeouts=Timeouts(connect_s=args.connect_timeout, read_s=args.read_timeout,
                          total_s=args.request_timeout),
        slo=slo, search=args.search, prefix_len=args.prefix_len, num_prefixes=args.num_prefixes,
        turns=args.turns,
        api_key=args.api_key or os.environ.get("OPENAI_API_KEY"), client=args.client,
    )


def cmd_bench(args: argparse.Namespace) -> int:
    # --- micro (kimitui/commands/micro.py) ---------------------------------------------------------------
    if getattr(args, "bench_command", None) == "micro":
        from kimitui.commands import micro as micro_cli

        return micro_cli.cmd_micro(args)
    # --- end micro ----------------------------------------------------------------------------------------
    if getattr(args, "bench_command", None) != "macro":
        print("kimitui bench: choose a benchmark: macro or micro", file=sys.stderr)
        return 2
    import asyncio

    from kimitui.bench.macro import ConfigError, MacroError, SweepPlan, SweepResult
    from kimitui.bench.macro.exports import RequestsOut, write_csv
    from kimitui.bench.sweep_output import OutputFile, StderrProgress, energy_figures, format_level, json_level
    from kimitui.core.describe import describe, single_stream_line, verdict_line
    from kimitui.core.events import Event, LogLine, MacroPoint, MacroVerdict, RequestFieldsDropped
    from kimitui.core.printable import printable
    from kimitui.phases.macro import macro_phase

    try:
        cfg = _config(args)
        cfg.metrics_url, cfg.scrape_s = args.metrics_url, args.scrape_interval
        cfg.reset_prefix_cache = args.reset_prefix_cache
        if args.seed is not None:
            cfg.prompt_salt = ""
        cfg.validate()
        if cfg.trace is not None:  # a bad trace is a usage error, before anything is recorded
            from kimitui.bench.macro.arrivals import load_trace

            load_trace(cfg.trace)
        requests_out = RequestsOut(args.requests_out) if args.requests_out else None
    except (ConfigError, argparse.ArgumentTypeError) as exc:
        print(f"kimitui bench macro: {printable(str(exc))}", file=sys.stderr)
        return 2

    progress = StderrProgress(sys.stderr, cfg.levels)
    output: list[OutputFile] = []
    recorded: list[Path] = []
    sessions: list[Any] = []
    """The recorded session: its fold has each level's GPU energy (from the host's power samples, with --host)."""
    metered = args.host is not None

    def energy_of(key: float) -> Any:
        sweep = sessions[0].state.sweep if sessions else None
        return sweep.energy.get(key) if sweep is not None else None

    def show(ev: Event) -> None:
        if requests_out is not None:
            requests_out(ev)
        if isinstance(ev, MacroPoint):
            progress.level_done(ev.result, ev.rate)
            energy = energy_of(ev.key)
            figures = {**ev.metrics, **energy_figures(ev.result, energy)}  # the event's own dict stays as recorded
            print(json_level(ev.concurrency, figures) if args.json
                  else format_level(ev.result, energy, metered, ev.rate), flush=True)
            if output:
                output[0].level(ev.concurrency, figures, ev.rate)
        elif isinstance(ev, MacroVerdict):
            progress.clear()
            # stdout's --json lines are one a level; the verdict's JSON is --output's "verdict"
            print(f"verdict: {verdict_line(ev)}", file=sys.stderr if args.json else sys.stdout, flush=True)
        elif isinstance(ev, LogLine):
            progress.clear()
            print(f"{ev.level}: {printable(ev.message)}", file=sys.stderr, flush=True)
        elif isinstance(ev, RequestFieldsDropped):
            progress.clear()
            print(f"warning: {describe(ev)}", file=sys.stderr, flush=True)

    async def recorded_sweep(host: str, meta: dict[str, Any], cancel: asyncio.Event,
                             telemetry: Any = None) -> SweepResult:
        """The sweep as a recorded session (its path said first): every event it publishes goes to the run
        file, then to the screen and --output."""
        from kimitui.live.targets import record_session

        session = record_session(host, {"command": "bench macro", **meta, "url": cfg.base_url})
        assert session.recorder is not None
        recorded.append(session.recorder.path)
        sessions.append(session)
        session.subscribe(show)
        pumping = asyncio.create_task(session.pump(telemetry)) if telemetry is not None else None

        def started(plan: SweepPlan) -> None:  # the model is known (discovered inside the phase)
            if args.output:
                output.append(OutputFile(args.output, cfg, plan.model))
                output[0].write(output[0].partial, finished=False)

        try:
            # the campaign's macro phase: the sweep with its progress recorded (a replay shows the panel); a
            # sweep that cannot start (no server) is recorded as a macro phase that could not start, and why
            return await macro_phase(session.publish, cfg, cancel, on_progress=progress.update, on_start=started)
        finally:
            if pumping is not None:
                pumping.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pumping
            progress.clear()
            session.close()

    async def sweep(cancel: asyncio.Event) -> SweepResult:
        if args.host is None:
            parts = urlsplit(cfg.base_url)
            return await recorded_sweep(parts.netloc or "url", {"target": "url"}, cancel)
        from kimitui.live.targets import open_target

        # The simulated host lives exactly as long as the sweep: leaving the block removes it (its
        # processes and directory), on success, on error and on Ctrl-C / SIGTERM alike.
        async with open_target(args.host) as opened:
            from kimitui.hosts.telemetry import TelemetrySource

            cfg.url = getattr(opened.host, "api_url", "") or ""
            # the host's samples go to the run beside the sweep: each level's GPU energy comes from their power
            source = TelemetrySource(opened.host, TELEMETRY_S, **opened.telemetry_args)
            try:
                return await recorded_sweep(opened.host.name, opened.facts.recorded(), cancel, source)
            finally:
                source.stop()

    async def main() -> SweepResult:
        cancel = asyncio.Event()
        loop = asyncio.get_running_loop()
        signals = (signal.SIGINT, signal.SIGTERM)
        for sig in signals:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, cancel.set)
        try:
            return await sweep(cancel)
        finally:
            for sig in signals:
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(sig)

    from kimitui.hosts.base import HostError
    from kimitui.live.targets import TargetError

    try:
        result = asyncio.run(main())
        if output:
            for lv in result.levels:
                lv.metrics = {**lv.metrics, **energy_figures(lv.result, energy_of(lv.key))}
            output[0].write(result, finished=True)
    except MacroError as exc:  # the sweep could not start (the server): recorded, said in one line
        print(f"kimitui bench macro: {printable(str(exc))}", file=sys.stderr)
        return 1
    except (ConfigError, HostError, TargetError) as exc:
        print(f"kimitui bench macro: {printable(str(exc))}", file=sys.stderr)
        return 2
    except OSError as exc:  # --output cannot be written
        print(printable(f"kimitui bench macro: --output {args.output}: {exc.strerror or exc}"), file=sys.stderr)
        return 2
    finally:
        if requests_out is not None:
            requests_out.close()
    if not args.json and result.single_stream.state != "not run":
        print(f"{single_stream_line(result.single_stream)} (output throughput at concurrency 1)")
    if not metered and result.levels:
        print("energy per token: not known (a --url sweep records no GPU power; --host HOST samples it)",
              file=sys.stderr if args.json else sys.stdout)
    if args.output:
        print(f"sweep written to {args.output}", file=sys.stderr)
    if args.csv:
        try:
            write_csv(result, args.csv)
        except (OSError, ConfigError) as exc:
            print(f"kimitui bench macro: {printable(str(exc))}", file=sys.stderr)
            return 2
        print(f"levels written to {args.csv}", file=sys.stderr)
    if requests_out is not None:
        print(f"{requests_out.lines} requests written to {args.requests_out}", file=sys.stderr)
    if recorded:
        print(f"session recorded to {recorded[0]} (replay: kimitui replay {recorded[0]}; report: kimitui report "
              f"{recorded[0]})", file=sys.stderr)
    if result.cancelled:
        return 130
    from kimitui.core.sweep_state import sweep_failure

    failure = sweep_failure(lv.result for lv in result.levels)
    if failure is not None:  # nothing was measured: a script must not read the sweep as done
        print(f"kimitui bench macro: {printable(failure)}", file=sys.stderr)
        return 1
    return 0
