"""The simulated host with real processes: process tree, device files, holder records, the service's
HTTP endpoints, stop / restart semantics, stuck workers, and teardown."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from kimitui.hosts.base import ProcId
from kimitui.hosts.sim import SimHost
from kimitui.hosts.sim.layout import DEFAULT_GPU_NAME
from kimitui.hostside.procfs import read_stat
from kimitui.hostside.procfs import start_time_of as read_start_time
from kimitui.hostside.signals import guarded_signal
from tests.waiting import DEADLINE_S, until

pytestmark = pytest.mark.asyncio(loop_scope="module")


def signal_local(proc: ProcId, sig: int) -> str:
    """The guarded signal the agent sends, called in-process (the test plays the host)."""
    return guarded_signal(proc.pid, proc.start_time, sig)[0]


def alive(proc: ProcId) -> bool:
    return read_start_time(proc.pid) == proc.start_time


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().rstrip("\0").split("\0")


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := read_stat(int(entry))) and st.ppid == pid and st.state != "Z":
            out.append(int(entry))
    return sorted(out)


def mapped_devices(pid: int, dev_dir: str) -> dict[str, str]:
    """device file -> permissions of its mapping in /proc/PID/maps."""
    out = {}
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[5].startswith(dev_dir + "/"):
            out[os.path.basename(parts[5])] = parts[1]
    return out


def open_devices(pid: int, dev_dir: str) -> set[str]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith(dev_dir + "/"):
            out.add(os.path.basename(target))
    return out


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def host() -> AsyncIterator[SimHost]:
    async with SimHost(stuck_workers=2, stray_holder=1, nvml_monitor=True, load_time=0.1) as h:
        yield h


# ----- layout -----

async def test_layout_matches_the_agent_contract(host: SimHost) -> None:
    root = Path(host.sim_dir)
    assert root.name.startswith("kimitui-sim-")
    data = json.loads((root / "gpus.json").read_text())
    assert data["driver"] == "sim-580"
    gpus = data["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["name"] for g in gpus} == {DEFAULT_GPU_NAME}
    assert {(g["total_mib"], g["reserved_mib"]) for g in gpus} == {(97_887, 616)}
    assert len({g["uuid"] for g in gpus}) == 8 and all(g["uuid"].startswith("GPU-") for g in gpus)
    assert gpus[3]["pci"] == "00000000:03:00.0"
    for name in [f"nvidia{i}" for i in range(8)] + ["nvidiactl", "nvidia-uvm"]:
        st = (root / "dev" / name).stat()
        assert st.st_size == 4096
    assert host.dev_prefix == str(root / "dev" / "nvidia")
    assert host.agent_args() == ["--sim-dir", str(root), "--dev-prefix", str(root / "dev" / "nvidia")]
    assert json.loads((root / "load.json").read_text())["util"] in range(101)


async def test_uuids_are_deterministic() -> None:
    from kimitui.hosts.sim.layout import make_gpus

    assert [g.uuid for g in make_gpus(4)] == [g.uuid for g in make_gpus(4)]
    assert make_gpus(2, name="NVIDIA H200")[0].uuid != make_gpus(2)[0].uuid


# ----- processes -----

async def test_process_tree(host: SimHost) -> None:
    api = host.service_pid
    assert api is not None
    assert Path(host.pidfile).read_text().strip() == str(api)
    argv = cmdline(api)
    assert argv[0] == sys.executable and argv[2:4] == ["-m", "kimitui.hosts.sim.service"]
    assert "--tensor-parallel-size" in argv and argv[argv.index("--model") + 1] == "moonshotai/Kimi-K2.5"
    workers = children(api)
    assert len(workers) == 8
    # as setproctitle leaves a real vLLM worker: its command line is its title, its name the title's 15 bytes
    assert sorted(cmdline(p)[0] for p in workers) == [f"VLLM::Worker_TP{rank}" for rank in range(8)]
    for pid in workers:
        assert len(cmdline(pid)) == 1 and Path(f"/proc/{pid}/comm").read_text().strip() == "VLLM::Worker_TP"
    # the whole service is one session led by the API server, apart from the test runner's
    sessions = {st.session for p in [api, *workers] if (st := read_stat(p)) is not None}
    assert sessions == {api}
    assert {p.pid for p in host.service_tree()} == {api, *workers}


async def test_workers_map_their_device_files_and_record_memory(host: SimHost) -> None:
    dev_dir = str(Path(host.sim_dir) / "dev")
    holders = host.worker_holders()
    assert sorted(holders) == list(range(8))
    assert {p.pid for p in holders.values()} == set(children(host.service_pid or -1))
    for gpu, proc in holders.items():
        maps = mapped_devices(proc.pid, dev_dir)
        assert maps == {f"nvidia{gpu}": "rw-s", "nvidiactl": "rw-s", "nvidia-uvm": "rw-s"}
        assert open_devices(proc.pid, dev_dir) == {f"nvidia{gpu}", "nvidiactl", "nvidia-uvm"}
        rec = json.loads((Path(host.sim_dir) / "holders" / f"{proc.pid}.json").read_text())
        assert rec["pid"] == proc.pid
        assert rec["start_time"] == read_start_time(proc.pid)
        assert rec["mem_mib"] == {str(gpu): 92_411}


async def test_monitor_opens_without_mapping_and_stray_maps_without_memory(host: SimHost) -> None:
    dev_dir = str(Path(host.sim_dir) / "dev")
    mon, stray = host.monitor_proc, host.stray_proc
    assert mon is not None and stray is not None and alive(mon) and alive(stray)
    assert open_devices(mon.pid, dev_dir) == {f"nvidia{i}" for i in range(8)} | {"nvidiactl", "nvidia-uvm"}
    assert mapped_devices(mon.pid, dev_dir) == {}
    assert mapped_devices(stray.pid, dev_dir) == {"nvidia1": "rw-s", "nvidiactl": "rw-s", "nvidia-uvm": "rw-s"}
    holder_pids = {int(p.stem) for p in (Path(host.sim_dir) / "holders").glob("*.json")}
    assert mon.pid not in holder_pids and stray.pid not in holder_pids
    # neither belongs to the service's session
    assert {mon.pid, stray.pid}.isdisjoint(p.pid for p in host.service_tree())


# ----- HTTP -----

async def test_service_endpoints(host: SimHost) -> None:
    async with httpx.AsyncClient(base_url=host.api_url, timeout=DEADLINE_S) as c:
        assert (await c.get("/health")).status_code == 200
        assert (await c.get("/v1/models")).json()["data"][0]["id"] == "moonshotai/Kimi-K2.5"
        async with c.stream("POST", "/v1/completions", json={
                "model": "moonshotai/Kimi-K2.5", "prompt": "a b c", "max_tokens": 5, "stream": True,
                "ignore_eos": True, "stream_options": {"include_usage": True}}) as r:
            lines = [line async for line in r.aiter_lines() if line]
        assert lines[-1] == "data: [DONE]"
        usage = json.loads(lines[-2][6:])
        assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5
        r = await c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                        "max_tokens": 3})
        assert r.json()["usage"]["completion_tokens"] == 3
        assert (await c.get("/nope")).status_code == 404
        assert (await c.post("/v1/completions", content=b"{")).status_code == 400
    assert host.port == int((Path(host.sim_dir) / "run" / "api.port").read_text())


async def test_gpu_util_follows_load(host: SimHost) -> None:
    load = Path(host.sim_dir) / "load.json"

    def util() -> int:
        return int(json.loads(load.read_text())["util"])

    async with httpx.AsyncClient(base_url=host.api_url, timeout=DEADLINE_S) as c:
        req = asyncio.ensure_future(c.post("/v1/completions", json={"prompt": "x", "max_tokens": 25}))
        await until(lambda: util() > 0, "util to rise under load")
        assert (await req).status_code == 200
    await until(lambda: util() == 0, "util to fall back to 0 when idle")


# ----- stop, stuck workers, restart, teardown -----

async def test_sigterm_leaves_exactly_the_stuck_workers() -> None:
    async with SimHost(gpus=4, stuck_workers=2, nvml_monitor=False, load_time=0.05) as h:
        assert h.stuck_gpus == (2, 3)
        api = h.service_proc
        assert api is not None
        workers = h.worker_holders()
        assert signal_local(api, signal.SIGTERM) == "sent"
        await until(lambda: not alive(api), "the API server to exit")
        await until(lambda: not alive(workers[0]) and not alive(workers[1]), "good workers to exit")
        assert not Path(h.pidfile).exists()
        assert alive(workers[2]) and alive(workers[3])
        assert {p.pid for p in h.service_tree()} == {workers[2].pid, workers[3].pid}
        for gpu in (2, 3):  # orphans: re-parented away from the dead API server
            st = read_stat(workers[gpu].pid)
            assert st is not None and st.ppid != api.pid
        assert await h.health() is None  # the port is free; the stuck workers do not hold it
        # stuck workers still hold memory on the simulated driver's books
        assert sorted(h.worker_holders()) == [2, 3]
        # SIGTERM again does nothing to them; SIGKILL does
        assert signal_local(workers[2], signal.SIGTERM) == "sent"
        for gpu in (2, 3):
            assert signal_local(workers[gpu], signal.SIGKILL) == "sent"
        await until(lambda: not alive(workers[2]) and not alive(workers[3]), "SIGKILL to take effect")
        assert h.worker_holders() == {}
        assert h.service_tree() == []


async def test_sigkill_of_api_server_and_restart() -> None:
    async with SimHost(gpus=3, stuck_workers=1, nvml_monitor=False, load_time=0.25) as h:
        api = h.service_proc
        assert api is not None
        workers = h.worker_holders()
        port = h.port
        assert signal_local(api, signal.SIGKILL) == "sent"
        # the kernel's parent-death signal (SIGTERM) ends the well-behaved workers, not the stuck one
        await until(lambda: not alive(workers[0]) and not alive(workers[1]), "workers to follow")
        assert alive(workers[2])
        # restart: a new API server and new workers on the same port; 503 while they load, then 200
        new = await h.start_service(wait=False)
        assert new != api and h.port == port
        statuses: list[int | None] = []

        async def poll() -> bool:
            statuses.append(await h.health())
            return statuses[-1] == 200

        await until(poll, "the new service healthy")
        assert 503 in statuses and statuses[-1] == 200
        assert Path(h.pidfile).read_text().strip() == str(new.pid)
        fresh = h.worker_holders()
        assert sorted(fresh) == [0, 1, 2] and set(fresh.values()).isdisjoint(workers.values())
        assert alive(workers[2])  # the old stuck orphan still runs beside the new service...
        assert h.gpu_holders()[2] == [workers[2], fresh[2]]  # ...and still holds memory on GPU 2
        assert fresh[2].pid in children(new.pid) and workers[2].pid not in children(new.pid)
        await h.stop_service()
        assert h.service_proc is None
        started = h.started_procs()
        assert {workers[2], fresh[2]} <= set(started)
    for proc in [api, new, *workers.values(), *fresh.values(), *started]:
        assert not alive(proc)


async def test_close_kills_everything_and_removes_the_dir() -> None:
    h = SimHost(gpus=2, stuck_workers=2, stray_holder=True, nvml_monitor=True, load_time=0.05)
    await h.start()
    sim_dir = h.sim_dir
    procs = h.started_procs()
    assert len(procs) == 1 + 2 + 2  # API server, 2 workers, monitor, stray
    await h.stop_service()  # leaves the two stuck workers as orphans
    assert len(h.started_procs()) == 4
    await h.close()
    assert [p for p in procs if alive(p)] == []
    assert not Path(sim_dir).exists()
    await h.close()  # idempotent


async def test_nothing_survives_an_owner_killed_hard(tmp_path: Path) -> None:
    script = (
        "import asyncio, json, sys\n"
        "from kimitui.hosts.sim import SimHost\n"
        "async def main():\n"
        "    h = SimHost(gpus=2, stuck_workers=1, stray_holder=True, load_time=0.05)\n"
        "    await h.start()\n"
        "    print(json.dumps([[p.pid, p.start_time] for p in h.started_procs()]) + '\\t' + h.sim_dir, flush=True)\n"
        "    await asyncio.Event().wait()\n"
        "asyncio.run(main())\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(owner.stdout.readline), DEADLINE_S)
    finally:
        owner.kill()
        owner.wait()
    raw, _, sim_dir = line.strip().partition("\t")
    procs = [ProcId(pid, start) for pid, start in json.loads(raw)]
    try:
        assert len(procs) == 5
        # the sim's watchdog notices its owner is gone; stuck workers included, everything exits
        await until(lambda: not any(alive(p) for p in procs), "the orphaned sim to exit")
        await until(lambda: not Path(sim_dir).exists(), "the API server to remove the sim dir")
    finally:  # on failure, leave nothing behind either
        for p in procs:
            signal_local(p, signal.SIGKILL)
        shutil.rmtree(sim_dir, ignore_errors=True)


async def test_cli_runs_in_the_foreground_until_sigterm() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "kimitui.hosts.sim", "--gpus", "2", "--stuck-workers", "1",
                             "--load-time", "0.05", "--no-monitor"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        while not any(line.startswith("Ctrl-C") for line in lines):
            line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), DEADLINE_S)
            assert line, f"sim CLI ended early: {lines}"
            lines.append(line)
        info = {line.split()[0]: line.split()[1] for line in lines if line[:3] in ("sim", "API", "ser")}
        url, sim_dir = info["API"], Path(lines[0].split()[-1])
        async with httpx.AsyncClient() as c:
            assert (await c.get(url + "/health")).status_code == 200
        tree_pid = int(Path(sim_dir / "run" / "vllm.pid").read_text())
        members = [ProcId(p, read_start_time(p) or -1) for p in [tree_pid, *children(tree_pid)]]
        assert len(members) == 3
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.wait_for(asyncio.to_thread(proc.wait), DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0
    assert not sim_dir.exists()
    assert not any(alive(p) for p in members)
