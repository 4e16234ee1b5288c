"""`kimitui cleanup` end to end: the real CLI as a subprocess against --host demo (the simulated 8-GPU host:
a vLLM-like service whose last two workers ignore SIGTERM, plus an NVML-only monitor), its one-line usage
errors, the terminal consent, and the real cleanup recorded on 2 x H200 in sample_runs/."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kimitui.cleanup.audit import read_audit
from kimitui.cleanup.prompt import parse_ticks, terminal_consent
from kimitui.cleanup.services import PidService, SimService, SupervisorService, SystemdService
from kimitui.cleanup.setup import parse_gpus, parse_service
from kimitui.core.describe import preview_text as preview_table
from kimitui.core.events import ProcRef, StepPreview, Verification, from_dict
from kimitui.core.replay import state_at
from kimitui.core.runfile import RunReader
from kimitui.hostside.procfs import start_time_of
from tests.support import ROOT
from tests.waiting import DEADLINE_S, Output, wait_until

KIMITUI = [sys.executable, "-m", "kimitui"]
REAL_RUN = ROOT / "sample_runs" / "real-cleanup-2x-h200.jsonl.gz"


def run_cli(args: list[str], tmp_path: Path, timeout: float = 120,
            extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"), **(extra_env or {}))
    return subprocess.run([*KIMITUI, "cleanup", *args], capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)


def lines(res: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in res.stdout.splitlines()]


def of(events: list[dict[str, Any]], kind: str, **match: Any) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind and all(e.get(k) == v for k, v in match.items())]


def alive(pid: int, start_time: int | None = None) -> bool:
    start = start_time_of(pid)
    return start is not None and (start_time is None or start == start_time)


def sim_pids(events: list[dict[str, Any]], run_file: Path) -> set[tuple[int, int | None]]:
    """Every sim process the run saw: in the previews, left alone, and in the recorded samples."""
    seen = {(r["pid"], r["start_time"]) for e in of(events, "step_preview") for r in e["targets"] + e["spared"]}
    seen |= {(k["pid"], k["start_time"]) for e in of(events, "cleanup_summary") for k in e["left_alone"]}
    reader = RunReader(run_file)
    for i, ty in enumerate(reader.types):
        if ty == "sample":
            seen |= {(p.pid, p.start_time) for p in reader.event(i).procs}  # type: ignore[attr-defined]
    return seen


def assert_nothing_left(res: subprocess.CompletedProcess[str], events: list[dict[str, Any]]) -> None:
    sim_dir = next(line.split("ready: ")[1].split(",")[0] for line in res.stderr.splitlines() if "ready: " in line)
    assert not Path(sim_dir).exists()
    run_file = Path(of(events, "cleanup_summary")[0]["run_file"])
    procs = sim_pids(events, run_file)
    assert len(procs) >= 10  # API server, 8 workers, monitor
    wait_until(lambda: not [p for p, st in procs if alive(p, st)], "every process of the simulated host gone")


def session_files(res: subprocess.CompletedProcess[str], tmp_path: Path) -> tuple[Path, Path]:
    runs = list((tmp_path / "data" / "kimitui" / "runs").glob("*.jsonl"))
    assert len(runs) == 1 and str(runs[0]) in res.stderr
    audit = tmp_path / "data" / "kimitui" / "audit.log"
    assert audit.exists()
    return runs[0], audit


# --- the real CLI on the simulated host ---------------------------------------------------------------

def test_full_consent_frees_every_gpu_kills_the_stuck_workers_and_spares_the_monitor(tmp_path: Path) -> None:
    """With every step consented, the demo's 8 GPUs end clean: the service (its API server and 8 workers, 2
    of them ignoring SIGTERM) is gone, the stuck workers by SIGKILL, every signal is in the audit log, and
    the NVML monitor is the one process left alone, never signalled. What the agent saw agrees: each
    handle-only holder in the samples is that monitor or a process of the service, none of the service is
    left alone, and a holder read as exiting is one of the service's."""
    res = run_cli(["--host", "demo", "--yes", "graceful,process,device", "--json"], tmp_path)
    assert res.returncode == 0, res.stderr
    events = lines(res)
    assert "Traceback" not in res.stderr
    for e in events[:-1]:  # every line but the summary is a run-file event
        assert from_dict(e).type == e["type"]
    plan = of(events, "cleanup_plan")[0]
    assert plan["manager"] == "sim" and plan["gpus"] == list(range(8))
    graceful = of(events, "step_preview", step="graceful")[0]
    assert len(graceful["targets"]) == 9 and all(isinstance(r["pid"], int) for r in graceful["targets"])
    assert all(c["accepted"] for c in of(events, "consent"))
    stuck = {o["pid"] for o in of(events, "signal_outcome", step="graceful", outcome="survived")}
    assert len(stuck) == 2
    assert {s["pid"] for s in of(events, "signal", signal="SIGKILL")} == stuck
    assert {o["pid"] for o in of(events, "signal_outcome", signal="SIGKILL", outcome="exited")} == stuck
    verification = of(events, "verification")[-1]
    assert verification["clean"] is True and not verification["holders_left"]
    assert len(verification["gpus"]) == 8 and all(g["clean"] and g["used_mib"] <= 64 for g in verification["gpus"])
    assert of(events, "step_result", step="verify")[0]["status"] == "done"
    assert of(events, "phase_end", phase="cleanup")[0]["ok"] is True

    summary = events[-1]
    assert summary["type"] == "cleanup_summary" and summary["clean"] is True
    assert summary["consent_to_clean_s"] is not None and summary["signal_to_clean_s"] is not None
    monitors = {k["pid"] for k in summary["left_alone"]}
    assert len(monitors) == 1
    signalled = {s["pid"] for s in of(events, "signal")}
    assert not monitors & signalled

    run_file, audit = session_files(res, tmp_path)
    reader = RunReader(run_file)
    kinds: dict[str, set[int]] = {}
    for i, ty in enumerate(reader.types):
        if ty == "sample":
            for p in reader.event(i).procs:  # type: ignore[attr-defined]
                kinds.setdefault(p.kind, set()).add(p.pid)
    handles, exiting = kinds.get("handle", set()), kinds.get("exiting", set())
    service = {r["pid"] for r in graceful["targets"]}  # the API server and its workers
    # The monitor the agent saw is the one left alone. The graceful step SIGTERMs the API server, which
    # SIGTERMs its own workers: a worker kimitui never signalled exits too. In exit the kernel unmaps a
    # process's memory before it closes its files, so the agent reads its stat after the maps and fds and
    # calls it exiting (PF_EXITING), no handle. A handle besides the monitor can only be one of the service's
    # (unmapping in user space before it exits).
    assert monitors <= handles and handles - monitors <= service and not monitors & service
    assert exiting <= service
    state = state_at(reader, len(reader))
    assert state.cleanup is not None and state.cleanup.verification is not None
    assert state.cleanup.verification.clean and state.phases[-1].phase == "cleanup" and state.phases[-1].ok
    records = read_audit(audit)
    sent = [r for r in records if r["event"] == "signal" and r["outcome"] == "sent"]
    assert {r["pid"] for r in sent} == {s["pid"] for s in of(events, "signal", outcome="sent")}
    assert all(r["host"] == "demo" and r["operator"] and r["start_time"] and r["cmdline"] for r in sent)
    assert_nothing_left(res, events)


STRAY_ON_3 = {"KIMITUI_DEMO_STRAY_GPU": "3"}
"""The demo with a stray CUDA context on GPU 3 that is not the service's (a forgotten notebook)."""


def test_a_holder_that_is_not_the_service_is_left_alone_without_others_and_named(tmp_path: Path) -> None:
    """A GPU holder that is not the service is never signalled without the others step's own consent, not even by the
    device step: it is left alone, named in the verification and the summary as what keeps its GPU from being clean,
    and the replay and the report say the same from the run."""
    res = run_cli(["--host", "demo", "--yes", "graceful,process,device", "--json", "--verify-s", "0.5"], tmp_path,
                  extra_env=STRAY_ON_3)
    assert res.returncode == 1, res.stderr
    events = lines(res)
    (others,) = of(events, "step_preview", step="others")
    (stray,) = others["targets"]  # the service's workers are not in this group; the stray is
    assert stray["reason"] == "on the GPUs, not the service: maps /dev/nvidia3, no memory listed"
    assert of(events, "step_result", step="others")[0]["status"] == "declined"
    assert stray["pid"] not in {s["pid"] for s in of(events, "signal")}
    (device,) = of(events, "step_result", step="device")  # nor does the device step reach it
    assert device["status"] == "skipped" and "1 on the GPUs, not the service, left alone" in device["reason"]
    verification = of(events, "verification")[-1]
    assert not verification["clean"] and [h["pid"] for h in verification["holders_left"]] == [stray["pid"]]
    assert f"{stray['pid']} (" in verification["detail"] and "others not consented" in verification["detail"]
    assert [k["pid"] for k in events[-1]["others_left"]] == [stray["pid"]]
    assert [g["index"] for g in verification["gpus"] if not g["clean"]] == [3]
    assert_nothing_left(res, events)
    # the replay and the report say the same, from the run's events
    from kimitui.report.markdown import render_report

    reader = RunReader(Path(events[-1]["run_file"]))
    state = state_at(reader, len(reader))
    assert state.cleanup is not None and state.cleanup.steps["others"].status == "declined"
    report = render_report(reader)
    assert "### Step others: declined" in report
    assert f"- still holding: pid {stray['pid']} " in report and "others not consented" in report

    text = run_cli(["--host", "demo", "--yes", "graceful,process,device", "--verify-s", "0.5"], tmp_path,
                   extra_env=STRAY_ON_3)
    assert text.returncode == 1
    assert re.search(r"left alone: pid \d+ \(on the GPUs, not the service: left alone \(others not consented\); "
                     r"--yes others frees it\) holds GPUs 3", text.stdout), text.stdout


def test_with_others_consented_the_holder_that_is_not_the_service_is_freed(tmp_path: Path) -> None:
    """With the others step consented, the holder that is not the service is signalled by that step alone (a SIGTERM)
    and the GPUs end clean."""
    res = run_cli(["--host", "demo", "--yes", "graceful,process,others,device", "--json"], tmp_path,
                  extra_env=STRAY_ON_3)
    assert res.returncode == 0, res.stderr
    events = lines(res)
    (others,) = of(events, "step_preview", step="others")
    (stray,) = others["targets"]
    assert [(s["signal"], s["outcome"]) for s in of(events, "signal", pid=stray["pid"])] == [("SIGTERM", "sent")]
    assert {s["step"] for s in of(events, "signal", pid=stray["pid"])} == {"others"}
    assert of(events, "verification")[-1]["clean"] is True and events[-1]["others_left"] == []
    assert_nothing_left(res, events)


def test_the_demos_exited_owner_is_shown_held_by_its_children_and_freed_by_the_others_step(tmp_path: Path) -> None:
    """KIMITUI_DEMO_ORPHANS: a holder of 4,096 MiB forked two children that inherit its descriptors and was SIGKILLed;
    the simulated driver keeps its memory under the dead pid while they live. The others step previews the children
    as holding that memory and the dead pid as exited, kept by them (never "not visible here"), and frees the GPU."""
    res = run_cli(["--host", "demo", "--gpus", "1", "--yes", "graceful,process,others,device", "--json"], tmp_path,
                  extra_env={"KIMITUI_DEMO_ORPHANS": "1"})
    assert res.returncode == 0, res.stderr
    events = lines(res)
    (others,) = of(events, "step_preview", step="others")
    (dead,) = [r for r in others["spared"] if r["kind"] == "exited"]
    kids = sorted(r["pid"] for r in others["targets"])
    assert len(kids) == 2 and all(r["reason"] == f"on the GPUs, not the service: holds 4,096 MiB of exited pid "
                                  f"{dead['pid']} through inherited descriptors" for r in others["targets"])
    assert dead["reason"] == (f"exited: its 4,096 MiB are kept by pid {kids[0]}, {kids[1]} through the descriptors "
                              "they inherited from it") and dead["mem_mib"] == 4096
    assert not any("not visible" in r["reason"] for e in of(events, "step_preview") for r in e["spared"])
    assert {s["pid"] for s in of(events, "signal", outcome="sent", step="others")} == set(kids)
    assert not of(events, "signal", pid=dead["pid"])
    assert of(events, "verification")[-1]["clean"] is True
    reader = RunReader(Path(events[-1]["run_file"]))
    samples = [e for e in (reader.decoded(i) for i in range(len(reader))) if getattr(e, "type", "") == "sample"]
    shown = next(p for s in samples for p in s.procs if p.pid == dead["pid"])
    assert (shown.kind, sorted(shown.held_by), shown.visible) == ("exited", kids, False)
    assert_nothing_left(res, events)


def test_dry_run_signals_nothing_and_the_sim_still_holds_its_memory(tmp_path: Path) -> None:
    """A dry run previews every step and signals nothing: every consent is declined, the GPUs still hold the service's
    memory, the monitor is shown as optional, and the session is recorded. It is no failure: nothing is verified
    (there is nothing to judge), the phase ends "dry run: nothing signalled" and the exit status is 0."""
    res = run_cli(["--host", "demo", "--dry-run", "--json"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert "dry run" in res.stderr and "nothing is signalled" in res.stderr
    assert "kimitui: dry run: nothing signalled; session recorded" in res.stderr
    events = lines(res)
    assert of(events, "signal") == []
    previews = {e["step"]: e for e in of(events, "step_preview")}
    assert set(previews) == {"graceful", "process", "device"}
    workers = {r["pid"] for r in previews["device"]["targets"]}
    assert len(workers) == 8 and all(r["mem_mib"] > 1000 for r in previews["device"]["targets"])
    assert any(r["reason"].startswith("optional: ") for r in previews["device"]["spared"])  # the monitor
    assert [c["accepted"] for c in of(events, "consent")] == [False, False, False]
    results = {r["step"]: r for r in of(events, "step_result")}
    assert all(results[step]["status"] == "declined" and results[step]["reason"] ==
               "dry run: previewed only, nothing signalled" for step in previews)
    assert of(events, "verification") == []
    assert results["verify"]["status"] == "skipped" and "dry run" in results["verify"]["reason"]
    (end,) = of(events, "phase_end")
    assert end["ok"] is True and end["note"] == "dry run: nothing signalled"
    summary = events[-1]
    assert summary["dry_run"] is True and summary["clean"] is False and summary["signalled"] == []
    session_files(res, tmp_path)
    assert_nothing_left(res, events)
    text = run_cli(["--host", "demo", "--dry-run"], tmp_path)
    assert text.returncode == 0 and "DRY RUN: dry run: nothing signalled" in text.stdout
    assert "FAILED" not in text.stdout + text.stderr and "NOT CLEAN" not in text.stdout


def test_a_dry_runs_later_previews_take_the_earlier_steps_as_consented(tmp_path: Path) -> None:
    """The device step's preview in a dry run is what it would signal were the others step consented: the holder
    that is not the service is among its targets, said so, not left alone as if others had been declined."""
    res = run_cli(["--host", "demo", "--dry-run", "--json"], tmp_path, extra_env=STRAY_ON_3)
    assert res.returncode == 0, res.stderr
    events = lines(res)
    previews = {e["step"]: e for e in of(events, "step_preview")}
    (stray,) = previews["others"]["targets"]
    device = {r["pid"]: r for r in previews["device"]["targets"]}
    assert stray["pid"] in device and "(if others is consented)" in device[stray["pid"]]["reason"]
    assert of(events, "signal") == []


def test_graceful_only_leaves_the_stuck_workers_and_exits_not_clean(tmp_path: Path) -> None:
    """Consent to the graceful stop alone sends one SIGTERM (to the main pid) and nothing more: the two workers that
    survive it are left holding their GPUs, and the run ends not clean (exit 1)."""
    res = run_cli(["--host", "demo", "--yes", "graceful", "--json", "--verify-s", "0.5"], tmp_path)
    assert res.returncode == 1, res.stderr
    events = lines(res)
    survived = {o["pid"] for o in of(events, "signal_outcome", step="graceful", outcome="survived")}
    assert len(survived) == 2
    assert [s["signal"] for s in of(events, "signal")] == ["SIGTERM"]  # the main pid, nothing more
    status = {r["step"]: r["status"] for r in of(events, "step_result")}
    assert status["graceful"] == "done" and status["process"] == "declined" and status["device"] == "declined"
    assert status["verify"] == "failed"
    verification = of(events, "verification")[-1]
    assert verification["clean"] is False
    assert {h["pid"] for h in verification["holders_left"]} == survived
    assert sum(not g["clean"] for g in verification["gpus"]) == 2
    assert_nothing_left(res, events)


def test_text_output_is_readable(tmp_path: Path) -> None:
    """The text output says each step's decision, what it would signal and leave alone, the verdict and the time from
    the last consent to clean; each process by what tells it apart and its wall-clock start."""
    res = run_cli(["--host", "demo", "--yes", "graceful,process,device"], tmp_path)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "graceful: CONFIRMED" in out and "would signal:" in out and "verify: CLEAN" in out
    assert "left alone: pid" in out and "GPUs CLEAN" in out and "last consent -> clean" in out
    assert "recording this session to" in res.stderr
    # each process by what tells it apart, and when it started (a wall-clock time, not clock ticks)
    assert " VLLM::Worker_TP7" in out and "bin/python" not in out
    rows = [line.split() for line in out.splitlines() if "descendant of pid" in line]
    assert rows and all(re.fullmatch(r"\d\d:\d\d:\d\d", row[1]) for row in rows)
    assert "STARTED" in out


@pytest.mark.parametrize("args, words", [
    (["--service", "bogus:x"], "unknown manager"),
    (["--service", "systemd"], "expected systemd:UNIT"),
    (["--service", "pid:1"], "pid must be a number above 1"),
    (["--service", "supervisor:prog@"], "supervisor:PROGRAM@CONF"),
    (["--yes", "graceful,nuke"], "unknown step nuke"),
    (["--gpus", "0,x"], "--gpus"),
    (["--dry-run", "--yes", "graceful"], "--dry-run and --yes"),
    (["--interval", "0"], "--interval"),
])
def test_usage_errors_are_one_line_exit_2(tmp_path: Path, args: list[str], words: str) -> None:
    """A usage error is one line and exit 2, nothing on stdout and no traceback."""
    res = run_cli(["--host", "demo", *args], tmp_path)
    assert res.returncode == 2
    assert res.stdout == "" and "Traceback" not in res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("kimitui:")]
    assert len(errors) == 1 and words in errors[0], res.stderr


@pytest.mark.parametrize("spec, words", [
    ("docker:nosuch", "docker container nosuch on demo "),
    ("pidfile:/nonexistent", "pidfile /nonexistent not found on demo"),
    ("pid:999999", "pid 999999 on demo: no such process"),
    ("supervisor:x@/nonexistent.conf", "supervisor program x of /nonexistent.conf on demo cannot be looked up"),
    ("systemd:nosuch.service", "systemd unit nosuch.service on demo "),
    ("sim:nosuch", "sim:nosuch: the simulated host demo has no service 'nosuch' (its service is sim:vllm)"),
])
def test_a_service_that_is_not_there_stops_the_cleanup_before_any_step(tmp_path: Path, spec: str,
                                                                       words: str) -> None:
    """A service that is not there stops the cleanup before any step: one line, exit 2, nothing on stdout, no run
    recorded."""
    res = run_cli(["--host", "demo", "--dry-run", "--service", spec, "--json"], tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stdout == "" and "Traceback" not in res.stderr  # no plan, no preview, no step
    errors = [line for line in res.stderr.splitlines() if line.startswith("kimitui:")]
    assert len(errors) == 1 and words in errors[0], res.stderr
    assert not list((tmp_path / "data").rglob("*.jsonl"))


def test_service_none_is_previewed_as_such(tmp_path: Path) -> None:
    """--service none is previewed as such: the graceful and process steps are skipped, the holders are all previewed
    as others (in a dry run, untouched), and the text says so."""
    res = run_cli(["--host", "demo", "--dry-run", "--service", "none", "--json"], tmp_path)
    assert res.returncode == 0, res.stderr  # a dry run is no failure
    events = lines(res)
    plan = of(events, "cleanup_plan")[0]
    assert plan["service"] == "" and plan["manager"] == "none"
    graceful = of(events, "step_preview", step="graceful")[0]
    assert graceful["action"].startswith("no service (none chosen)") and graceful["targets"] == []
    assert of(events, "step_result", step="graceful")[0]["status"] == "skipped"
    assert not of(events, "step_preview", step="process")  # no service: only the others group
    assert of(events, "step_result", step="process")[0]["status"] == "skipped"
    others = of(events, "step_preview", step="others")[0]
    assert len(others["targets"]) == 8 and of(events, "signal") == []  # the workers, previewed, untouched
    assert all(r["reason"].startswith("on the GPUs, not the service: ") for r in others["targets"])
    assert "no service (none)" in res.stderr
    text = run_cli(["--host", "demo", "--dry-run", "--service", "none"], tmp_path)
    assert "cleanup plan for no service (none: free the GPUs of whatever holds them)" in text.stdout
    assert "graceful: preview, 0 to signal, 0 left alone: no service (none chosen)" in text.stdout


def test_without_service_off_the_demo_a_choice_is_required(tmp_path: Path) -> None:
    """Off the demo a service must be chosen: the one-line error names every form of --service, none included."""
    for host in ("local", "ssh://gpu-node-7"):
        res = run_cli(["--host", host, "--dry-run"], tmp_path, timeout=30)
        assert res.returncode == 2 and res.stdout == ""
        (error,) = [line for line in res.stderr.splitlines() if line.startswith("kimitui:")]
        assert error.startswith(f"kimitui: --service is required on {host}: choose the service to stop: ")
        for form in ("systemd:UNIT", "docker:NAME", "supervisor:PROGRAM[@CONF]", "pidfile:PATH", "pid:N",
                     "or none"):
            assert form in error


def test_bad_target_is_one_line_exit_2(tmp_path: Path) -> None:
    """A malformed target is one line and exit 2, no traceback."""
    res = run_cli(["--host", "ssh://", "--service", "none", "--yes", "graceful"], tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert len([line for line in res.stderr.splitlines() if line.startswith("kimitui:")]) == 1


# --- parsing and the terminal consent -----------------------------------------------------------------

def test_service_specs_and_hostile_names_stay_one_argument() -> None:
    """A service spec is parsed into its manager with the name kept whole: shell characters in it stay one argument,
    never split or run."""
    svc = parse_service("systemd:vllm; rm -rf / #")
    assert isinstance(svc, SystemdService) and svc.stop_argv()[-1] == "vllm; rm -rf / #"
    sup = parse_service("supervisor:vllm@/etc/sup $(id).conf")
    assert isinstance(sup, SupervisorService) and sup.conf == "/etc/sup $(id).conf" and sup.name == "vllm"
    assert parse_service("docker:`reboot`").stop_argv()[-1] == "`reboot`"  # type: ignore[index]
    pidfile = parse_service("pidfile:/run/a b.pid")
    assert isinstance(pidfile, PidService) and pidfile.pidfile == "/run/a b.pid"
    pid = parse_service("pid:4242")
    assert isinstance(pid, PidService) and pid.pid == 4242
    assert parse_gpus("1,0,1") == [0, 1] and parse_gpus(None) is None and parse_gpus("all") is None


def preview() -> Any:
    from kimitui.core.events import StepPreview

    return StepPreview(1.0, step="device", action="SIGTERM, SIGKILL after 2s",
                       targets=[ProcRef(10, 100, "alice", [0], 5000.0, "vllm.service", "python3 worker", "CUDA ctx"),
                                ProcRef(11, 101, "alice", [1], 5000.0, None, "python3 worker", "CUDA ctx")],
                       spared=[ProcRef(12, 102, "root", [0, 1], 0.0, None, "nv-hostengine",
                                       "optional: handle only (an NVML monitor): left alone unless ticked")])


def test_preview_table_and_ticks() -> None:
    """The terminal's preview table shows what tells each process apart and why; the ticks the operator types change
    only what the preview offers (a target may be unticked, an optional spared one ticked in), anything else is
    refused."""
    table = preview_table(preview())
    for word in ("PID", "START", "USER", "GPUS", "MIB", "UNIT", "COMMAND", "WHY", "vllm.service", "nv-hostengine",
                 "would signal:", "spared:"):
        assert word in table
    assert parse_ticks("", preview()) == [10, 11]
    assert parse_ticks("11", preview()) == [10]
    assert parse_ticks("-10, +12", preview()) == [11, 12]
    with pytest.raises(ValueError):
        parse_ticks("99", preview())
    with pytest.raises(ValueError):
        parse_ticks("+11", preview())  # a target, not an optional spared process
    with pytest.raises(ValueError, match="'n' is not a pid"):
        parse_ticks("n", preview())


def test_the_preview_table_fits_a_120_column_terminal_and_keeps_who_is_who() -> None:
    """At 120 columns no line of the preview is wider: PID, start, user, GPUs, memory and unit stay in every row,
    the command is narrowed in its middle (its end tells workers apart), and each why goes under its row, whole,
    wrapped at words. Without a width (a pipe, the report) each row stays one line."""
    long = dataclasses.replace(preview(), targets=[ProcRef(
        10, 4242, user="root", gpus=[0], mem_mib=92_411.0, unit="vllm.service", kind="cuda",
        cmdline="/opt/venv/bin/python3 -m vllm.entrypoints.openai.api_server --model moonshotai/Kimi-K2.5 "
                "--tensor-parallel-size 8 --title VLLM::Worker_TP7",
        reason="on the GPUs, not the service: holds 92411 MiB on GPU 0 and 4,096 MiB of exited pid 520 through "
               "inherited descriptors")])
    wide = preview_table(long).splitlines()  # the action, then the table
    assert max(map(len, wide)) > 120  # what a 120-column terminal wrapped mid-word before
    fitted = preview_table(long, width=120).splitlines()
    assert max(map(len, fitted)) <= 120, fitted
    row = next(line for line in fitted if line.lstrip().startswith("10 "))
    assert row.split()[:3] == ["10", "-", "root"] and "vllm.service" in row and row.rstrip().endswith("Worker_TP7")
    why = " ".join(line.strip() for line in fitted[fitted.index(row) + 1:] if not line.strip().startswith(("PID",
                   "spared", "would")) and line.startswith("      "))
    assert "why: on the GPUs, not the service: holds 92411 MiB on GPU 0 and 4,096 MiB of exited pid 520 through " \
           "inherited descriptors" in why


async def test_terminal_consent_asks_one_question_at_a_time_and_again_after_a_bad_answer() -> None:
    """On a terminal each step is asked one question at a time: go ahead? (an answer that is neither y nor n is asked
    again), as previewed? and, only if not, which pids to leave out or add (an answer that is not a pid of the
    preview is asked again, one line saying why, never a Python error); an empty answer or the end of input
    declines the step."""
    err = io.StringIO()
    ask = terminal_consent("op", True, io.StringIO("maybe\ny\nn\nn\n99\n11\n"), err)
    decision = await ask(preview())
    assert decision.accepted and decision.pids == [10] and decision.operator == "op"
    said = err.getvalue()
    assert said.count("go ahead with this step? [y/N]") == 2 and "'maybe': answer y or n" in said
    assert "the 2 listed to signal and none of the 1 optional ones, as previewed? [Y/n]" in said
    assert "'n' is not a pid (give pids like 1234, -1234 or +1234)" in said and "invalid literal" not in said
    assert "99 is not in this preview's list to signal" in said and said.count("pids to leave out") == 3
    assert "nv-hostengine" in said  # the table, shown when stdout carries JSON
    assert not (await terminal_consent("op", False, io.StringIO("\n"), io.StringIO())(preview())).accepted
    kept = await terminal_consent("op", False, io.StringIO("yes\n\n"), io.StringIO())(preview())
    assert kept.accepted and kept.pids is None
    assert not (await asyncio.wait_for(terminal_consent("op", False, io.StringIO(""), io.StringIO())(preview()),
                                       DEADLINE_S)).accepted  # end of input declines


# --- the real run on 2 x H200 -------------------------------------------------------------------------

def test_real_h200_cleanup_sample_run_replays_clean_with_the_monitor_never_signalled() -> None:
    """The real cleanup recorded on a 2 x H200 host replays clean: the service's memory gone after the phase, one
    verification inside it, the NVML monitor never signalled and still there at the end, the worker that ignored
    SIGTERM killed."""
    assert REAL_RUN.stat().st_size < 1_000_000
    reader = RunReader(REAL_RUN)
    assert reader.warnings == []
    events = [reader.event(i) for i in range(len(reader))]
    samples = [e for e in events if e.type == "sample"]
    assert len(samples) >= 100 and samples[-1].t - samples[0].t >= 60
    assert {g.name for g in samples[0].gpus} == {"NVIDIA H200"} and len(samples[0].gpus) == 2
    starts = [e for e in events if e.type == "phase_start" and e.phase == "cleanup"]  # type: ignore[attr-defined]
    ends = [e for e in events if e.type == "phase_end" and e.phase == "cleanup"]  # type: ignore[attr-defined]
    assert len(starts) == 1 and len(ends) == 1 and ends[0].ok  # type: ignore[attr-defined]
    before = [s for s in samples if s.t < starts[0].t]
    after = [s for s in samples if s.t > ends[0].t]
    assert all((g.mem_used_mib or 0) > 30000 for g in before[-1].gpus)  # both GPUs held by the service
    assert len(after) >= 10 and all((g.mem_used_mib or 0) <= 64 for s in after for g in s.gpus)
    verification = [e for e in events if isinstance(e, Verification)]
    assert len(verification) == 1 and verification[0].clean and not verification[0].holders_left
    assert starts[0].t <= verification[0].t <= ends[0].t
    monitors = {p.pid for s in samples for p in s.procs if p.kind == "handle"}  # type: ignore[attr-defined]
    assert len(monitors) == 1
    signals = [e for e in events if e.type == "signal"]
    assert signals and not monitors & {s.pid for s in signals}  # type: ignore[attr-defined]
    assert any(s.signal == "SIGKILL" for s in signals)  # type: ignore[attr-defined]  # the worker ignoring SIGTERM
    monitor = next(iter(monitors))
    assert any(p.pid == monitor for p in after[-1].procs)  # still there at the end
    state = state_at(reader, len(reader))
    assert state.cleanup is not None and state.cleanup.verification is not None
    assert state.cleanup.verification.clean
    assert [(p.phase, p.ok) for p in state.phases] == [("cleanup", True)]
    mid = state_at(reader, reader.types.index("cleanup_plan") + 1)
    assert mid.phase is not None and mid.phase.phase == "cleanup"


def test_on_a_terminal_without_yes_it_asks_per_step(tmp_path: Path) -> None:
    """stdin a real pty: each step's preview is shown and asked about; the answers decide."""
    import pty

    master, slave = pty.openpty()
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    proc = subprocess.Popen([*KIMITUI, "cleanup", "--host", "demo", "--json", "--verify-s", "0.5"],
                            stdin=slave, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    os.close(slave)
    assert proc.stderr is not None
    stderr = Output(proc.stderr.fileno())
    until = stderr.until

    try:
        until(b"graceful: go ahead with this step? [y/N]")
        assert b"would signal:" in stderr.data and b"WHY" in stderr.data  # the table, on the terminal side
        os.write(master, b"y\n")
        until(b"as previewed? [Y/n]")
        os.write(master, b"\n")
        until(b"process: go ahead with this step? [y/N]")
        os.write(master, b"n\n")
        until(b"device: go ahead with this step? [y/N]")  # the stuck workers still hold their GPUs
        os.write(master, b"\n")  # Enter: the default, no
        out, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert proc.returncode == 1, (stderr.data + rest).decode(errors="replace")
    events = [json.loads(line) for line in out.decode().splitlines()]
    consents = {c["step"]: c for c in of(events, "consent")}
    assert consents["graceful"]["accepted"] and consents["graceful"]["note"] == "confirmed on the terminal"
    assert not consents["process"]["accepted"] and consents["process"]["note"] == "declined on the terminal"
    assert not consents["device"]["accepted"]
    assert of(events, "verification")[-1]["clean"] is False
    assert_nothing_left(subprocess.CompletedProcess([], 1, "", (stderr.data + rest).decode()), events)


def _why_still_running(proc: subprocess.Popen[bytes], master: int) -> str:
    """What a process that outlived a Ctrl-C shows: its signal masks, where it waits, the terminal's
    foreground group, and whether a second SIGINT ends it."""
    status = Path(f"/proc/{proc.pid}/status").read_text()
    masks = [line for line in status.splitlines() if line.startswith(("State", "SigBlk", "SigIgn", "SigCgt"))]
    wchan = Path(f"/proc/{proc.pid}/wchan").read_text()
    fg, group = os.tcgetpgrp(master), os.getpgid(proc.pid)
    proc.send_signal(signal.SIGINT)
    try:
        code: int | None = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        code = None
    return f"{masks}, wchan {wchan}, the terminal's foreground group {fg} (its group {group}), " \
           f"exit after a second SIGINT: {code}"


def _on_its_terminal() -> None:
    """In the child: a session of its own whose controlling terminal is its stdin (the pty), so Ctrl-C typed
    there is the terminal's SIGINT to it, as in an operator's shell; and SIGINT and SIGQUIT as an interactive
    shell gives its foreground job, whatever the suite inherited (started in the background by a script, the
    suite has them ignored, and an ignored SIGINT is ignored by the command too: Python installs no handler)."""
    import fcntl
    import termios

    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@pytest.mark.parametrize("prompt, answers", [("graceful: go ahead with this step? [y/N]", []),
                                             ("as previewed? [Y/n]", [b"y\n"]),
                                             ("pids to leave out", [b"y\n", b"n\n"])])
def test_ctrl_c_at_a_prompt_exits_at_once_with_a_closed_phase(tmp_path: Path, prompt: str,
                                                               answers: list[bytes]) -> None:
    """Ctrl-C at a prompt ends the cleanup without waiting for Enter: exit 130, the phase closed, the one line saying
    the GPUs were not verified clean and where the session is, and nothing signalled that was not confirmed."""
    import pty

    master, slave = pty.openpty()
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    proc = subprocess.Popen([*KIMITUI, "cleanup", "--host", "demo", "--json"], stdin=slave, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, preexec_fn=_on_its_terminal)
    os.close(slave)
    assert proc.stderr is not None
    stderr = Output(proc.stderr.fileno())
    until = stderr.until

    try:
        until(b"graceful: go ahead with this step? [y/N]")
        for answer in answers:
            os.write(master, answer)
        until(prompt.encode())
        os.write(master, b"\x03")  # Ctrl-C, typed on the terminal
        # no Enter is ever typed: a prompt that waited for one would never end (the deadline only says so)
        try:
            out, rest = proc.communicate(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"Ctrl-C did not end it: {_why_still_running(proc, master)}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    text = (stderr.data + rest).decode(errors="replace")
    assert proc.returncode == 130, text
    assert "kimitui: interrupted: the GPUs were not verified clean; session recorded to" in text
    assert "Traceback" not in text
    events = [json.loads(line) for line in out.decode().splitlines()]
    assert of(events, "signal") == []  # nothing was confirmed, nothing signalled
    (end,) = of(events, "phase_end", phase="cleanup")
    assert end["ok"] is False and end["note"] == "not clean; interrupted"
    (consent,) = of(events, "consent", step="graceful")
    assert consent["accepted"] is False and consent["note"] == "interrupted while asking"
    run_file, _ = session_files(subprocess.CompletedProcess([], 130, "", text), tmp_path)
    state = state_at(RunReader(run_file), len(RunReader(run_file)))
    assert [(p.phase, p.ok) for p in state.phases] == [("cleanup", False)]
    sim_dir = next(line.split("ready: ")[1].split(",")[0] for line in text.splitlines() if "ready: " in line)
    assert not Path(sim_dir).exists()


def test_restart_after_a_clean_verify_brings_the_demo_service_back(tmp_path: Path) -> None:
    """--restart asks for the restart only after a clean verification, then starts the service and waits for its health
    endpoint; the phase ends ok."""
    res = run_cli(["--host", "demo", "--yes", "graceful,process,device", "--restart", "--json"], tmp_path)
    assert res.returncode == 0, res.stderr
    events = lines(res)
    verification = of(events, "verification")[-1]
    assert verification["clean"] is True
    (restart,) = of(events, "step_result", step="restart")
    assert restart["status"] == "done" and "/health answered" in restart["reason"], restart
    preview = of(events, "step_preview", step="restart")[0]
    assert "start the simulated vllm service" in preview["action"] and "/health" in preview["action"]
    assert [c["accepted"] for c in of(events, "consent", step="restart")] == [True]
    # the restart came after the verdict
    order = [e["type"] + ":" + str(e.get("step", "")) for e in events]
    assert order.index("step_result:verify") < order.index("step_preview:restart")
    assert of(events, "phase_end", phase="cleanup")[0]["ok"] is True
    assert events[-1]["clean"] is True


def test_reset_and_restart_flags_consent_to_their_steps() -> None:
    """--reset and --restart consent to their own steps only, and --yes names the steps it consents to."""
    import argparse

    from kimitui.commands.cleanup import _consent, add_parser
    sub = argparse.ArgumentParser().add_subparsers()
    parser = add_parser(sub)

    async def accepted(argv: list[str], step: str) -> bool:
        consent, _ = _consent(parser.parse_args(argv), "op")
        return (await consent(StepPreview(0.0, step=step))).accepted

    assert asyncio.run(accepted(["--yes", "process", "--reset"], "reset"))
    assert not asyncio.run(accepted(["--yes", "process"], "reset"))
    assert asyncio.run(accepted(["--yes", "reset"], "reset"))
    assert not asyncio.run(accepted(["--yes", "process", "--reset"], "restart"))
    assert isinstance(parse_service("sim:vllm"), SimService)
    assert parser.parse_args(["--nvidia-smi", "/opt/x/nvidia-smi"]).nvidia_smi == "/opt/x/nvidia-smi"


def test_the_default_service_and_the_simulated_deadlines_come_from_what_the_target_says() -> None:
    """Not from the target's name: what the opened target says of itself (``target_facts`` before it opens)."""
    import argparse

    from kimitui.cleanup.services import SimService
    from kimitui.cleanup.setup import UsageError
    from kimitui.commands.cleanup import _service
    from kimitui.live.targets import TargetFacts, target_facts

    demo = target_facts("demo")
    assert demo.simulated is True and demo.service == "sim:vllm"
    assert not target_facts("local").simulated and target_facts("local").service is None
    # the run header's meta, as runs have always recorded it: only what is set, in this order
    assert target_facts("ssh://gpu-node").recorded() == {"target": "ssh://gpu-node"}
    assert list(TargetFacts("demo", True, "sim:vllm", "http://x", "/s/nvidia-smi").recorded()) == [
        "target", "simulated", "service", "api_url", "nvidia_smi"]
    args = argparse.Namespace(service=None, health_url=None, host="lab-sim")
    assert isinstance(_service(args, TargetFacts("lab-sim", simulated=True, service="sim:vllm")), SimService)
    with pytest.raises(UsageError, match="--service is required on lab-sim"):
        _service(args, target_facts("lab-sim"))
