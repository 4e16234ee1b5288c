"""The simulated driver's side of a real vLLM: copied as ``sitecustomize.py`` into a folder the demo puts first on
the engine's ``PYTHONPATH`` (``kimitui demo --engine vllm``), so every python process of vLLM's tree runs it.

With ``KIMITUI_ENGINE_SIM_DIR`` unset it does nothing (imported as ``kimitui.hosts.sim.vllm_site`` it never
does). Set, it starts a daemon thread (again in a child forked from the process: ``os.register_at_fork``) that
every ``POLL_S``:

- reads the process's command line: once setproctitle has made it ``VLLM::Worker_TPn`` (``VLLM::Worker`` at
  TP=1, ``KIMITUI_ENGINE_TP``: GPU 0; at TP>1 a worker reads ``VLLM::Worker`` until its rank is known, so that
  title alone holds nothing there), the process holds simulated GPU n as the simulator's own workers do
  (``kimitui.hostside.simholder``: the device files open and mapped, its ``holders/<pid>.json`` with
  ``KIMITUI_ENGINE_MEM_MIB``), until it exits: the driver frees the memory then;
- then keeps its record's ``util`` at the share of a core the process used since the last look (the engine
  runs on CPUs: that is how busy its "GPU" is), written when it moves by ``UTIL_STEP`` or more;
- first of all keeps the process to the engine's cores (``KIMITUI_ENGINE_CORES``), before vLLM starts anything;
- ends the whole process group (SIGKILL) when the process that started the demo is gone (``KIMITUI_SIM_OWNER``:
  a ``kill -9`` of kimitui), as the simulated service does; the group is vLLM's (the demo starts its API
  server in a session of its own).

Stdlib only at import (the thread imports kimitui's light ``hostside`` modules when it has a GPU to hold,
``KIMITUI_ENGINE_PKG_ROOT`` appended to ``sys.path`` so that nothing of vLLM's venv is shadowed); it never
raises into vLLM.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time

SIM_DIR_ENV = "KIMITUI_ENGINE_SIM_DIR"
PKG_ROOT_ENV = "KIMITUI_ENGINE_PKG_ROOT"
MEM_ENV = "KIMITUI_ENGINE_MEM_MIB"
TP_ENV = "KIMITUI_ENGINE_TP"
CORES_ENV = "KIMITUI_ENGINE_CORES"
"""The CPUs every process of the engine keeps to (comma-separated), set at its start: the engine stands in for a
GPU host's, whose CPUs the client does not share."""
OWNER_ENV = "KIMITUI_SIM_OWNER"
"""``pid:start_time`` of the process that started the demo (kimitui.hosts.sim.watchdog's)."""
WORKER_TITLE = re.compile(r"VLLM::Worker(?:_TP(\d+))?")
"""A model worker's title (setproctitle): ``VLLM::Worker_TP1``; at TP=1 vLLM 0.32 names its one ``VLLM::Worker``."""
POLL_S = 0.5
UTIL_STEP = 5

_held: list[object] = []
"""The open device files and their maps: referenced for the process's life."""


def gpu_for_title(title: str, tp: int) -> int | None:
    """The simulated GPU a process titled TITLE holds at tensor parallel TP: n for ``VLLM::Worker_TPn``, 0 for
    ``VLLM::Worker`` at TP=1 (at TP>1 that is a worker's title before its rank is known: none yet)."""
    m = WORKER_TITLE.fullmatch(title)
    if m is None:
        return None
    if m.group(1) is None:
        return 0 if tp == 1 else None
    return int(m.group(1))


def _title() -> str:
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            return fh.read().split(b"\0")[0].decode(errors="replace").strip()
    except OSError:
        return ""


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rpartition(b")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _owner_gone(owner: str) -> bool:
    pid, _, start = owner.partition(":")
    return pid.isdigit() and start.isdigit() and _start_time(int(pid)) != int(start)


class _Util:
    """The share of a core this process used between two looks, in %."""

    def __init__(self) -> None:
        self.last = (time.monotonic(), time.process_time())

    def now(self) -> int:
        wall, cpu = time.monotonic(), time.process_time()
        span = wall - self.last[0]
        share = (cpu - self.last[1]) / span if span > 0 else 0.0
        self.last = (wall, cpu)
        return max(0, min(100, round(100 * share)))


def _hold(sim_dir: str, gpu: int, mib: int) -> None:
    """Hold simulated GPU ``gpu`` as the simulator's workers do (kimitui.hostside.simholder)."""
    root = os.environ.get(PKG_ROOT_ENV, "")
    if root and root not in sys.path:
        sys.path.append(root)  # last: vLLM's venv keeps its own packages
    from kimitui.hostside import simholder

    fds, maps = simholder.open_device_files(sim_dir, [gpu])
    _held.extend([*fds, *maps])
    simholder.write_holder_record(sim_dir, {gpu: mib}, 0)


def _watch() -> None:
    sim_dir = os.environ.get(SIM_DIR_ENV, "")
    owner = os.environ.get(OWNER_ENV, "")
    mem = os.environ.get(MEM_ENV, "0")
    mib = int(mem) if mem.isdigit() else 0
    tp_text = os.environ.get(TP_ENV, "1")
    tp = int(tp_text) if tp_text.isdigit() else 1
    gpu: int | None = None
    util, shown = _Util(), 0
    while True:
        if owner and _owner_gone(owner):
            os.killpg(0, signal.SIGKILL)
        if gpu is None:
            gpu = gpu_for_title(_title(), tp)
            if gpu is not None:
                _hold(sim_dir, gpu, mib)
                util = _Util()
        else:
            busy = util.now()
            if abs(busy - shown) >= UTIL_STEP or (busy == 0) != (shown == 0):
                from kimitui.hostside import simholder

                simholder.write_holder_record(sim_dir, {gpu: mib}, busy)
                shown = busy
        time.sleep(POLL_S)


def _guarded() -> None:
    try:
        _watch()
    except Exception as exc:  # never into vLLM: say it once in the engine's log
        print(f"kimitui sitecustomize: the simulated driver's watcher stopped: {type(exc).__name__}: {exc}",
              file=sys.stderr, flush=True)


def _start() -> None:
    threading.Thread(target=_guarded, name="kimitui-sim-holder", daemon=True).start()


def _pin() -> None:
    """Keep to the cores ``KIMITUI_ENGINE_CORES`` names (the engine's share of the machine), where it is set."""
    cores = os.environ.get(CORES_ENV, "")
    try:
        if cores:
            os.sched_setaffinity(0, {int(c) for c in cores.split(",")})
    except (OSError, ValueError):
        pass


def install() -> None:
    """Start the watcher here and in every child forked from here."""
    if not os.environ.get(SIM_DIR_ENV):
        return
    _pin()
    _start()
    os.register_at_fork(after_in_child=_after_fork)


def _after_fork() -> None:
    _held.clear()  # the parent's holder record names the parent; a child holds only what its own title says
    _start()


if __name__ == "sitecustomize":
    install()
