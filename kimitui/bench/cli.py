"""``kimitui bench macro``: the serving sweep, headless. Each level prints as soon as it ends.

Wiring into kimitui/cli.py: ``from kimitui.bench import cli as bench_cli`` with the imports (this module
imports only the standard library at load time), then two lines: ``bench_cli.add_parser(sub)`` in
``build_parser`` after the other subcommands, and ``handlers["bench"] = bench_cli.cmd_bench`` in ``main``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import sys
from pathlib import Path
from typing import Any

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


def _goodput(items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        key, _, value = item.partition(":")
        if key not in ("ttft", "tpot", "e2el") or not value:
            raise argparse.ArgumentTypeError(f"--goodput takes ttft:MS, tpot:MS or e2el:MS, not {item!r}")
        out[key] = float(value)
    return out


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
    p.add_argument("--requests", type=_arg("parse_requests"), default=(None, 64),
                   help="requests per level: a count, or Nx for N per concurrency slot (default 64)")
    p.add_argument("--duration", type=float, help="seconds per level instead of a request count")
    p.add_argument("--request-rate", type=float, help="Poisson arrivals, requests/s (default: as fast as allowed)")
    p.add_argument("--warmup", type=int, default=1, help="warm-up requests per level, not counted (default 1)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--input-len", type=int, default=128, help="synthetic prompt length in tokens (default 128)")
    p.add_argument("--dataset", type=Path, help='JSONL prompts: {"prompt": ...} or {"messages": [...]} a line')
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                   help="do not send ignore_eos (for servers that reject it)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--goodput", nargs="+", default=[], metavar="KEY:MS", help="SLOs, e.g. ttft:500 tpot:50")
    p.add_argument("--connect-timeout", type=float, default=10.0)
    p.add_argument("--read-timeout", type=float, default=60.0, help="longest silence between chunks (s)")
    p.add_argument("--request-timeout", type=float, default=600.0, help="longest single request (s)")
    p.add_argument("--api-key", help="bearer token (default: $OPENAI_API_KEY if set)")
    p.add_argument("--client", choices=("lean", "httpx"), default="lean",
                   help="HTTP client of the streamed requests: lean (default; asyncio protocol, ~10x less CPU "
                        "per chunk) or httpx")
    p.add_argument("--json", action="store_true", help="one JSON object per level (vLLM's key names)")
    p.add_argument("--output", type=Path, help="write the whole sweep as JSON to this file")
    # --- micro (kimitui/bench/micro/cli.py) -------------------------------------------------------------
    from kimitui.bench.micro import cli as micro_cli

    micro_cli.add_micro_parser(sub)
    # --- end micro ----------------------------------------------------------------------------------------
    return bench


def _config(args: argparse.Namespace) -> Any:
    import os

    from kimitui.bench.macro import SLO, MacroConfig, Timeouts
    from kimitui.bench.macro.config import DEFAULT_LEVELS

    slo = _goodput(args.goodput)
    per_stream, requests = args.requests
    return MacroConfig(
        url=args.url or DEMO_PLACEHOLDER_URL, model=args.model, endpoint=args.endpoint,
        concurrency=args.concurrency or list(DEFAULT_LEVELS), requests=requests,
        requests_per_stream=per_stream,
        duration_s=args.duration, request_rate=args.request_rate, warmup=args.warmup,
        input_len=args.input_len, dataset=args.dataset, max_tokens=args.max_tokens,
        ignore_eos=args.ignore_eos, seed=args.seed,
        timeouts=Timeouts(connect_s=args.connect_timeout, read_s=args.read_timeout,
                          total_s=args.request_timeout),
        slo=SLO(ttft_ms=slo.get("ttft"), tpot_ms=slo.get("tpot"), e2el_ms=slo.get("e2el")),
        api_key=args.api_key or os.environ.get("OPENAI_API_KEY"), client=args.client,
    )


def _clean(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def format_level(concurrency: int, m: dict[str, Any]) -> str:
    line = (f"c={concurrency:<4} {m['completed']:>5} ok {m['failed']:>4} failed  "
            f"out {m['output_throughput']:>9.1f} tok/s  req {m['request_throughput']:>7.2f}/s  "
            f"TTFT {m['mean_ttft_ms']:>8.1f} ms (p99 {m['p99_ttft_ms']:.1f})  "
            f"TPOT {m['mean_tpot_ms']:>7.2f} ms  ITL p99 {m['p99_itl_ms']:.2f} ms  "
            f"reached {m['concurrency_reached']}")
    if m.get("request_goodput") is not None:
        line += f"  goodput {m['request_goodput']:.2f}/s"
    if m["failures"]:
        line += "  [" + "; ".join(f"{n} x {r}" for r, n in m["failures"].items()) + "]"
    return line


def cmd_bench(args: argparse.Namespace) -> int:
    # --- micro (kimitui/bench/micro/cli.py) -------------------------------------------------------------
    if getattr(args, "bench_command", None) == "micro":
        from kimitui.bench.micro import cli as micro_cli

        return micro_cli.cmd_micro(args)
    # --- end micro ----------------------------------------------------------------------------------------
    if getattr(args, "bench_command", None) != "macro":
        print("kimitui bench: choose a benchmark: macro or micro", file=sys.stderr)
        return 2
    import asyncio

    from kimitui.bench.macro import ConfigError, MacroError, run_sweep
    from kimitui.core.events import Event, LogLine, MacroPoint

    try:
        cfg = _config(args)
        cfg.validate()
    except (ConfigError, argparse.ArgumentTypeError) as exc:
        print(f"kimitui bench macro: {exc}", file=sys.stderr)
        return 2

    def publish(ev: Event) -> None:
        if isinstance(ev, MacroPoint):
            if args.json:
                print(json.dumps({"concurrency": ev.concurrency,
                                  **{k: _clean(v) for k, v in ev.metrics.items()}}), flush=True)
            else:
                print(format_level(ev.concurrency, ev.metrics), flush=True)
        elif isinstance(ev, LogLine):
            print(f"{ev.level}: {ev.message}", file=sys.stderr, flush=True)

    async def sweep(cancel: asyncio.Event) -> Any:
        if args.host is None:
            return await run_sweep(cfg, publish, cancel=cancel)
        from kimitui.targets import open_target

        # The simulated host lives exactly as long as the sweep: leaving the block removes it (its
        # processes and directory), on success, on error and on Ctrl-C / SIGTERM alike.
        async with open_target(args.host) as opened:
            cfg.url = getattr(opened.host, "api_url", "") or ""
            return await run_sweep(cfg, publish, cancel=cancel)

    async def main() -> Any:
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
    from kimitui.targets import TargetError

    try:
        result = asyncio.run(main())
    except (ConfigError, MacroError, HostError, TargetError) as exc:
        print(f"kimitui bench macro: {exc}", file=sys.stderr)
        return 2
    if not args.json and result.single_stream_tok_s is not None:
        print(f"single stream: {result.single_stream_tok_s:.1f} tok/s (output throughput at concurrency 1)")
    if args.output:
        args.output.write_text(result.to_json() + "\n")
        print(f"sweep written to {args.output}", file=sys.stderr)
    return 130 if result.cancelled else 0


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (``python -m kimitui.bench.cli macro ...``) until kimitui/cli.py wires it."""
    parser = argparse.ArgumentParser(prog="kimitui")
    sub = parser.add_subparsers(dest="command")
    add_parser(sub)
    args = parser.parse_args(["bench", *(argv if argv is not None else sys.argv[1:])])
    return cmd_bench(args)


if __name__ == "__main__":
    sys.exit(main())
