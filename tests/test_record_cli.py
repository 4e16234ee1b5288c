"""``kimitui record``: a real child process recording the simulated host until it is signalled, then replayed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kimitui.core.replay import Player
from kimitui.core.runchunks import index_path, segment_path
from kimitui.core.runfile import RunFileError, RunReader
from kimitui.core.state import fold_all
from tests.support import comparable
from tests.waiting import wait_until

KIMITUI = [sys.executable, "-m", "kimitui"]


def samples_in(path: Path) -> int:
    try:
        return RunReader(path).types.count("sample")
    except (RunFileError, OSError):  # not started yet
        return 0


def start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    return subprocess.Popen([*KIMITUI, "record", *args], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop(proc: subprocess.Popen[str], sig: int) -> tuple[int, str]:
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"kimitui record did not stop on {signal.Signals(sig).name}: {err[-2000:]}")
    return proc.returncode, err


def test_record_the_simulated_host_until_sigint_then_replay(tmp_path: Path) -> None:
    """A recording stopped by SIGINT closes cleanly (its index covers it all), says where it is, and replays to the
    state its events fold to."""
    run = tmp_path / "night.jsonl.gz"
    proc = start(tmp_path, "-o", str(run), "--status-every", "0.5")
    try:
        wait_until(lambda: samples_in(run) >= 12 or proc.poll() is not None, "12 samples recorded")
    finally:
        rc, err = stop(proc, signal.SIGINT)
    assert rc == 0, err
    assert f"recording demo (8 simulated GPUs) to {run}" in err
    assert " recording demo (8 simulated GPUs): " in err, "a status line on stderr"
    assert f"replay: kimitui replay {run}" in err.splitlines()[-1]
    reader = RunReader(run)
    assert reader.warnings == [] and reader.index_notes == [], "closed cleanly: the index covers it all"
    assert reader.header.meta["command"] == "record" and reader.header.meta["simulated"] is True
    assert reader.types.count("sample") >= 12
    events = list(reader.events())
    player = Player(reader)
    player.seek_index(len(reader))
    state = player.session.state
    assert comparable(state) == comparable(fold_all(events))
    assert len(state.gpus) == 8 and state.host == "demo"


def test_record_rotates_by_size_and_stops_on_sigterm(tmp_path: Path) -> None:
    """A recording rotated by size stops cleanly on SIGTERM; each segment is indexed, and the segments replay as one
    run, in time order, to the state their events fold to."""
    run = tmp_path / "rot.jsonl.gz"
    proc = start(tmp_path, "-o", str(run), "--rotate-mb", "0.003", "--interval", "0.1")
    try:
        wait_until(lambda: segment_path(run, 2).exists() or proc.poll() is not None, "a third segment")
    finally:
        rc, err = stop(proc, signal.SIGTERM)
    assert rc == 0, err
    segments = [segment_path(run, n) for n in range(10) if segment_path(run, n).exists()]
    assert len(segments) >= 3 and all(index_path(s).exists() for s in segments)
    assert all(s.stat().st_size < 3000 + 4000 for s in segments[:-1]), "each rotated near the limit"
    reader = RunReader(run)
    assert reader.warnings == []
    assert sum(len(RunReader(s)) for s in segments[1:]) < len(reader), "replay opens the segments as one run"
    events = list(reader.events())
    assert [e.t for e in events] == sorted(e.t for e in events)
    player = Player(reader)
    player.seek_index(len(reader))
    assert comparable(player.session.state) == comparable(fold_all(events))


def test_record_refuses_an_output_it_would_not_write(tmp_path: Path) -> None:
    """record refuses an output it would not write (not .jsonl.gz, or already there) in one line, and leaves an
    existing file as it was."""
    existing = tmp_path / "old.jsonl.gz"
    existing.write_bytes(b"keep me")
    for out, why in ((tmp_path / "plain.jsonl", "name it NAME.jsonl.gz"), (existing, "already exists")):
        res = subprocess.run([*KIMITUI, "record", "-o", str(out)], capture_output=True, text=True, timeout=90,
                             stdin=subprocess.DEVNULL, env=dict(os.environ, XDG_DATA_HOME=str(tmp_path / "d")))
        assert res.returncode == 2 and why in res.stderr, res.stderr
        assert res.stderr.count("kimitui:") == 1
    assert existing.read_bytes() == b"keep me"


def test_record_a_host_without_a_driver_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    """local and SSH targets are opened as the dashboard opens them: a host without a driver is refused
    before anything is recorded."""
    from tests.sshd import sshd_server

    run = tmp_path / "x.jsonl.gz"
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    res = subprocess.run([*KIMITUI, "record", "--host", "local", "-o", str(run)], capture_output=True, text=True,
                         timeout=90, stdin=subprocess.DEVNULL, env=env)
    assert res.returncode == 2 and "no NVIDIA driver" in res.stderr and "Traceback" not in res.stderr
    with sshd_server() as sshd:
        home = tmp_path / "home"
        (home / ".ssh").mkdir(parents=True)
        (home / ".ssh" / "config").write_text(
            f"Host gpubox\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
            f"  IdentityFile {sshd.client_key}\n  UserKnownHostsFile {home}/.ssh/known_hosts\n")
        res = subprocess.run([*KIMITUI, "record", "--host", "ssh://gpubox", "--accept-new-host-key", "-o", str(run)],
                             capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
                             env=dict(env, HOME=str(home)))
    assert res.returncode == 2 and "no NVIDIA driver" in res.stderr and "Traceback" not in res.stderr
    assert [line.startswith("kimitui:") for line in res.stderr.splitlines()].count(True) == 1
    assert not run.exists() and not (tmp_path / "data").exists()
