"""Entry point of the simulated holder processes: ``python -m kimitui.hosts.sim.worker ROLE ...``.

Roles:
- ``tp-worker``: a vLLM tensor-parallel worker. A CUDA context on one GPU (device files open and mapped),
  memory recorded after a simulated load (growing in steps, as weights then KV cache are allocated), then
  ``ready`` on stdout. Exits on SIGTERM, and when its parent (the API server) exits, through
  PR_SET_PDEATHSIG. With ``KIMITUI_SIM_IGNORE_SIGTERM=1`` it ignores SIGTERM the way a stuck worker does,
  so it survives its API server as an orphan and dies only on SIGKILL.
- ``monitor``: an NVML-only monitor: every device file open, none mapped, no memory.
- ``stray``: a forgotten CUDA context on one GPU: device files open and mapped, no memory recorded.
- ``orphaner``: a CUDA context with memory on one GPU that forks ``--children`` workers (they inherit its
  device files and its context, as DataLoader workers do), says ``ready``, and waits to be SIGKILLed: the
  driver keeps its memory, under its dead pid, while the children live.

The flags are shaped like vLLM's; a worker given ``--title`` then reads as one in a process list, its name and
command line both the title (``VLLM::Worker_TP3``), as setproctitle leaves a real one.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from kimitui.hosts.sim.holder import (
    open_devices,
    set_comm,
    set_parent_death_signal,
    set_title,
    write_holder_record,
)
from kimitui.hosts.sim.layout import SimLayout
from kimitui.hosts.sim.watchdog import owner_alive, owner_from_env
from kimitui.hostside import simholder

IGNORE_SIGTERM_ENV = "KIMITUI_SIM_IGNORE_SIGTERM"
WATCH_PERIOD_S = 0.25
LOAD_STEPS = 4


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m kimitui.hosts.sim.worker")
    p.add_argument("role", choices=["tp-worker", "monitor", "stray", "orphaner"])
    p.add_argument("--children", type=int, default=2)
    p.add_argument("--title", default="")
    p.add_argument("--sim-dir", required=True)
    p.add_argument("--gpu", type=int, action="append", default=[], help="GPU index (repeat for several)")
    p.add_argument("--mem-mib", type=int, default=0)
    p.add_argument("--load-time", type=float, default=0.0)
    p.add_argument("--parent-pid", type=int, default=0, help="exit at once if the parent is not this pid")
    return p.parse_args(argv)


def _ready() -> None:
    try:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
    except (BrokenPipeError, OSError):
        pass


def _load(layout: SimLayout, gpus: list[int], mem_mib: int, load_time: float) -> None:
    """Memory grows in LOAD_STEPS steps across ``load_time`` seconds, then stays at ``mem_mib``."""
    start = time.monotonic()
    for step in range(1, LOAD_STEPS + 1):
        deadline = start + load_time * step / LOAD_STEPS
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(left)
        write_holder_record(layout, {g: mem_mib * step // LOAD_STEPS for g in gpus})


def _hold_forever(*, watch_parent: int) -> None:
    """Wait for a signal; exit when the owner is gone, or the parent is gone (when ``watch_parent``)."""
    owner = owner_from_env()
    while True:
        if not owner_alive(owner):
            os._exit(0)
        if watch_parent and os.getppid() != watch_parent:
            os._exit(0)
        time.sleep(WATCH_PERIOD_S)


def _fork_inheritors(layout: SimLayout, gpus: list[int], mem_mib: int, children: int) -> None:
    """Take a context (its memory recorded under this pid), then fork CHILDREN that keep it and the device
    files open until the sim's owner is gone."""
    ctx, _fd = simholder.open_context(str(layout.root))
    simholder.write_holder_record(str(layout.root), {g: mem_mib for g in gpus}, None, ctx)
    for _ in range(children):
        if os.fork() == 0:
            set_comm("pt_data_worker")
            try:
                _hold_forever(watch_parent=0)
            finally:
                os._exit(0)


def main(argv: list[str] | None = None) -> None:
    args = _parse(sys.argv[1:] if argv is None else argv)
    stuck = os.environ.get(IGNORE_SIGTERM_ENV) == "1" and args.role == "tp-worker"
    if stuck:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.title:
        set_title(args.title)
    watch_parent = 0
    if args.role == "tp-worker" and args.parent_pid:
        if not set_parent_death_signal(signal.SIGTERM) and not stuck:
            watch_parent = args.parent_pid  # no prctl: poll for the parent instead
        if os.getppid() != args.parent_pid and not stuck:
            return  # the parent died before the death signal was armed
    layout = SimLayout(Path(args.sim_dir))
    gpus = args.gpu or [0]
    handles = open_devices(layout, gpus, mapped=args.role != "monitor")
    if args.role == "tp-worker":
        _load(layout, gpus, args.mem_mib, args.load_time)
    if args.role == "orphaner":
        _fork_inheritors(layout, gpus, args.mem_mib, args.children)
    _ready()
    try:
        _hold_forever(watch_parent=watch_parent)
    finally:
        handles.close()


if __name__ == "__main__":
    main()
