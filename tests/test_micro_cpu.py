"""The CPU path: the real workers (torch on CPU, gloo with 2 ranks) started, streamed, parsed and
cancelled through the worker stand-in, end to end from the command line to the recorded run."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from kimitui.bench.micro.runner import LineState, MicroConfig, MicroRunner, parse_worker_line
from kimitui.core.events import Event, GemmRow, LogLine, MicroEnd, MicroEnv, MicroPlan, MicroProgress
from kimitui.core.runfile import RunReader
from kimitui.core.state import fold_all
from kimitui.hosts.base import ProcId
from kimitui.hosts.local import LocalHost
from kimitui.hostside import procfs
from tests.support import ROOT
from tests.waiting import DEADLINE_S, Output, until

TINY = ROOT / "tests" / "fixtures" / "micro" / "tiny-deepseek-config.json"
CPU_ARGS = ["--device", "cpu", "--config", str(TINY), "--tp", "2", "--ms", "1,4", "--sweep-max", "4K",
            "--burst-tokens", "1", "--iters", "3", "--replays", "2", "--target-ms", "2"]


def test_bench_micro_cpu_path_end_to_end(tmp_path: Path) -> None:
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path))
    out = subprocess.run([sys.executable, "-m", "kimitui", "bench", "micro", "--host", "local", "--json",
                          *CPU_ARGS], capture_output=True, text=True, timeout=180, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    by_type: dict[str, list[dict]] = {}
    for d in lines:
        by_type.setdefault(d["type"], []).append(d)
    plan = by_type["micro_plan"][0]
    gemm, ar = by_type["gemm_row"], by_type["allreduce_row"]
    assert len(gemm) == plan["totals"]["gemm"] and len(ar) == plan["totals"]["allreduce"]
    env_gemm = next(e for e in by_type["micro_env"] if e["part"] == "gemm")
    assert env_gemm["backends"]["marlin"].startswith("not available")
    int4 = [r for r in gemm if r["backend"] == "torch-int4"]
    assert {r["name"] for r in int4} == {"moe_w13 (1 expert)", "moe_w2 (1 expert)", "moe (2 of 8)"}
    assert all(r["correct"] and r["rel_err"] < 0.04 for r in int4)
    assert all("honest only near M=1" in r["note"] and "stands in for marlin" in r["note"] for r in int4)
    moe = [r for r in gemm if r["name"].startswith("moe (")]
    assert all(1 <= r["experts"] <= 8 and r["time_us"] > 0 and r["bytes_moved"] > 0 for r in moe)
    assert {(r["m"], r["kernel"], r["correct"]) for r in moe if r["backend"] == "bf16"} == {(1, "grouped_mm", True),
                                                                                        (4, "grouped_mm", True)}
    assert all(r["wrong"] == 0 and r["ranks"] == 2 and r["backend"] == "gloo" for r in ar)
    burst = [r for r in ar if r["burst"] > 1]
    assert len(burst) == 1 and burst[0]["burst"] == 6 and burst[0]["size_bytes"] == 256 * 2  # 2 x 3 layers, M=1
    assert burst[0]["burst_us"] > burst[0]["time_us"] * 5
    assert [(e["part"], e["status"]) for e in by_type["micro_end"]] == [("gemm", "done"), ("allreduce", "done")]
    assert by_type["topology"][0]["summary"].startswith("CPU path")
    # the session is recorded; its fold is what the views and the report show
    run = next((tmp_path / "kimitui" / "runs").glob("*.jsonl"))
    state = fold_all(list(RunReader(run).events()))
    assert state.micro is not None and state.micro.status("gemm") == state.micro.status("allreduce") == "done"
    assert len(state.gemm) == len(gemm) and len(state.allreduce) == len(ar)
    assert state.micro.progress["allreduce"].total == plan["totals"]["allreduce"]
    report = subprocess.run([sys.executable, "-m", "kimitui", "report", str(run)], capture_output=True,
                            text=True, timeout=60, cwd=ROOT)
    assert "moe (2 of 8)" in report.stdout and "honest only near M=1" in report.stdout


def test_ctrl_c_at_the_terminal_cancels_every_rank(tmp_path: Path) -> None:
    """SIGINT to the whole foreground process group, as a terminal's Ctrl-C sends it: kimitui cancels the
    run (its host agent, in a session of its own, is not interrupted mid-request), every rank ends."""
    import signal

    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path))
    argv = [sys.executable, "-m", "kimitui", "bench", "micro", "--host", "local", "--json", "--allreduce",
            *CPU_ARGS[:-8], "--sweep-max", "64M", "--burst-tokens", "1"]
    proc = subprocess.Popen([*argv, "--iters", "200"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env=env, start_new_session=True)
    try:
        assert proc.stdout is not None
        Output(proc.stdout.fileno()).until(b'"allreduce_row"')  # the first all-reduce row: the ranks run
        os.killpg(proc.pid, signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    ends = [json.loads(x) for x in rest.splitlines() if '"micro_end"' in x]
    assert proc.returncode == 130 and [e["status"] for e in ends] == ["cancelled"], err[-1500:]
    assert "connection lost" not in err and "unknown" not in err
    assert group_members(proc.pid) == []  # kimitui's group: nothing of it left


def tiny_config(**kw: object) -> MicroConfig:
    cfg = MicroConfig(config_path=TINY, tp=2, device="cpu", ms=[1, 4], burst_tokens=[1], sweep_max=4096)
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


class Recording:
    """A host whose workers are kept (to look at their process groups afterwards)."""

    def __init__(self, host: LocalHost) -> None:
        self.host, self.name = host, host.name
        self.started: list[Any] = []

    async def start_worker(self, *args: Any, **kw: Any) -> Any:
        w = await self.host.start_worker(*args, **kw)
        self.started.append(w)
        return w

    async def request(self, *args: Any, **kw: Any) -> Any:
        return await self.host.request(*args, **kw)


def group_members(pgid: int) -> list[ProcId]:
    """Live processes of process group ``pgid`` (zombies excluded)."""
    out = []
    for name in os.listdir("/proc"):
        st = procfs.read_stat(int(name)) if name.isdigit() else None
        if st is not None and st.pgrp == pgid and st.state not in ("Z", "X"):
            out.append(ProcId(st.pid, st.start_time))
    return out


async def test_cancel_ends_every_rank() -> None:
    events: list[Event] = []
    cancel = asyncio.Event()
    group: list[ProcId] = []

    async with LocalHost() as host:
        workers = Recording(host)

        def the_ranks() -> list[ProcId]:
            w = workers.started[-1] if workers.started else None
            members = group_members(w.pid) if w is not None and w.pid else []
            return members if len(members) == 3 else []  # the launcher forked both ranks

        async def cancel_once_the_ranks_run() -> None:
            group.extend(await until(the_ranks, "the launcher and both ranks"))
            cancel.set()

        # a long sweep: it would run for minutes if the cancel did not end it
        cfg = tiny_config(parts=["allreduce"], sweep_max=64 << 20, allreduce_args=["--iters", "200"])
        watcher = asyncio.create_task(cancel_once_the_ranks_run())
        res = await asyncio.wait_for(MicroRunner(workers, "local", cfg, events.append, cancel).run(), DEADLINE_S)
        await watcher
        end = next(e for e in events if isinstance(e, MicroEnd))
        assert end.status == "cancelled" and res.cancelled and not res.ok
        worker = workers.started[-1]
        assert worker.cancelled and worker.returncode is not None
        assert len(group) == 3 and any(p.pid == worker.pid for p in group)  # the launcher and both ranks
        assert group_members(worker.pid) == []
        assert all(_gone(p) for p in group)


def _gone(proc: ProcId) -> bool:
    """Exited: no such pid, a zombie, or the pid reused by another process (another start time)."""
    try:
        text = Path(f"/proc/{proc.pid}/stat").read_bytes()  # bytes: a reused pid's comm need not be UTF-8
    except OSError:
        return True
    fields = text.rpartition(b")")[2].split()
    return fields[0] == b"Z" or int(fields[19]) != proc.start_time


async def test_a_host_python_without_torch_fails_in_one_line(tmp_path: Path) -> None:
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "torch.py").write_text("raise ImportError('No module named torch (this host has none)')\n")
    python = tmp_path / "python3"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={stub} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    events: list[Event] = []
    async with LocalHost() as host:
        res = await MicroRunner(host, "local", tiny_config(python=str(python)), events.append).run()
    ends = {e.part: e for e in events if isinstance(e, MicroEnd)}
    assert ends["gemm"].status == "failed" and "cannot import torch" in ends["gemm"].detail
    assert ends["allreduce"].status == "failed" and "cannot import torch" in ends["allreduce"].detail
    assert "\n" not in ends["gemm"].detail and not res.ok
    assert any(isinstance(e, MicroPlan) for e in events) and not any(isinstance(e, GemmRow) for e in events)


def test_worker_lines_become_events_and_bad_lines_warnings() -> None:
    st = LineState()
    ev = parse_worker_line('{"type":"row","name":"o_proj","m":1,"n":7168,"k":1024,"dtype":"bf16","time_us":9.5,'
                           '"backend":"bf16","surprise":1}', "r1", "gemm", st, 5.0)
    assert isinstance(ev, GemmRow) and ev.run_id == "r1" and ev.t == 5.0 and ev.n == 7168 and st.rows == 1
    ev = parse_worker_line('{"type":"progress","item":"x","done":1,"total":4}', "r1", "allreduce", st, 5.0)
    assert isinstance(ev, MicroProgress) and ev.part == "allreduce" and ev.total == 4
    ev = parse_worker_line('{"type":"env","torch":"2.11","backends":{"bf16":"torch.mm"}}', "r1", "gemm", st, 5.0)
    assert isinstance(ev, MicroEnv) and ev.backends == {"bf16": "torch.mm"}
    for bad in ('{"type":"row"', "[1]", '{"type":"nope"}', "Warning: something on stdout"):
        ev = parse_worker_line(bad, "r1", "gemm", st, 5.0)
        assert isinstance(ev, LogLine) and ev.level == "warning" and "bad worker line" in ev.message
    assert parse_worker_line('{"type":"done","rows":3}', "r1", "gemm", st, 5.0) is None and st.done
    ev = parse_worker_line('{"type":"error","message":"rank 1: boom"}', "r1", "allreduce", st, 5.0)
    assert isinstance(ev, LogLine) and ev.level == "error" and st.errors == ["rank 1: boom"]


def test_usage_errors_are_one_line_before_any_host_is_opened(tmp_path: Path) -> None:
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path))
    for extra, expect in ((["--backends", "foo"], "unknown backend foo"),
                          (["--config", str(tmp_path / "missing.json")], "missing.json"),
                          (["--modes", "lazy"], "modes lazy"),
                          (["--tp", "3", "--config", str(TINY)], "not divisible by TP 3")):
        out = subprocess.run([sys.executable, "-m", "kimitui", "bench", "micro", "--host", "local", "--device",
                              "cpu", *extra], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
        assert out.returncode == 2 and expect in out.stderr and out.stderr.count("\n") == 1, (extra, out.stderr)
    assert not (tmp_path / "kimitui").exists()  # nothing was recorded: no session was started
