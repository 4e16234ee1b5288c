"""Per-GPU scope and the GPU reset (step e), with real processes on a simulated driver directory.

Scope: a process is placed on GPUs by its NVML memory when it has any (torch maps the device files of GPUs
it never allocates on), by the device files it maps only when NVML lists no memory for it.
Reset: a real executable stands in for nvidia-smi (never the real one: resetting lent GPUs is forbidden); it
records its argv and clears the simulated driver's leaked memory of the GPU it was given.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from kimitui.cleanup import ConsentDecision, auto_consent
from kimitui.core.events import Consent, StepPreview, Verification
from tests.cleanup_rig import FAST, SHORT_VERIFY, Rig, results
from tests.cleanup_support import SimDir, alive
from tests.support import leak

SIM_GPUS = 4
"""The simulated driver's GPUs for this module's ``sim`` fixture (tests/conftest.py)."""


def previews(rig: Rig, step: str) -> list[StepPreview]:
    return [p for p in rig.of(StepPreview) if p.step == step]


async def test_scope_by_nvml_memory_spares_out_of_scope_holders(rig: Rig, sim: SimDir) -> None:
    # as measured on a 2 x H200 host: torch on cuda:0 also maps /dev/nvidia1; torch on cuda:1 also has a
    # context (518 MiB) on GPU 0
    """With a GPU scope, only what holds memory on those GPUs is targeted (a mapping alone counts where NVML lists no
    memory); a holder whose memory is outside the scope is spared with the reason, and only the GPUs in scope are
    judged clean."""
    on0 = sim.start_ready("ctx", "0=41570", "0,1")
    on1 = sim.start_ready("ctx", "0=518,1=2426", "0,1")
    stray2 = sim.start_ready("stray", "2")  # maps /dev/nvidia2, no memory: scoped by its device file
    on3 = sim.start_holder(3, 20_000)
    stray3 = sim.start_ready("stray", "3")
    await rig.settled({on0, on1, stray2, on3, stray3})
    ex = rig.executor(auto_consent(["graceful", "process", "others", "device"]), gpus=[1, 2])
    report = await ex.run()

    others = previews(rig, "others")[0]  # no service: every holder is one of the others
    assert {t.pid: t.reason for t in others.targets} == {
        on1: "on the GPUs, not the service: holds 2426 MiB on GPU 1",
        stray2: "on the GPUs, not the service: maps /dev/nvidia2, no memory listed"}
    spared = {s.pid: s.reason for s in others.spared}
    assert spared[on0] == "holds 41570 MiB on GPU 0, outside the scope; its /dev/nvidia1 handle is no context there"
    assert not previews(rig, "device")
    every = {r.pid for p in rig.of(StepPreview) for r in (*p.targets, *p.spared)}
    assert on3 not in every and stray3 not in every  # nothing of theirs is in scope

    assert report.clean and report.verification is not None
    assert [g.index for g in report.verification.gpus] == [1, 2]  # GPU 0 and 3 still hold memory: not judged
    assert not alive(on1) and not alive(stray2)
    assert alive(on0) and alive(on3) and alive(stray3)
    assert {s.pid for s in report.signals if s.outcome == "sent"} == {on1, stray2}


def fake_nvidia_smi(tmp: Path, sim: SimDir) -> tuple[Path, Path]:
    """An executable nvidia-smi: appends its argv to calls.jsonl, clears leaked.json's entry for -i N."""
    calls = tmp / "calls.jsonl"
    script = tmp / "bin" / "nvidia-smi"
    script.parent.mkdir()
    script.write_text(f"""#!{sys.executable}
import json, os, sys

args = sys.argv[1:]
with open({str(calls)!r}, "a") as fh:
    fh.write(json.dumps(args) + "\\n")
if args[:2] != ["--gpu-reset", "-i"] or len(args) != 3:
    sys.exit(2)
path = {str(sim.path / "leaked.json")!r}
leaked = json.load(open(path))
leaked.pop(args[2], None)
tmp = path + ".tmp"
json.dump(leaked, open(tmp, "w"))
os.replace(tmp, path)
print("GPU reset")
""")
    script.chmod(0o755)
    return script, calls


def called(calls: Path) -> list[list[str]]:
    """The calls that change something (the reset's reads of the modes left out)."""
    every = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    return [c for c in every if not c[0].startswith("--query-gpu=")]


async def test_reset_runs_for_dirty_gpus_in_scope_after_consent(rig: Rig, sim: SimDir, tmp_path: Path) -> None:
    """The reset is offered for a GPU in scope that still holds memory with no holder left, changes nothing before the
    operator's answer, and resets only that GPU (a dirty GPU outside the scope is left as it is)."""
    await leak(rig, sim, {2: 3000, 3: 2000})  # no process holds it
    smi, calls = fake_nvidia_smi(tmp_path, sim)
    asked: list[StepPreview] = []

    async def consent(preview: StepPreview) -> ConsentDecision:
        if preview.step == "reset":
            asked.append(preview)
            assert called(calls) == []  # nothing was changed before the operator's answer (only read)
        return ConsentDecision(preview.step == "reset", None, "tester")

    ex = rig.executor(consent, deadlines=SHORT_VERIFY, gpus=[1, 2], nvidia_smi=str(smi))
    report = await ex.run()
    assert called(calls) == [["--gpu-reset", "-i", "2"]]  # GPU 3 is dirty too, but outside the scope
    (preview,) = asked
    assert preview.targets == [] and "-i 2 " in preview.action and "-i 3" not in preview.action
    assert "3000 MiB still used" in preview.action and "no process holds it" in preview.action
    res = results(rig)
    assert res["reset"].status == "done", res["reset"].reason
    verifications = rig.of(Verification)
    assert not verifications[0].clean and verifications[0].detail == "GPU 2 not clean; no holder left"
    assert report.clean and verifications[-1].clean and [g.index for g in verifications[-1].gpus] == [1, 2]
    assert json.loads((sim.path / "leaked.json").read_text()) == {"3": 2000}


async def test_reset_not_run_when_declined_or_a_holder_is_left(rig: Rig, sim: SimDir, tmp_path: Path) -> None:
    """No reset runs when it is declined or while a process still holds the GPU: nothing is changed and the holder
    lives."""
    await leak(rig, sim, {1: 3000})
    smi, calls = fake_nvidia_smi(tmp_path, sim)
    ex = rig.executor(auto_consent(["graceful", "process", "others", "device"]), deadlines=SHORT_VERIFY,
                      nvidia_smi=str(smi))
    report = await ex.run()
    assert not report.clean and results(rig)["reset"].status == "declined"
    assert [c.accepted for c in rig.of(Consent) if c.step == "reset"] == [False]
    assert called(calls) == [] and os.path.exists(sim.path / "leaked.json")

    holder = sim.start_holder(1, 1000)
    await rig.settled({holder})
    rig.events.clear()
    ex = rig.executor(auto_consent(["reset"]), deadlines=SHORT_VERIFY, nvidia_smi=str(smi))
    report = await ex.run()
    res = results(rig)
    assert not report.clean and res["others"].status == "declined"
    assert res["reset"].status == "skipped" and str(holder) in res["reset"].reason
    assert not [p for p in rig.of(StepPreview) if p.step == "reset"]
    assert called(calls) == [] and alive(holder)


async def test_fast_deadlines_unchanged_for_scope_of_all(rig: Rig, sim: SimDir) -> None:
    """No scope given: a torch-like process on GPU 0 that maps GPU 1's file is freed like any holder."""
    on0 = sim.start_ready("ctx", "0=41570", "0,1")
    await rig.settled({on0})
    report = await rig.executor(auto_consent(["others"]), deadlines=FAST).run()
    assert report.clean and not alive(on0)
    assert [g.index for g in report.verification.gpus] == [0, 1, 2, 3]  # type: ignore[union-attr]
