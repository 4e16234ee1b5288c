"""The GPU reset's preconditions, read on the host and shown in its preview, against the simulated host's
nvidia-smi and systemctl (kimitui.hosts.sim.tools, real executables keeping their state in the sim dir):
persistence mode is turned off and the DCGM unit stopped before the reset and both put back after, even
when the reset fails; MIG mode, an active display or an X server on the GPU refuse it, asking nothing."""

from __future__ import annotations

import json
from pathlib import Path

from kimitui.cleanup import auto_consent
from kimitui.cleanup.reset_prep import parse_modes
from kimitui.core.describe import describe
from kimitui.core.events import Consent, HostCommand, StepPreview
from kimitui.hosts.sim.tools import install_tools
from tests.cleanup_rig import SHORT_VERIFY, Rig, results
from tests.cleanup_support import SimDir, alive
from tests.support import leak, start_daemon
from tests.waiting import DEADLINE_S

SIM_GPUS = 4
"""The simulated driver's GPUs for this module's ``sim`` fixture (tests/conftest.py)."""

FIXTURES = Path(__file__).parent / "fixtures" / "h200x2"


def tools(sim: SimDir, units: dict[str, str] | None = None, modes: dict[int, dict[str, bool]] | None = None) -> dict:
    smi, systemctl = install_tools(sim.path)
    if units is not None:
        (sim.path / "units.json").write_text(json.dumps(units))
    if modes is not None:
        (sim.path / "modes.json").write_text(json.dumps({str(k): v for k, v in modes.items()}))
    return {"nvidia_smi": str(smi), "systemctl": str(systemctl)}


def changes(sim: SimDir) -> list[list[str]]:
    """The tool calls that change something (reads left out), as [tool, args...]."""
    path = sim.path / "tool-calls.jsonl"
    calls = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [c for c in calls if not c[1].startswith("--query-gpu=") and c[1] != "is-active"]


def state(sim: SimDir, name: str) -> dict:
    path = sim.path / name
    return json.loads(path.read_text()) if path.exists() else {}


async def test_persistence_and_dcgm_are_changed_for_the_reset_and_restored(rig: Rig, sim: SimDir) -> None:
    """What the reset has to change (persistence mode off, DCGM stopped) is said in its preview and done only after
    consent, in order, and restored afterwards: the GPU reset runs between them and every host command is recorded."""
    await leak(rig, sim, {1: 3000})
    kw = tools(sim, units={"nvidia-dcgm.service": "active"})
    report = await rig.executor(auto_consent(["reset"]), deadlines=SHORT_VERIFY, **kw).run()
    preview = next(p for p in rig.of(StepPreview) if p.step == "reset")
    assert "GPU 1: persistence on, MIG off, display off" in preview.action
    assert "nvidia-dcgm.service active" in preview.action
    assert "-i 1 -pm 0 (persistence mode off on GPU 1)" in preview.action
    assert "restored even if the reset fails" in preview.action
    smi, ctl = kw["nvidia_smi"], kw["systemctl"]
    assert changes(sim) == [["nvidia-smi", "-i", "1", "-pm", "0"], ["systemctl", "stop", "nvidia-dcgm.service"],
                            ["nvidia-smi", "--gpu-reset", "-i", "1"], ["systemctl", "start", "nvidia-dcgm.service"],
                            ["nvidia-smi", "-i", "1", "-pm", "1"]]
    assert results(rig)["reset"].status == "done" and report.clean
    assert state(sim, "modes.json")["1"]["persistence"] is True
    assert state(sim, "units.json") == {"nvidia-dcgm.service": "active"}
    recorded = rig.of(HostCommand)
    assert [(c.argv[0], c.ok) for c in recorded] == [(smi, True), (ctl, True), (ctl, True), (smi, True)]
    assert describe(recorded[1]) == f"reset: stop nvidia-dcgm.service (nv-hostengine holds every GPU): {ctl} stop " \
        "nvidia-dcgm.service: done"


async def test_a_failed_reset_still_restores_what_it_changed(rig: Rig, sim: SimDir) -> None:
    """A reset that fails still restores what was changed for it (DCGM started again, persistence mode back on), and
    the GPUs are not called clean."""
    await leak(rig, sim, {2: 3000})
    kw = tools(sim, units={"dcgm.service": "active"})
    (sim.path / "reset-fails.json").write_text(json.dumps({"2": "Unknown Error"}))
    report = await rig.executor(auto_consent(["reset"]), deadlines=SHORT_VERIFY, **kw).run()
    res = results(rig)["reset"]
    assert res.status == "failed" and "GPU 2: rc 3" in res.reason and "Unknown Error" in res.reason
    assert changes(sim)[-2:] == [["systemctl", "start", "dcgm.service"], ["nvidia-smi", "-i", "2", "-pm", "1"]]
    assert state(sim, "modes.json")["2"]["persistence"] is True
    assert state(sim, "units.json") == {"dcgm.service": "active"}
    assert not report.clean


async def test_mig_a_display_or_an_x_server_refuse_the_reset_and_nothing_is_asked(
        rig: Rig, sim: SimDir, tmp_path: Path) -> None:
    """A reset is not offered where it would hurt (MIG on, an active display, an X server holding the GPU): the step is
    skipped with the reason, nothing is asked, nothing is changed, and the X server is not signalled."""
    await leak(rig, sim, {0: 1000, 3: 2000})
    kw = tools(sim, modes={0: {"persistence": False, "mig": True, "display": False},
                           3: {"persistence": True, "mig": False, "display": True}})
    await rig.executor(auto_consent(["reset"]), deadlines=SHORT_VERIFY, **kw).run()
    res = results(rig)["reset"]
    assert res.status == "skipped" and res.reason.startswith("not offered: MIG mode is enabled on GPU 0")
    assert "a display is active on GPU 3" in res.reason
    assert not [c for c in rig.of(Consent) if c.step == "reset"] and changes(sim) == []
    preview = next(p for p in rig.of(StepPreview) if p.step == "reset")
    assert "read on the host: GPU 0: persistence off, MIG on, display off" in preview.action

    # an X server holding the GPU (by its executable) refuses it too, and is never signalled
    rig.events.clear()
    (sim.path / "modes.json").unlink()
    xorg = start_daemon(sim, tmp_path, name="Xorg")
    await rig.settled({xorg})
    await rig.executor(auto_consent(["reset"]), deadlines=SHORT_VERIFY, **kw).run()
    res = results(rig)["reset"]
    assert res.status == "skipped" and f"the X server (executable {tmp_path}/root/usr/bin/Xorg) (pid {xorg})" \
        in res.reason, res.reason
    assert changes(sim) == [] and alive(xorg)


def test_modes_parse_from_the_query() -> None:
    """The GPU modes the reset judges by (persistence, MIG, display) read from nvidia-smi's query, an unknown one as
    unknown; the real H200 host's values as the simulated tools default to."""
    text = "0, Enabled, Disabled, Disabled\n1, Disabled, [N/A], Enabled\nbogus\n"
    modes = parse_modes(text)
    assert (modes[0].persistence, modes[0].mig, modes[0].display) == (True, False, False)
    assert (modes[1].persistence, modes[1].mig, modes[1].display) == (False, None, True)
    # the real H200 host: persistence enabled, MIG disabled (as the simulated tools default to)
    q = (FIXTURES / "nvidia-smi-q.txt").read_text()
    assert "Persistence Mode                                   : Enabled" in q


async def test_the_dashboard_and_the_campaign_reset_the_demo_with_its_own_nvidia_smi() -> None:
    """A reset started from the dashboard or a campaign on the demo runs the simulated host's nvidia-smi
    (a plain `nvidia-smi` is not there), as `kimitui cleanup --host demo` does."""
    import os

    from kimitui.campaign.setup import CampaignHost
    from kimitui.live.context import LiveContext
    from kimitui.live.targets import open_target

    async with open_target("demo", gpus=2) as opened:
        live = LiveContext.of(opened)
        smi = opened.facts.nvidia_smi
        assert live.nvidia_smi == smi and smi != "nvidia-smi"
        assert os.access(smi, os.X_OK)
        res = await opened.host.run([live.nvidia_smi, "--query-gpu=index,persistence_mode", "--format=csv,noheader"],
                                    timeout=DEADLINE_S)
        assert res.ok and len(res.stdout.splitlines()) == 2, res
        host = CampaignHost(opened.host, opened.label, simulated=True, nvidia_smi=smi)
        assert host.nvidia_smi == smi
