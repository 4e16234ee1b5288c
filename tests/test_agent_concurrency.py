"""The agent never blocks: a pidfile that is a FIFO (or any file that is not regular) is refused at once
with a one-line reason, and a request that waits on something (here a driver query held by the test until
it releases it) never delays a stat, scan, signal or ping sent after it. Oldest and newest python."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimitui.cleanup.services import PidService
from kimitui.hosts.base import HostError, ProcId, RequestFailed
from kimitui.hosts.local import LocalHost
from tests.agent_helpers import host as host  # a fixture: a local agent under each python
from tests.pythons import agent_pythons
from tests.waiting import DEADLINE_S, until

PYTHONS = agent_pythons()
ANSWER_S = DEADLINE_S
"""A deadline for an answer that comes at once when nothing blocks the agent (tests/waiting.py's, for a loaded machine);
without the fix the answer never comes before the blocked request ends, which the test holds until after."""




@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "600"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def start_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        return int(fh.read().rpartition(b")")[2].split()[19])


async def test_a_fifo_pidfile_is_refused_at_once_and_the_agent_goes_on(host: LocalHost, tmp_path: Path) -> None:
    fifo = tmp_path / "service.pid"
    os.mkfifo(fifo)
    with pytest.raises(HostError, match="not a regular file: a FIFO"):
        await asyncio.wait_for(host.read_file(str(fifo)), ANSWER_S)
    with pytest.raises(RequestFailed) as err:
        await asyncio.wait_for(host.request("read_file", {"path": "/dev/zero"}), ANSWER_S)
    assert err.value.kind == "not_regular" and "a character device" in str(err.value)
    # the service whose pidfile it is: one line saying why, nothing signalled
    procs = await asyncio.wait_for(PidService(pidfile=str(fifo)).processes(host), ANSWER_S)
    said = procs.missing or procs.why
    assert not procs.pids and procs.main_pid is None
    assert "not a regular file: a FIFO" in said and "\n" not in said
    assert (await asyncio.wait_for(host.request("ping"), ANSWER_S))["agent_pid"] == host.link.hello.pid  # type: ignore[union-attr]


async def test_a_pidfile_larger_than_its_cap_is_refused(host: LocalHost, tmp_path: Path) -> None:
    big = tmp_path / "service.pid"
    big.write_bytes(b"1234\n" + b"0" * (64 * 1024))
    procs = await PidService(pidfile=str(big)).processes(host)
    assert not procs.pids and "larger than 65536 bytes" in (procs.missing or procs.why)


async def test_a_slow_request_never_delays_a_stat_scan_or_signal(host: LocalHost, tmp_path: Path,
                                                                 sleeper: subprocess.Popen[bytes]) -> None:
    started, release = tmp_path / "started", tmp_path / "release"
    os.mkfifo(release)
    smi = tmp_path / "nvidia-smi"  # a driver query that blocks until the test writes to the FIFO
    smi.write_text(f"#!/bin/sh\ntouch {started}\nread line < {release}\necho 'held: '$line\nexit 9\n")
    smi.chmod(0o755)
    probe = asyncio.create_task(host.request("probe", {"no_nvml": True, "nvidia_smi": str(smi)}, timeout=60.0))
    await until(started.exists, "the slow query to start")

    stat = await asyncio.wait_for(host.stat([sleeper.pid]), ANSWER_S)
    assert stat == {sleeper.pid: (start_of(sleeper.pid), "S")}
    scan = await asyncio.wait_for(host.scan_processes(), ANSWER_S)
    assert sleeper.pid in {p["pid"] for p in scan["procs"]}
    sent = await asyncio.wait_for(host.signal(ProcId(sleeper.pid, start_of(sleeper.pid)), signal.SIGTERM),
                                  ANSWER_S)
    assert sent.outcome == "sent" and sleeper.wait(ANSWER_S) == -signal.SIGTERM
    assert not probe.done(), "the slow query ended before the others were answered: nothing was shown"

    with open(release, "w") as fh:  # now the query ends, with its own error
        fh.write("released\n")
    with pytest.raises(RequestFailed, match="held: released") as err:
        await asyncio.wait_for(probe, ANSWER_S)
    assert err.value.kind == "nodriver"
