"""Issue 38 item 3: each serving level's GPU energy from the power samples recorded while it ran, on the GPUs
the service runs on only: output tokens per joule and joules per request in ``bench macro``'s JSON and line, the
report and compare; where no power was recorded (a plain URL), they say so instead of a number."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kimitui.core.events import GpuSample, HostSample, MacroPoint, MacroProgress, ProcSample
from kimitui.core.state import SessionState, fold
from tests.support import ROOT


def _sample(t: float, watts: tuple[float | None, float | None, float | None]) -> HostSample:
    gpus = [GpuSample(i, f"GPU-{i}", "NVIDIA H200", mem_used_mib=1000.0, mem_total_mib=143771.0, power_w=w)
            for i, w in enumerate(watts)]
    # the service's workers hold GPUs 0 and 1; GPU 2 is busy with no process of ours (not the service's)
    procs = [ProcSample(pid=100 + i, start_time=7, gpu_mem_mib={i: 90000.0}, kind="cuda") for i in (0, 1)]
    return HostSample(t, seq=int(t), gpus=gpus, procs=procs)


def test_a_levels_energy_is_its_service_gpus_power_over_its_run() -> None:
    state = SessionState()
    fold(state, MacroProgress(0.0, status="starting", levels=[4]))
    fold(state, _sample(0.5, (100.0, 100.0, 600.0)))  # before the level runs: not metered
    fold(state, MacroProgress(1.0, status="running", levels=[4], concurrency=4, stage="run"))
    for t, w in ((1.0, 300.0), (2.0, 500.0), (3.0, 500.0), (4.0, None)):  # the last gives no power: left out
        fold(state, _sample(t, (w, w, 600.0)))
    fold(state, MacroPoint(4.5, concurrency=4, metrics={"completed": 10, "output_throughput": 400.0,
                                                        "duration": 3.0}))
    fold(state, _sample(5.0, (50.0, 50.0, 600.0)))  # after the level: not metered
    sweep = state.sweep
    assert sweep is not None and sweep.meter is None
    energy = sweep.energy[4]
    # trapezoids over GPUs 0 and 1: (600+1000)/2*1 + 1000*1 = 1800 J over 2 s
    assert (energy.gpus, energy.samples, energy.seconds, energy.mean_w) == ((0, 1), 3, 2.0, 900.0)
    assert energy.tokens_per_joule(400.0) == pytest.approx(400.0 / 900.0)
    assert energy.joules_per_request(3.0, 10) == pytest.approx(270.0)


def test_a_seek_meters_a_level_as_folding_from_the_start_does(tmp_path: Path) -> None:
    """A replay's seek folds only the samples the memory history holds; a level's energy still comes from every
    sample it ran through: at its end, past it by more than the history, from checkpoints or not, and played
    on from a seek in the middle of the level."""
    from kimitui.core.events import LogLine
    from kimitui.core.replay import CHECKPOINT_EVERY, Checkpoints, Player, split_index, state_at
    from kimitui.core.runfile import RunReader, write_run
    from kimitui.core.session import Session
    from kimitui.core.state import HISTORY_POINTS

    events: list = [LogLine(0.001 * i, message=f"before {i}") for i in range(CHECKPOINT_EVERY + 7)]
    events.append(MacroProgress(1.0, status="starting", levels=[4, 8]))
    t = 1.0
    for c, watts in ((4, 300.0), (8, 500.0)):
        events.append(MacroProgress(t, status="running", levels=[4, 8], concurrency=c, stage="run"))
        for n in range(40):
            t += 0.25
            events.append(_sample(t, (watts + n, watts + n, 600.0)))
            if n % 10 == 5:
                events.append(LogLine(t, message=f"during {c}"))
        t += 0.1
        events.append(MacroPoint(t, concurrency=c, metrics={"completed": 10, "output_throughput": 400.0,
                                                            "duration": 10.0}))
    for _ in range(HISTORY_POINTS + 10):  # the levels' samples fall out of the memory history's window
        t += 0.25
        events.append(_sample(t, (50.0, 50.0, 600.0)))
    expected = SessionState()
    for ev in events:
        fold(expected, ev)
    assert expected.sweep is not None and set(expected.sweep.energy) == {4, 8}
    reader = RunReader(write_run(tmp_path / "run.jsonl", events))
    checkpoints = Checkpoints(reader, split_index(reader))
    for got in (state_at(reader, len(reader)), state_at(reader, len(reader), checkpoints=checkpoints),
                state_at(reader, len(reader), checkpoints=checkpoints)):
        assert got.sweep is not None and got.sweep.energy == expected.sweep.energy
    middle = next(i for i, ev in enumerate(events) if isinstance(ev, HostSample) and ev.t > 17.0)
    player = Player(reader, Session(), clock=lambda: 0.0)
    player.seek_index(middle)
    player.seek_index(len(reader))  # on to the end: the second level ends after the seek
    sweep = player.session.state.sweep
    assert sweep is not None and sweep.energy == expected.sweep.energy


def test_a_level_without_power_has_no_energy() -> None:
    state = SessionState()
    fold(state, MacroProgress(1.0, status="running", levels=[1], concurrency=1, stage="run"))
    fold(state, _sample(1.0, (None, None, None)))
    fold(state, _sample(2.0, (None, None, None)))
    fold(state, MacroPoint(3.0, concurrency=1, metrics={"completed": 2, "output_throughput": 50.0}))
    assert state.sweep is not None and state.sweep.energy == {}


def test_the_cli_gives_energy_with_the_host_and_says_why_not_without(tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    done = subprocess.run(
        [sys.executable, "-m", "kimitui", "bench", "macro", "--host", "demo", "--concurrency", "4", "--requests",
         "24", "--max-tokens", "32", "--json", "--output", str(out)],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
        env={**__import__("os").environ, "XDG_DATA_HOME": str(tmp_path / "data")})
    assert done.returncode == 0, done.stderr
    (line,) = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert line["energy_gpus"] == list(range(8)) and line["energy_samples"] >= 2  # the demo's 8 workers' GPUs
    assert line["output_tokens_per_joule"] == pytest.approx(line["output_throughput"] / line["mean_gpu_power_w"])
    assert line["joules_per_request"] > 0 and "energy_note" not in line
    saved = json.loads(out.read_text())["levels"][0]
    assert saved["output_tokens_per_joule"] == line["output_tokens_per_joule"]
    run = next((tmp_path / "data").rglob("*.jsonl*"))
    report = subprocess.run([sys.executable, "-m", "kimitui", "report", str(run)], capture_output=True, text=True,
                            timeout=60, cwd=ROOT).stdout
    row = next(x for x in report.splitlines() if x.startswith("| 4 |"))
    assert f"| {line['output_tokens_per_joule']:.3g} |" in row
