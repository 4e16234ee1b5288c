"""Telemetry figures: python benchmarks/telemetry.py [--only NAME ...] [--samples N]

Figures (each a function registered in FIGURES; add yours the same way):
  agent-cost   the agent's cost per sample of all GPUs: NVML when pynvml finds GPUs, else the simulated
               driver on an 8-GPU sim dir; next to one `nvidia-smi --query-gpu` call where nvidia-smi
               exists. Needs only the stdlib (+ pynvml): it loads kimitui/hosts/agent.py by path, so it
               runs on a bare GPU host too.
Targets (issue 3): <= 1 ms per 8-GPU sample.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
AGENT_PATH = ROOT / "kimitui" / "hosts" / "agent.py"


def load_agent() -> ModuleType:
    """The agent module, loaded by path (no kimitui import, as on a GPU host)."""
    spec = importlib.util.spec_from_file_location("kimitui_agent", AGENT_PATH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def timed(fn: Callable[[], Any], n: int) -> list[float]:
    fn()  # warm
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def fmt_us(times: list[float]) -> str:
    s = sorted(times)
    p99 = s[min(len(s) - 1, int(0.99 * len(s)))]
    return f"median {statistics.median(s) * 1e6:8.1f} us   p99 {p99 * 1e6:8.1f} us   (n={len(s)})"


def make_sim_dir(root: str, gpus: int = 8, holders: list[tuple[int, int]] | None = None) -> str:
    """An 8 x RTX PRO 6000 sim dir (the contract of agent.SimSource); holder files for (pid, start)."""
    os.makedirs(os.path.join(root, "dev"), exist_ok=True)
    os.makedirs(os.path.join(root, "holders"), exist_ok=True)
    spec = {"driver": "sim-580", "gpus": [
        {"index": i, "uuid": f"GPU-sim-{i:04d}", "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
         "total_mib": 97887, "reserved_mib": 616, "pci": f"00000000:{i + 1:02x}:00.0"} for i in range(gpus)]}
    with open(os.path.join(root, "gpus.json"), "w") as fh:
        json.dump(spec, fh)
    for name in [f"nvidia{i}" for i in range(gpus)] + ["nvidiactl", "nvidia-uvm"]:
        with open(os.path.join(root, "dev", name), "wb") as fh:
            fh.write(b"\0" * 4096)
    for gpu, (pid, start) in enumerate(holders or []):
        with open(os.path.join(root, "holders", f"{pid}.json"), "w") as fh:
            json.dump({"pid": pid, "start_time": start, "mem_mib": {str(gpu % gpus): 92410.0}}, fh)
    return root


def _start_time(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rpartition(")")[2].split()[19])


def agent_cost(args: argparse.Namespace) -> None:
    agent = load_agent()
    n = args.samples
    children: list[subprocess.Popen[bytes]] = []
    tmp = None
    source: Any = None
    if not args.sim:
        try:
            source = agent.NvmlSource()
            if not source.handles:
                source = None
        except agent.NoDriver as exc:
            print(f"NVML: {exc}; using the sim source")
    try:
        if source is None:
            # 8 live holder processes (one per GPU, like vLLM's TP workers) so liveness checks are real
            children = [subprocess.Popen(["sleep", "300"]) for _ in range(8)]
            tmp = tempfile.mkdtemp(prefix="kimitui-bench-")
            make_sim_dir(tmp, 8, [(c.pid, _start_time(c.pid)) for c in children])
            source = agent.SimSource(tmp)
        gpus = len(source.sample()[0])
        print(f"agent cost per sample, source {source.name}, {gpus} GPUs, driver {source.driver}")
        t_src = timed(source.sample, n)
        print(f"  driver part (all GPUs + process lists) {fmt_us(t_src)}")
        print(f"    per GPU: {statistics.median(t_src) / gpus * 1e6:.1f} us; scaled to 8 GPUs: "
              f"{statistics.median(t_src) / gpus * 8 * 1e6:.1f} us (target <= 1000 us)")
        prefix = os.path.join(tmp, "dev", "nvidia") if tmp else "/dev/nvidia"
        argv = ["--interval", "0.5", "--dev-prefix", prefix, "--scan-interval", "1e9"]
        sampler = agent.Sampler(source, agent.parse_args(argv + (["--sim-dir", tmp] if tmp else [])))
        clock = [0.0]

        def delta_sample() -> None:
            clock[0] += 0.5
            sampler.sample(clock[0])

        t_delta = timed(delta_sample, n)
        print(f"  whole sample, between full scans     {fmt_us(t_delta)}")
        scan = agent.HolderScan("/proc", prefix, {os.getpid()}, 0.0)
        t_full = timed(lambda: scan.update(time.monotonic(), set()), max(5, n // 50))
        pids = sum(1 for p in os.listdir("/proc") if p.isdigit())
        print(f"  full /proc fd+maps scan ({pids} pids)   {fmt_us(t_full)}  (every --scan-interval, 2 s)")
        amortised = statistics.median(t_delta) + statistics.median(t_full) / 4
        print(f"  amortised per 0.5 s sample (one full scan per 4 samples): {amortised * 1e6:.1f} us")
    finally:
        for c in children:
            c.kill()
            c.wait()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    smi = shutil.which("nvidia-smi")
    if smi:
        query = ["--query-gpu=index,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw,"
                 "clocks.current.sm", "--format=csv,noheader,nounits"]
        t_smi = timed(lambda: subprocess.run([smi, *query], capture_output=True, check=False), 5)
        ratio = statistics.median(t_smi) / statistics.median(t_src)
        print(f"  one nvidia-smi --query-gpu call      {fmt_us(t_smi)}  ({ratio:.0f}x the driver part)")
    else:
        print("  nvidia-smi: not on this host")


FIGURES: dict[str, Callable[[argparse.Namespace], None]] = {
    "agent-cost": agent_cost,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", choices=sorted(FIGURES), help="run only this figure")
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--sim", action="store_true", help="agent-cost: use the sim source even with NVML")
    args = ap.parse_args(argv)
    for name in args.only or list(FIGURES):
        print(f"== {name}")
        FIGURES[name](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
