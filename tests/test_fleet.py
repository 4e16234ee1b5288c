"""Issue 39: the fleet. The demo's simulated hosts (their own process, as remote hosts are) read directly: 8 hosts
x 8 GPUs with the troubled ones first, a host that goes down and comes back, a slow host that holds nobody back;
``kimitui fleet --demo 8 --json`` and its recorded run; the command line's one-line errors; the SSH source on a
real loopback sshd (our agent over SSH on a simulated driver) beside a host that refuses connections."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimitui.core.events import FleetHost, FleetSample, decode
from kimitui.core.fleet_state import CAPPED, DOWN, HELD, OK, XID, attention
from kimitui.core.state import fold_all
from kimitui.fleet.demo import DemoFleet, DemoReader
from kimitui.fleet.reader import rounds
from kimitui.fleet.ssh_reader import SshFleetReader
from kimitui.hosts.ssh import SshHost
from kimitui.hosts.telemetry import TelemetrySource
from tests.agent_helpers import Children, children, make_sim_dir  # noqa: F401
from tests.sshd import SshServer, free_port, sshd_server
from tests.support import ROOT
from tests.waiting import until


async def _one(reader: DemoReader, deadline: float = 2.0) -> FleetSample:
    async for sample in rounds(reader, deadline, 1):
        return sample
    raise AssertionError("no round")


async def test_eight_demo_hosts_read_directly_with_what_needs_the_operator_first() -> None:
    async with DemoFleet(8) as fleet:
        reader = DemoReader(fleet.hosts)
        try:
            sample = await _one(reader)
        finally:
            await reader.close()
    state = fold_all([sample]).fleet
    assert state is not None and state.counts() == {"hosts": 8, "gpus": 64, "up": 8}
    order = [(h.name, attention(h)[0]) for h in state.ordered()]
    assert order[:4] == [("demo-02", HELD), ("demo-04", XID), ("demo-03", CAPPED), ("demo-01", OK)], order
    assert attention(state.hosts["demo-03"])[1] == ["GPU 5: power cap"]
    held = state.hosts["demo-02"]
    assert attention(held)[1] == ["GPUs 2,3: 81,920 MiB held with no service"] and held.service == ""
    assert [(g.holders, g.service_holders) for g in held.gpus[2:4]] == [(1, 0), (1, 0)]
    assert attention(state.hosts["demo-04"])[1] == ["GPU 6: XID 79", "GPU 7: PCIe Gen4 x16 of Gen5 x16"]
    fine = state.hosts["demo-01"]
    assert fine.service == "vllm.service" and all((g.holders, g.service_holders) == (1, 1) for g in fine.gpus)
    assert all(g.mem_total_mib == 97_887.0 and g.name.startswith("NVIDIA RTX PRO 6000") for g in fine.gpus)


async def test_a_host_that_goes_down_comes_back_and_a_slow_one_holds_nobody_back() -> None:
    async with DemoFleet(4) as fleet:
        reader = DemoReader(fleet.hosts)
        try:
            await fleet.tell("down demo-02")
            await fleet.tell("slow demo-03 5")
            sample = await _one(reader, 1.0)
            states = {h.name: (h.state, h.detail) for h in sample.hosts}
            assert states["demo-02"] == ("down", "connection refused"), states
            assert states["demo-03"][0] == "slow" and states["demo-03"][1].startswith("no answer within"), states
            assert states["demo-01"] == ("up", "") and states["demo-04"] == ("up", ""), states
            rank, words = attention(next(h for h in sample.hosts if h.name == "demo-02"))
            assert (rank, words) == (DOWN, ["down: connection refused"])
            await fleet.tell("up demo-02")
            await fleet.tell("slow demo-03 0")
            again = await _one(reader, 2.0)
            assert [(h.name, h.state) for h in again.hosts] == [(f"demo-0{i}", "up") for i in range(1, 5)]
        finally:
            await reader.close()


def _fleet_cli(*args: str, tmp_path: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kimitui", "fleet", *args], cwd=ROOT, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=timeout,
                          env={**__import__("os").environ, "XDG_DATA_HOME": str(tmp_path / "data")})


def test_fleet_demo_json_prints_a_round_a_line_and_records_them(tmp_path: Path) -> None:
    res = _fleet_cli("--demo", "8", "--json", "--count", "2", "--interval", "0.5", tmp_path=tmp_path)
    assert res.returncode == 0, res.stderr
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(d["seq"], d["source"], len(d["hosts"])) for d in lines] == [(0, "demo", 8), (1, "demo", 8)]
    for host in lines[-1]["hosts"]:
        assert host["state"] == "up" and len(host["gpus"]) == 8, host
        for g in host["gpus"]:
            assert {"index", "name", "mem_used_mib", "mem_total_mib", "util_pct", "temp_c", "power_w",
                    "holders"} <= set(g), g
    assert next(h for h in lines[-1]["hosts"] if h["name"] == "demo-02")["needs"] == [
        "GPUs 2,3: 81,920 MiB held with no service"]
    (run,) = (tmp_path / "data" / "kimitui" / "runs").glob("*fleet*.jsonl")
    events = [decode(line) for line in run.read_text().splitlines()[1:]]
    fleet = fold_all([e for e in events if isinstance(e, FleetSample)]).fleet
    assert fleet is not None and fleet.rounds == 2 and fleet.counts()["gpus"] == 64
    assert "recording this session to" in res.stderr
    summary = subprocess.run([sys.executable, "-m", "kimitui", "replay", str(run), "--summary"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
    assert summary.returncode == 0, summary.stderr
    assert "fleet     8 hosts (8 up), 64 GPUs, 2 rounds from demo (8 simulated hosts)" in summary.stdout
    assert "          demo-02: GPUs 2,3: 81,920 MiB held with no service" in summary.stdout


@pytest.mark.parametrize(("args", "words"), [
    ((), "name one fleet"),
    (("--demo", "2", "--prometheus", "http://x:9090"), "name one fleet"),
    (("--prometheus", "auto"), "--prometheus auto starts a Prometheus for the demo's hosts"),
    (("--demo", "0"), "--demo 0: 1 to 1024 hosts"),
    (("a", "b", "a"), "host a is named twice"),
    (("--hosts-file", "/nonexistent/hosts"), "--hosts-file /nonexistent/hosts: No such file or directory"),
    (("--demo", "2", "--interval", "0"), "--interval 0 is out of range"),
    (("--prometheus", "prom:9090"), "--prometheus prom:9090: not an http(s) URL"),
])
def test_a_bad_command_line_is_one_line(tmp_path: Path, args: tuple[str, ...], words: str) -> None:
    res = _fleet_cli(*args, tmp_path=tmp_path, timeout=60)
    assert res.returncode == 2 and res.stdout == "", res
    assert len(res.stderr.splitlines()) == 1 and words in res.stderr, res.stderr


# --- over SSH ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server() -> Iterator[SshServer]:
    with sshd_server() as s:
        yield s


async def test_the_ssh_fleet_reads_each_agent_and_says_which_host_does_not_answer(server: SshServer,
                                                                                tmp_path: Path,
                                                                                children: Children) -> None:  # noqa: F811
    sim = make_sim_dir(tmp_path / "sim", gpus=2)
    spec = json.loads((sim / "gpus.json").read_text())
    spec["gpus"][1]["pcie_best"] = [4, 16]  # a Gen5 card whose slot trains to Gen4
    (sim / "gpus.json").write_text(json.dumps(spec))
    children.holder(sim, "cuda", "1", 1000.0)  # GPU 1 busy at its power limit; GPU 0 idle
    (sim / "load.json").write_text(json.dumps({"util": 100}))
    (sim / "xid.json").write_text(json.dumps({"0": 79}))  # GPU 0 fell off the bus once
    live = SshHost(server.target, known_hosts=str(server.known_hosts), client_keys=[str(server.client_key)],
                   config_paths=[], close_grace=0.3)
    dead = SshHost(f"root@127.0.0.1:{free_port()}", known_hosts="/dev/null", config_paths=[])
    dead.backoff = (0.05, 0.1, 0.2)
    reader = SshFleetReader({"gpu-a": TelemetrySource(live, interval=0.2, sim_dir=str(sim)),
                             "gpu-b": TelemetrySource(dead, interval=0.2)}, interval=0.2)
    try:
        first = {h.name: h.state for h in await reader.read(1.0)}
        assert first == {"gpu-a": "connecting", "gpu-b": "connecting"}, first
        rows: dict[str, object] = {}

        async def both_known() -> bool:
            rows.update({h.name: h for h in await reader.read(1.0)})
            return [getattr(rows[n], "state", "") for n in ("gpu-a", "gpu-b")] == ["up", "down"]

        await until(both_known, "gpu-a up and gpu-b down")
        up, down = rows["gpu-a"], rows["gpu-b"]
        assert [g.index for g in up.gpus] == [0, 1] and all(g.mem_total_mib == 97887 for g in up.gpus)  # type: ignore[attr-defined]
        assert [g.holders for g in up.gpus] == [0, 1]  # type: ignore[attr-defined]
        # the agent's clock caps and link, read over SSH: the busy GPU's link below its maximum is said
        assert [(g.throttle, g.link) for g in up.gpus] == [([], ""), (["power cap"], "PCIe Gen4 x16 of Gen5 x16")]  # type: ignore[attr-defined]
        assert [g.xid for g in up.gpus] == [79, 0]  # type: ignore[attr-defined]
        assert attention(up) == (XID, ["GPU 0: XID 79", "GPU 1: power cap",  # type: ignore[arg-type]
                                       "GPU 1: PCIe Gen4 x16 of Gen5 x16"])
        assert "refused" in down.detail.lower() or "reconnecting" in down.detail, down  # type: ignore[attr-defined]
        assert attention(down)[0] == DOWN  # type: ignore[arg-type]
    finally:
        await asyncio.wait_for(reader.close(), 30)


async def test_a_recorded_fleet_run_replays_in_the_fleet_view(tmp_path: Path) -> None:
    from kimitui.commands.fleet import ReplayedRounds, is_fleet_run
    from kimitui.core.runfile import RunReader, RunWriter
    from kimitui.core.session import Session
    from kimitui.tui.fleet_app import FleetApp
    from kimitui.tui.views.fleet_view import FleetTable

    async with DemoFleet(4) as fleet:
        reader = DemoReader(fleet.hosts)
        try:
            await fleet.tell("down demo-01")
            recorded = [s async for s in rounds(reader, 0.5, 3)]
        finally:
            await reader.close()
    writer = RunWriter(tmp_path / "fleet.jsonl", host="fleet")
    for ev in recorded:
        writer.append(ev)
    writer.close()
    run = RunReader(tmp_path / "fleet.jsonl")
    assert is_fleet_run(run)
    session = Session()
    app = FleetApp(session, sources=[ReplayedRounds(run, 64.0)], open_host=lambda _name: None)
    async with app.run_test(size=(140, 30)) as pilot:
        await until(lambda: session.state.fleet is not None and session.state.fleet.rounds == 3, "3 rounds replayed")
        await pilot.pause()
        app.redraw()
        keys = app.query_one(FleetTable).row_keys
        assert keys == ["demo-01", "demo-02", "demo-04", "demo-03"], keys  # down, held, XID, power cap


async def test_an_ssh_host_whose_connection_drops_is_down_then_up_again(server: SshServer, tmp_path: Path) -> None:
    """Its sshd's connection processes are killed (a host that went away): the row says down, with its last
    figures and why, while the agent's stream waits to reconnect (a second's backoff here), and up again with the
    next sample."""
    import os
    import signal

    sim = make_sim_dir(tmp_path / "sim", gpus=1)
    h = SshHost(server.target, known_hosts=str(server.known_hosts), client_keys=[str(server.client_key)],
                config_paths=[], close_grace=0.3)
    h.backoff = (1.0, 1.0, 1.0)
    reader = SshFleetReader({"a": TelemetrySource(h, interval=0.2, sim_dir=str(sim))}, interval=0.2)

    async def state(want: str) -> FleetHost | None:
        (row,) = await reader.read(1.0)
        return row if row.state == want else None

    try:
        await until(lambda: state("up"), "the host up")
        before = set(server.connection_pids())
        assert before
        for pid in before:
            os.kill(pid, signal.SIGKILL)
        down = await until(lambda: state("down"), "the host down")
        assert down.gpus and down.detail.startswith(("lost", "reconnecting")), down
        assert attention(down)[0] == DOWN
        await until(lambda: state("up"), "the host up again")
    finally:
        await asyncio.wait_for(reader.close(), 30)


def test_a_prometheus_that_does_not_answer_is_said_once_and_the_exit_status_is_1(tmp_path: Path) -> None:
    res = _fleet_cli("--prometheus", f"http://127.0.0.1:{free_port()}", "--json", "--count", "2", "--interval", "0.5",
                     tmp_path=tmp_path)
    assert res.returncode == 1, res
    rounds_ = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(d["hosts"], d["error"].split(":")[0]) for d in rounds_] == [([], "prometheus at http")] * 2
    said = [line for line in res.stderr.splitlines() if line.startswith("kimitui: fleet: ")]
    assert len(said) == 1 and "cannot connect" in said[0], res.stderr
