"""Helpers for the agent and telemetry tests (no tests here): a simulated driver folder and real child
processes that hold its device files the way a CUDA process (mapped) or an NVML monitor (open) does."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kimitui.hosts.local import LocalHost
from kimitui.hostside.procfs import start_time_of
from tests.pythons import agent_pythons, label, require
from tests.waiting import DEADLINE_S

GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def make_sim_dir(root: Path, gpus: int = 2) -> Path:
    (root / "dev").mkdir(parents=True, exist_ok=True)
    (root / "holders").mkdir(exist_ok=True)
    spec = {"driver": "sim-580", "gpus": [
        {"index": i, "uuid": f"GPU-sim-{i}", "name": GPU_NAME, "total_mib": 97887, "reserved_mib": 616,
         "pci": f"00000000:{i + 1:02x}:00.0"} for i in range(gpus)]}
    (root / "gpus.json").write_text(json.dumps(spec))
    for name in [f"nvidia{i}" for i in range(gpus)] + ["nvidiactl", "nvidia-uvm"]:
        (root / "dev" / name).write_bytes(b"\0" * 4096)  # a page, so holders can mmap it
    return root


HOLDER_CODE = r"""
import json, mmap, os, sys
sim, mode, gpus, mib = sys.argv[1], sys.argv[2], [int(g) for g in sys.argv[3].split(",")], float(sys.argv[4])
files = [open(os.path.join(sim, "dev", n), "r+b") for n in ["nvidia%d" % g for g in gpus] + ["nvidiactl", "nvidia-uvm"]]
maps = [mmap.mmap(f.fileno(), 4096) for f in files] if mode in ("cuda", "stray") else []
if mode == "cuda":
    from kimitui.hostside.procfs import start_time_of
    start = start_time_of(os.getpid())
    tmp = os.path.join(sim, "holders", ".%d.tmp" % os.getpid())
    with open(tmp, "w") as fh:
        json.dump({"pid": os.getpid(), "start_time": start, "mem_mib": {str(g): mib for g in gpus}}, fh)
    os.rename(tmp, os.path.join(sim, "holders", "%d.json" % os.getpid()))
print("ready", flush=True)
sys.stdin.read()  # until the test closes our stdin (or kills us)
"""


class Children:
    """Real child processes, each ended (stdin closed, then killed) at teardown."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def holder(self, sim: Path, mode: str, gpus: str = "0", mib: float = 0.0) -> subprocess.Popen[str]:
        """mode: cuda (maps the device files, writes its holder file), handle (opens only), stray (maps,
        no holder file: a CUDA-like holder the driver shows no memory for)."""
        proc = subprocess.Popen([sys.executable, "-c", HOLDER_CODE, str(sim), mode, gpus, str(mib)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.procs.append(proc)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 10.0)
        assert ready and proc.stdout.readline().strip() == "ready", "holder did not start"
        return proc

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()


@pytest.fixture
def children() -> Iterator[Children]:
    kids = Children()
    yield kids
    kids.close()


def start_time(pid: int) -> int:
    start = start_time_of(pid)
    assert start is not None, f"pid {pid} is gone"
    return start


def pid_gone(pid: int) -> bool:
    return start_time_of(pid) is None


async def next_matching(lines: AsyncIterator[str], pred: Callable[[dict[str, Any]], bool],
                        timeout: float = DEADLINE_S) -> dict[str, Any]:
    """The next agent line (as JSON) that satisfies pred, within tests/waiting.py's deadline."""
    import asyncio

    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        assert left > 0, "no matching agent line before the deadline"
        line = await asyncio.wait_for(anext(lines), left)
        data = json.loads(line)
        if pred(data):
            return data


def procs_by_pid(sample: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {p["pid"]: p for p in sample["procs"]}


def agent_env_python() -> str:
    return os.environ.get("KIMITUI_TEST_PYTHON", sys.executable)


PYTHONS = agent_pythons()


@pytest.fixture(params=PYTHONS, ids=[label(p) for p in PYTHONS])
async def host(request: pytest.FixtureRequest) -> AsyncIterator[LocalHost]:
    """A local host whose agent runs under each python the suite tests (the oldest supported, the newest)."""
    h = LocalHost("box", python=require(request.param))
    try:
        yield h
    finally:
        await h.close()
