"""``kimitui shapes`` and ``kimitui bench micro``: the model's per-GPU shapes, and the micro benchmarks on
a host, headless. Imports only the standard library at load time (the rest when a command runs).

    kimitui shapes --tp 8 [--config FILE | --model NAME] [--expert-parallel] [--json]
    kimitui bench micro --host TARGET [--gemm] [--allreduce] [--json] [--device cpu] ...

``--host demo`` starts the simulated 8-GPU host, frees its GPUs with the real cleanup (its simulated vLLM
holds them, as a real one would), and runs the workers there with modelled RTX PRO 6000 figures, marked
simulated. ``--device cpu`` is the CPU path (gloo, CPU tensors, small sizes) on this machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kimitui.core.printable import printable

SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1:] if t[-1:] in SIZE_UNITS else ""
    try:
        value = float(t[: len(t) - len(unit)]) * SIZE_UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a size such as 1G, 64M, 4096") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a size cannot be negative")
    return int(value)


def parse_ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated whole numbers, e.g. 1,2,4") from None
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: numbers must not be negative")
    return values


def parse_names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


# --- kimitui shapes ----------------------------------------------------------------------------------------


def add_shapes_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "shapes", help="the model's per-GPU decode GEMMs and all-reduces at a TP size",
        description="Per-GPU GEMMs (N x K, dtype as the checkpoint stores it, calls per token) and the "
                    "all-reduces of one decode step, and the parameter counts, from Kimi-K2.5 (built in), a "
                    "preset (--model) or an HF config.json.")
    p.add_argument("--tp", type=int, default=8, help="tensor-parallel size (default 8)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--config", type=Path, help="an HF config.json (Llama / Mistral / Qwen2 / Qwen3, Qwen3-MoE, "
                                                   "Mixtral, DeepSeek-V3 / Kimi-K2, GLM-4.5, GLM-5, gpt-oss)")
    which.add_argument("--model", help="a preset: kimi-k2.5 (the default), glm-5, deepseek-v3, qwen3-235b-a22b, "
                                       "llama-3.1-70b, gpt-oss-120b")
    p.add_argument("--expert-parallel", action="store_true",
                   help="as vLLM's --enable-expert-parallel: the routed experts split across the GPUs whole")
    p.add_argument("--ms", type=parse_ints, default=None, help="token counts for the all-reduce sizes")
    p.add_argument("--json", action="store_true", help="the plan as JSON, with params_total and params_active")
    return p


def cmd_shapes(args: argparse.Namespace) -> int:
    from kimitui.bench.micro.presets import preset
    from kimitui.bench.micro.runner import DEFAULT_MS
    from kimitui.bench.micro.shapes import ShapeError, format_plan, load_config, shapes_for

    ms = args.ms or list(DEFAULT_MS)
    try:
        data = preset(args.model) if getattr(args, "model", None) else load_config(args.config)
        plan = shapes_for(data, args.tp, expert_parallel=bool(getattr(args, "expert_parallel", False)))
    except ShapeError as exc:
        print(f"kimitui shapes: {printable(str(exc))}", file=sys.stderr)
        return 2
    if args.json:
        out = plan.to_dict(ms)
        out.update(family=plan.family, expert_parallel=plan.expert_parallel, params_total=plan.params_total,
                   params_active=plan.params_active, params_embedding=plan.params_embedding)
        print(json.dumps(out, indent=1))
    else:
        sys.stdout.write(format_plan(plan, ms))
    return 0


# --- kimitui bench micro -------------------------------------------------------------------------------------


def add_micro_parser(bench_sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = bench_sub.add_parser(
        "micro", help="GEMMs at the model's per-GPU shapes and NCCL all-reduces, run on the GPU host",
        description="W4A16 and bf16 GEMMs at the model's decode shapes (CUDA graphs, weights rotated beyond L2, "
                    "checked against a dequantized reference) and all-reduces (nccl-tests' algbw / busbw, eager "
                    "and CUDA graph, the 122-per-token burst). Refuses to start while the GPUs in scope hold "
                    "memory (--force overrides). Exit status: 0 done, 1 failed or refused, 2 usage, 130 cancelled.")
    p.add_argument("--host", default="local", help="local, demo, or ssh://[user@]host[:port] (default local)")
    p.add_argument("--accept-new-host-key", action="store_true")
    p.add_argument("--gemm", action="store_true", help="the GEMM benchmark (default: both)")
    p.add_argument("--allreduce", action="store_true", help="the all-reduce benchmark (default: both)")
    p.add_argument("--json", action="store_true", help="the run's events as JSON lines (rows, env, topology, end)")
    p.add_argument("--tp", type=int, default=8)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--config", type=Path, help="the model's HF config.json (default: Kimi-K2.5)")
    which.add_argument("--model", help="a preset: kimi-k2.5 (the default), glm-5, deepseek-v3, qwen3-235b-a22b, "
                                       "llama-3.1-70b, gpt-oss-120b")
    p.add_argument("--expert-parallel", action="store_true",
                   help="as vLLM's --enable-expert-parallel: the routed experts split across the GPUs whole")
    p.add_argument("--ms", type=parse_ints, help="token counts M (default 1,2,4,...,256)")
    p.add_argument("--backends", type=parse_names, help="marlin,torch-int4,bf16 (default: all found)")
    p.add_argument("--gpus", type=parse_ints, help="GPUs in scope (default: all; the GEMM runs on the first)")
    p.add_argument("--ranks", type=int, help="all-reduce ranks (default: one per GPU in scope; 2 on --device cpu)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="cpu: the CPU path (gloo, CPU tensors; no GPU check)")
    p.add_argument("--sweep-max", type=parse_size, help="largest all-reduce of the size sweep (default 1G; "
                                                         "64K on --device cpu; 0: no sweep)")
    p.add_argument("--burst-tokens", type=parse_ints, help="M of the 122-all-reduce bursts (default 1,8,32,128)")
    p.add_argument("--modes", type=parse_names, default=["eager", "graph"], help="eager,graph (default both)")
    p.add_argument("--iters", type=int, help="all-reduce iterations per size (default 20)")
    p.add_argument("--replays", type=int, help="GEMM graph replays per figure (default 5)")
    p.add_argument("--target-ms", type=float, help="GEMM: length of one timed graph (default 20)")
    p.add_argument("--force", action="store_true", help="start even though the GPUs hold memory")
    p.add_argument("--threshold-mib", type=float, default=256.0,
                   help="a GPU counts as free within this much used memory (default 256)")
    p.add_argument("--python", help="the host's python with torch (default: python3 there; here: this one)")
    p.add_argument("--pace", type=float, default=None, help="demo: seconds per modelled row (default 0.02)")
    p.add_argument("--interval", type=float, default=0.5, help="telemetry sampling interval (default 0.5 s)")
    return p


def _config(args: argparse.Namespace) -> Any:
    from kimitui.bench.micro.runner import MicroConfig

    parts = [p for p in ("gemm", "allreduce") if getattr(args, p)] or ["gemm", "allreduce"]
    cfg = MicroConfig(parts=parts, tp=args.tp, config_path=args.config, device=args.device, force=args.force,
                      threshold_mib=args.threshold_mib, python=args.python, gpus=args.gpus or None,
                      ranks=args.ranks, modes=args.modes, expert_parallel=args.expert_parallel)
    if args.model:
        from kimitui.bench.micro.presets import preset

        cfg.model_config = preset(args.model)
    if args.ms:
        cfg.ms = args.ms
    if args.backends:
        cfg.backends = args.backends
    if args.burst_tokens is not None:
        cfg.burst_tokens = args.burst_tokens
    if args.sweep_max is not None:
        cfg.sweep_max = args.sweep_max
    elif cfg.cpu:
        cfg.sweep_max = 64 << 10
    if args.iters:
        cfg.allreduce_args += ["--iters", str(args.iters), "--warmup", str(min(5, args.iters))]
    if args.replays:
        cfg.gemm_args += ["--replays", str(args.replays)]
    if args.target_ms:
        cfg.gemm_args += ["--target-ms", str(args.target_ms)]
    return cfg


async def free_simulated_gpus(opened: Any, feed: Any, publish: Any, sample: Any, threshold_mib: float,
                              gpus: list[int] | None) -> tuple[bool, Any]:
    """A simulated host's vLLM holds its GPUs, as a real one does before the micro phase: free them the way
    the campaign does before its Phase 2 (``free_before_micro``: the transition phase when the GPUs hold
    memory), its consent the campaign's policy, yes to each step (the simulated host and all on it belong to
    this command). Returns (free, the sample after)."""
    from kimitui.campaign.setup import policy_consent
    from kimitui.cleanup.consent import current_operator
    from kimitui.cleanup.setup import build_target, default_deadlines, parse_service
    from kimitui.phases.micro import free_before_micro
    from kimitui.phases.transition import cleanup_phase

    host = opened.host
    api_url = opened.facts.api_url or ""
    service = parse_service(opened.facts.service or "none", f"{api_url}/health" if api_url else None)
    operator = current_operator()
    target = build_target(host.name, service, gpus, threshold_mib, default_deadlines(True), False, operator)
    target.nvidia_smi = opened.facts.nvidia_smi or "nvidia-smi"
    consent = policy_consent(dict.fromkeys(FREE_STEPS, "yes"), None, operator, lambda: False)

    async def transition() -> bool:
        out = await cleanup_phase(host, target, feed, consent, publish, "free the simulated GPUs for the micro phase")
        return out.clean

    def say(why: str) -> None:
        print(f"demo: freeing the simulated GPUs first ({printable(why)}; the cleanup, every step consented: the "
              "host is simulated)", file=sys.stderr)

    return await free_before_micro(sample, gpus, feed, transition, say, threshold_mib)


FREE_STEPS = ("graceful", "process", "others", "device")
"""The steps consented to on a simulated host before the micro phase."""


async def _micro(args: argparse.Namespace) -> int:
    import asyncio
    import contextlib
    import signal
    import time

    from kimitui.bench.micro.shapes import shapes_for
    from kimitui.bench.micro.tables import TextPrinter
    from kimitui.core.events import (
        AllReduceRow,
        Event,
        GemmRow,
        MicroEnd,
        MicroEnv,
        MicroPlan,
        Topology,
    )
    from kimitui.live.targets import TargetError, host_gpus, new_session, open_target
    from kimitui.phases.micro import micro_phase

    cfg = _config(args)
    cfg.validate()
    shapes_for(cfg.model_data(), cfg.tp, cfg.expert_parallel)  # a bad config or TP: a usage error before any host
    json_types = (MicroPlan, MicroEnv, Topology, GemmRow, AllReduceRow, MicroEnd)
    text = TextPrinter()

    def show(ev: Event) -> None:
        if args.json:
            if isinstance(ev, json_types):
                print(json.dumps(ev.to_dict(), separators=(",", ":")), flush=True)
        else:
            text(ev)

    cancel = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, cancel.set)
    async with open_target(args.host, accept_new_host_key=args.accept_new_host_key, check=not cfg.cpu) as opened:
        if cfg.gpus and not cfg.cpu:  # a GPU the host does not have: a usage error, before the session
            from kimitui.cleanup.setup import check_gpus

            check_gpus(cfg.gpus, await host_gpus(opened, args.interval), opened.host.name)
        session = new_session(opened, "bench micro")
        session.subscribe(show)
        simulated = opened.facts.simulated
        if simulated:
            cfg.modelled = "rtx-pro-6000"
            cfg.sim_dir = opened.sim_dir
            cfg.pace_s = 0.02 if args.pace is None else args.pace
        feed = source = None
        try:
            sample = None
            if not cfg.cpu:
                from kimitui.cleanup.sample_feed import SampleFeed, ViewTimeout
                from kimitui.hosts.telemetry import TelemetrySource

                source = TelemetrySource(opened.host, args.interval, **opened.telemetry_args)
                feed = SampleFeed()
                feed.follow(source.events(), publish=session.publish)
                try:
                    sample = await feed.latest(after=time.monotonic(), timeout=30.0)
                    if simulated and not cfg.force:
                        free, sample = await free_simulated_gpus(opened, feed, session.publish, sample,
                                                                 cfg.threshold_mib, cfg.gpus)
                        if not free:
                            print("kimitui bench micro: the simulated GPUs could not be freed", file=sys.stderr)
                            return 1
                except ViewTimeout as exc:
                    raise TargetError(f"{opened.host.name}: no telemetry: {exc}") from None
            result = await micro_phase(session.publish, opened.host, opened.host.name, cfg, sample, cancel)
        finally:
            if source is not None:
                source.stop()
            if feed is not None:
                await feed.stop()
            session.close()
        assert session.recorder is not None
        print(f"session recorded to {session.recorder.path} (replay: kimitui replay {session.recorder.path})",
              file=sys.stderr)
    if result.cancelled:
        return 130
    return 0 if result.ok else 1


def cmd_micro(args: argparse.Namespace) -> int:
    import asyncio

    from kimitui.bench.micro.runner import MicroError
    from kimitui.bench.micro.shapes import ShapeError
    from kimitui.cleanup.setup import UsageError
    from kimitui.hosts.base import HostError
    from kimitui.live.targets import TargetError

    try:
        return asyncio.run(_micro(args))
    except (MicroError, ShapeError, HostError, TargetError, UsageError) as exc:
        print(f"kimitui bench micro: {printable(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
