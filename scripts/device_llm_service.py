#!/usr/bin/env python3
"""A stand-in for vLLM on a real GPU host, for the campaign's device run (no vLLM there): one torch worker
per GPU holding real GPU memory (worker 0 ignores SIGTERM, as a stuck vLLM worker does), then the simulated
OpenAI-compatible server (kimitui.hosts.sim.openai_server: streaming completions, /health, /metrics) in
this process on --port. On SIGTERM the server stops and this process exits; the workers are left behind,
as vLLM's are when its API server dies (vllm issue 55510): the cleanup must find and end them.

    python3 scripts/device_llm_service.py --port 8000 --gib 40
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def worker(gpu: int, gib: float, stuck: bool) -> None:
    if stuck:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    import torch

    torch.cuda.set_device(gpu)
    block = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device=f"cuda:{gpu}")
    block.fill_(1)
    torch.cuda.synchronize()
    print("ready", flush=True)
    while True:
        signal.pause()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--gib", type=float, default=40.0)
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(int(args.worker[0]), float(args.worker[1]), args.worker[2] == "1")
        return 0
    import torch

    gpus = torch.cuda.device_count()
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(g), str(args.gib), "1" if g == 0 else "0"],
                              stdout=subprocess.PIPE, text=True) for g in range(gpus)]
    deadline = time.monotonic() + 120
    for p in procs:
        assert p.stdout is not None
        while p.stdout.readline().strip() != "ready":
            if time.monotonic() > deadline or p.poll() is not None:
                print("a worker did not start", file=sys.stderr)
                return 1
    print(f"service pid {os.getpid()}: {gpus} workers ready ({args.gib:g} GiB each)", flush=True)
    from kimitui.hosts.sim import openai_server

    openai_server.main(["--port", str(args.port), "--model", "kimi-k2.5-standin"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
