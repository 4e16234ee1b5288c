"""``kimitui demo --engine vllm [--engine-python PATH]``: the simulated host's service a real vLLM
(kimitui/hosts/sim/real_engine.py). What the command line says, checked before anything starts."""

from __future__ import annotations

import argparse
import sys

from kimitui.core.printable import printable


def add_engine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=("sim", "vllm"), default="sim",
                   help="the simulated host's service: its own simulated vLLM (sim, the default) or a real vLLM "
                        "serving a tiny random Llama on this machine's CPUs, its processes holding the simulated "
                        "GPUs (vllm: 2 GPUs by default, a worker per GPU; a minute or more to start)")
    p.add_argument("--engine-python", metavar="PATH",
                   help="with --engine vllm: a python that imports vllm (default $KIMITUI_VLLM_VENV/bin/python, "
                        "else ~/.cache/kimitui/vllm-venv/bin/python)")
    p.add_argument("--reasoning-tokens", type=int, default=None, metavar="N",
                   help="the simulated Kimi-K2.5 thinks for N tokens before it answers on the chat endpoint, as the "
                        "real one does behind vLLM's reasoning parser (default 32; 0: no thinking)")
    p.add_argument("--xid", action="append", default=[], metavar="GPU:CODE",
                   help="the simulated driver reports XID CODE as GPU's last error (6:79: fallen off the bus); "
                        "repeatable")
    p.add_argument("--pcie", action="append", default=[], metavar="GPU:GENxWIDTH",
                   help="GPU's slot trains its link to GENxWIDTH below its Gen5 x16 (7:4x16), as a busy GPU shows; "
                        "repeatable")


def resolve_demo(args: argparse.Namespace) -> int | None:
    """Fill in the demo's GPU count and engine python; an exit status (2, one line said) when they do not do."""
    from kimitui.hosts.sim.real_engine import DEFAULT_GPUS, default_engine_python, engine_problem

    engine = getattr(args, "engine", "sim") or "sim"
    if (getattr(args, "reasoning_tokens", None) or 0) < 0:
        print("kimitui: --reasoning-tokens must be 0 or more", file=sys.stderr)
        return 2
    if getattr(args, "gpus", None) is None:
        args.gpus = DEFAULT_GPUS if engine == "vllm" else 8
    if not 1 <= args.gpus <= 64:
        print("kimitui: --gpus must be between 1 and 64", file=sys.stderr)
        return 2
    from kimitui.hosts.sim.layout import GpuFaults

    try:
        args.gpu_faults = GpuFaults.parse(getattr(args, "xid", []), getattr(args, "pcie", []), args.gpus)
    except ValueError as exc:
        print(f"kimitui: {printable(str(exc))}", file=sys.stderr)
        return 2
    if engine == "sim":
        if getattr(args, "engine_python", None):
            print("kimitui: --engine-python is for --engine vllm", file=sys.stderr)
            return 2
        return None
    given = bool(args.engine_python)
    args.engine_python = args.engine_python or default_engine_python()
    problem = engine_problem(args.engine_python, given)
    if problem is not None:
        print(f"kimitui: {printable(problem)}", file=sys.stderr)
        return 2
    return None


def demo_engine_args(args: argparse.Namespace) -> dict[str, object]:
    """``open_target``'s keyword arguments for the demo's engine (none for the simulated one) and its GPUs'
    faults (``--xid``, ``--pcie``)."""
    engine = getattr(args, "engine", "sim") or "sim"
    faults = getattr(args, "gpu_faults", None)
    out: dict[str, object] = {"gpu_faults": faults} if faults is not None and faults.words() else {}
    if engine == "sim":
        given = getattr(args, "reasoning_tokens", None)
        return out if given is None else {**out, "reasoning_tokens": given}
    return {**out, "engine": engine, "engine_python": args.engine_python}
