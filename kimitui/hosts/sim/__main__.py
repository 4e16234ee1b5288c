"""``python -m kimitui.hosts.sim``: run a simulated GPU host in the foreground until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

from kimitui.hosts.sim.batching import BatchingModel
from kimitui.hosts.sim.host import SimHost
from kimitui.hosts.sim.layout import DEFAULT_GPU_NAME, DEFAULT_TOTAL_MIB
from kimitui.hosts.sim.openai_server import DEFAULT_MODEL, FAULT_MODES, FaultPlan
from kimitui.hosts.sim.service import DEFAULT_WORKER_MEM_MIB


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m kimitui.hosts.sim",
                                description="A simulated GPU host with a simulated vLLM service, until Ctrl-C.")
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--gpu-name", default=DEFAULT_GPU_NAME)
    p.add_argument("--total-mib", type=int, default=DEFAULT_TOTAL_MIB)
    p.add_argument("--worker-mem-mib", type=int, default=DEFAULT_WORKER_MEM_MIB)
    p.add_argument("--stuck-workers", type=int, default=2)
    p.add_argument("--stray-holder", type=int, default=None, metavar="GPU", help="a stray CUDA context on GPU")
    p.add_argument("--no-monitor", action="store_true", help="no NVML-only monitor process")
    p.add_argument("--persistenced", action="store_true",
                   help="a simulated nvidia-persistenced holding every GPU (the cleanup spares it)")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--load-time", type=float, default=1.0)
    p.add_argument("--single-stream-tps", type=float, default=50.0)
    p.add_argument("--plateau-tps", type=float, default=1536.0)
    p.add_argument("--plateau-batch", type=int, default=128)
    p.add_argument("--instant", action="store_true", help="stream tokens with no decode delay")
    p.add_argument("--fault", default="none", choices=FAULT_MODES)
    p.add_argument("--fault-every", type=int, default=1)
    return p.parse_args(argv)


async def _run(ns: argparse.Namespace) -> None:
    batching = BatchingModel.instant() if ns.instant else BatchingModel.from_targets(
        single_stream_tps=ns.single_stream_tps, plateau_tps=ns.plateau_tps, plateau_batch=ns.plateau_batch)
    host = SimHost(gpus=ns.gpus, gpu_name=ns.gpu_name, total_mib=ns.total_mib, worker_mem_mib=ns.worker_mem_mib,
                   stuck_workers=ns.stuck_workers,
                   stray_holder=False if ns.stray_holder is None else ns.stray_holder,
                   nvml_monitor=not ns.no_monitor, persistence_daemon=ns.persistenced,
                   model=ns.model, load_time=ns.load_time, batching=batching,
                   faults=FaultPlan(ns.fault, ns.fault_every))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with host:
        print(f"sim dir     {host.sim_dir}")
        print(f"API         {host.api_url}  (model {host.model})")
        print(f"service pid {host.service_pid}  pidfile {host.pidfile}")
        print(f"agent args  {' '.join(host.agent_args())}")
        print("Ctrl-C to stop and remove everything.", flush=True)
        await stop.wait()
    print("stopped; every simulated process is gone and the directory removed.", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_run(_parse(argv)))


if __name__ == "__main__":
    main()
