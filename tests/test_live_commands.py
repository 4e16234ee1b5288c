"""The live commands end to end: `kimitui watch` on the simulated host and over real SSH, telemetry
through a dropped SSH connection, and one-line errors for hosts without a driver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kimitui.core.events import ConnectionState, HostSample
from kimitui.core.replay import Player
from kimitui.core.runfile import RunReader, RunWriter
from kimitui.core.session import Session
from kimitui.hosts.sim.host import SimHost
from kimitui.hosts.ssh import SshHost
from kimitui.hosts.telemetry import TelemetrySource
from kimitui.hostside.procfs import start_time_of
from tests.sshd import SshServer, sshd_server
from tests.waiting import DEADLINE_S, wait_until

KIMITUI = [sys.executable, "-m", "kimitui"]


def run_cli(args: list[str], tmp_path: Path, timeout: float = 90, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"), **env)
    return subprocess.run([*KIMITUI, *args], capture_output=True, text=True, timeout=timeout, env=full_env,
                          stdin=subprocess.DEVNULL)


def alive(pid: int) -> bool:
    return start_time_of(pid) is not None


def test_watch_demo_prints_json_samples_records_them_and_leaves_nothing(tmp_path: Path) -> None:
    res = run_cli(["watch", "--host", "demo", "--count", "3", "--json", "--interval", "0.2"], tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 3
    samples = [json.loads(line) for line in lines]
    assert [s["seq"] for s in samples] == [1, 2, 3]
    for s in samples:
        assert len(s["gpus"]) == 8 and all(g["uuid"].startswith("GPU-") for g in s["gpus"])
        assert all(g["mem_used_mib"] == pytest.approx(92411, abs=1) for g in s["gpus"])
        kinds = {p["kind"] for p in s["procs"]}
        assert kinds == {"cuda", "handle"} and all(isinstance(p["pid"], int) for p in s["procs"])
    # the simulated host is gone: its sim dir and every process of it
    sim_dir = next(line.split("ready: ")[1].split(",")[0] for line in res.stderr.splitlines() if "ready: " in line)
    assert not Path(sim_dir).exists()
    pids = {p["pid"] for s in samples for p in s["procs"]}
    wait_until(lambda: not any(alive(p) for p in pids), "every process of the simulated host gone")
    # the session was recorded and replays
    runs = list((tmp_path / "data" / "kimitui" / "runs").glob("*.jsonl"))
    assert len(runs) == 1 and str(runs[0]) in res.stderr
    reader = RunReader(runs[0])
    assert reader.types.count("sample") == 3 and "connection" in reader.types
    player = Player(reader)
    player.to_end()
    assert len(player.session.state.gpus) == 8


def test_watch_local_without_a_driver_is_one_line(tmp_path: Path) -> None:
    res = run_cli(["watch", "--host", "local", "--count", "1"], tmp_path)
    assert res.returncode == 2
    assert res.stdout == ""
    assert "Traceback" not in res.stderr
    err = [line for line in res.stderr.splitlines() if line.startswith("kimitui:")]
    assert len(err) == 1 and "no NVIDIA driver" in err[0]


def test_default_command_without_gpu_offers_the_demo(tmp_path: Path) -> None:
    res = run_cli([], tmp_path)
    assert res.returncode == 1
    assert "no NVIDIA driver" in res.stderr and "kimitui demo" in res.stderr
    assert "Traceback" not in res.stderr


def test_bad_interval_and_bad_target_are_one_line(tmp_path: Path) -> None:
    res = run_cli(["watch", "--host", "demo", "--interval", "0.01"], tmp_path)
    assert res.returncode == 2 and "out of range" in res.stderr and "Traceback" not in res.stderr
    res = run_cli(["watch", "--host", "ssh://-oProxyCommand=evil", "--count", "1"], tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr


def test_an_unresolvable_host_fails_at_once_in_one_line(tmp_path: Path) -> None:
    for args in (["watch", "--host", "ssh://gpu-box.does-not-exist.invalid", "--count", "1"],
                 ["connect", "gpu-box.does-not-exist.invalid"],
                 ["cleanup", "--host", "ssh://gpu-box.does-not-exist.invalid", "--service", "none",
                  "--yes", "graceful"]):
        res = run_cli(args, tmp_path)
        assert res.returncode == 2, res.stderr  # fatal at once: no retry (its one line says so, below)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith("kimitui: gpu-box.does-not-exist.invalid: cannot resolve "
                                   "gpu-box.does-not-exist.invalid (")  # (the resolver's words)
        assert lines[0].endswith("); check the name or its ~/.ssh/config entry")


@pytest.fixture(scope="module")
def sshd() -> Iterator[SshServer]:
    with sshd_server() as server:
        yield server


def test_watch_over_ssh_refuses_an_unknown_key_then_reports_no_driver(sshd: SshServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host gpubox\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n  UserKnownHostsFile {home}/.ssh/known_hosts\n")
    res = run_cli(["watch", "--host", "ssh://gpubox", "--count", "1"], tmp_path, HOME=str(home))
    assert res.returncode == 2 and "unknown host key" in res.stderr and "SHA256:" in res.stderr
    assert not (home / ".ssh" / "known_hosts").exists()
    res = run_cli(["watch", "--host", "ssh://gpubox", "--count", "1", "--accept-new-host-key"], tmp_path,
                  HOME=str(home))
    assert "no NVIDIA driver" in res.stderr and res.returncode == 2 and "Traceback" not in res.stderr
    assert "ssh-ed25519" in (home / ".ssh" / "known_hosts").read_text()


@pytest.fixture
async def sim_host() -> AsyncIterator[SimHost]:
    async with SimHost(gpus=2, stuck_workers=0, nvml_monitor=True, load_time=0.05) as host:
        yield host


async def test_telemetry_over_ssh_survives_a_dropped_connection(sim_host: SimHost, sshd: SshServer,
                                                                 tmp_path: Path) -> None:
    """The agent runs over a real SSH connection (against the simulated driver's files); the connection is
    dropped mid-stream: the state goes lost, the source reconnects, samples resume, the gap is recorded."""
    host = SshHost(sshd.target, known_hosts=str(sshd.known_hosts), client_keys=[str(sshd.client_key)],
                   config_paths=[], close_grace=0.3)
    host.backoff = (0.2, 0.5)
    source = TelemetrySource(host, interval=0.1, sim_dir=sim_host.sim_dir, dev_prefix=sim_host.dev_prefix)
    path = tmp_path / "ssh-run.jsonl"
    session = Session(RunWriter(path, host=host.name))
    states: list[str] = []
    samples_after_drop = 0
    dropped = False
    deadline = time.monotonic() + DEADLINE_S  # the events are the wait: no condition to poll
    try:
        async for ev in source.events():
            session.publish(ev)
            assert time.monotonic() < deadline, f"timed out; states so far {states}"
            if isinstance(ev, ConnectionState):
                states.append(ev.state)
            elif isinstance(ev, HostSample):
                assert {g.index for g in ev.gpus} == {0, 1}
                if not dropped and ev.seq >= 3:
                    assert sshd.drop_connections(), "no SSH connection to drop"
                    dropped = True
                elif dropped and "lost" in states:
                    samples_after_drop += 1
                    if samples_after_drop >= 2:
                        break
    finally:
        source.stop()
        await host.close()
        session.close()
    assert states[:2] == ["connecting", "connected"]
    assert "lost" in states and states[-1] == "connected"
    assert session.state.connection == "connected" and len(session.state.gpus) == 2
    reconnect = [e for e in RunReader(path).events() if isinstance(e, ConnectionState) and e.gap_s]
    assert len(reconnect) == 1 and reconnect[0].gap_s > 0  # the time without samples, recorded
    assert any("lost" in entry.message for entry in session.state.log)


# --- a reader that goes away (| head) ---------------------------------------------------------------------

def reader_gone(args: list[str], tmp_path: Path, timeout: float = 60) -> tuple[int, str]:
    """Run with a stdout pipe whose reading end is closed at once: every write fails as under ``| head``."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        res = subprocess.run([*KIMITUI, *args], stdout=write_end, stderr=subprocess.PIPE, text=True,
                             timeout=timeout, stdin=subprocess.DEVNULL,
                             env=dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data")))
    finally:
        os.close(write_end)
    return res.returncode, res.stderr


def test_replay_summary_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    rc, err = reader_gone(["replay", "--summary", "real-cleanup-2x-h200"], tmp_path)
    assert rc == 141 and err == "", err


def test_watch_into_a_closed_pipe_exits_quietly_and_tears_the_demo_down(tmp_path: Path) -> None:
    rc, err = reader_gone(["watch", "--host", "demo", "--json", "--interval", "0.2"], tmp_path)
    assert rc == 141, err
    assert "Traceback" not in err and "Exception ignored" not in err and "Broken pipe" not in err, err
    sim_dir = next(line.split("ready: ")[1].split(",")[0] for line in err.splitlines() if "ready: " in line)
    assert not Path(sim_dir).exists()
    (run,) = (tmp_path / "data" / "kimitui" / "runs").glob("*.jsonl")
    assert any(isinstance(e, HostSample) for e in RunReader(run).events())  # the sample it could not print
