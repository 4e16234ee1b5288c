"""What a GPU reset needs on the host, read before it is offered, and what the reset step changes for it.

A reset (``nvidia-smi --gpu-reset -i N``) fails while anything keeps the GPU open. Read on the host:
persistence mode, MIG mode and whether a display is active, per GPU (one ``nvidia-smi --query-gpu``); the
DCGM host engine (``systemctl is-active`` of its units, and an nv-hostengine the sample shows holding the
GPU, by executable); an X server holding the GPU (the sample, by executable). What the step can change it
changes and restores afterwards, in reverse order, even when the reset fails: persistence off (``-pm 0``,
then ``-pm 1``), the DCGM unit stopped (then started). What it cannot change refuses the reset: MIG mode
enabled (its instances would have to be destroyed), an active display, nv-hostengine outside a known unit.
"Display Attached: Yes" is not used: a headless H200 in a VM reports it (tests/fixtures/h200x2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kimitui.cleanup.plan import proc_gpus
from kimitui.cleanup.safety import exe_basename, host_daemon
from kimitui.core.events import HostSample
from kimitui.hosts.base import Host, HostError

MODE_FIELDS = ["index", "persistence_mode", "mig.mode.current", "display_active"]
DCGM_UNITS = ["nvidia-dcgm.service", "dcgm.service"]
DISPLAY_EXES = {"Xorg", "X", "Xwayland"}


@dataclass(frozen=True, slots=True)
class GpuModes:
    index: int
    persistence: bool | None
    """None: not readable ([N/A], an error)."""
    mig: bool | None
    display: bool | None


@dataclass(frozen=True, slots=True)
class Change:
    argv: list[str]
    purpose: str


@dataclass(slots=True)
class ResetPrep:
    """What was read (in words), what blocks the reset, what runs before it and what restores after."""

    read: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    before: list[tuple[Change, Change]] = field(default_factory=list)
    """Each change with the change that undoes it."""


def _flag(cell: str) -> bool | None:
    word = cell.strip().lower()
    return True if word == "enabled" else False if word == "disabled" else None


def parse_modes(text: str) -> dict[int, GpuModes]:
    """``nvidia-smi --query-gpu=index,persistence_mode,mig.mode.current,display_active --format=csv,noheader``."""
    out: dict[int, GpuModes] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(MODE_FIELDS) or not cells[0].isdigit():
            continue
        out[int(cells[0])] = GpuModes(int(cells[0]), _flag(cells[1]), _flag(cells[2]), _flag(cells[3]))
    return out


async def read_modes(host: Host, smi: str, timeout: float) -> tuple[dict[int, GpuModes], str]:
    """The modes of every GPU, and '' or why they could not be read."""
    argv = [smi, f"--query-gpu={','.join(MODE_FIELDS)}", "--format=csv,noheader"]
    try:
        res = await host.run(argv, timeout=timeout)
    except HostError as exc:
        return {}, str(exc)
    if not res.ok:
        return {}, f"rc {res.rc}: {' '.join((res.stderr or res.stdout).split())[:120]}"
    return parse_modes(res.stdout), ""


async def active_units(host: Host, systemctl: str, units: list[str], timeout: float) -> list[str]:
    """Those of ``units`` systemd says are active (none where there is no systemd)."""
    try:
        res = await host.run([systemctl, "is-active", *units], timeout=timeout)
    except HostError:
        return []
    states = res.stdout.split()
    return [u for u, s in zip(units, states, strict=False) if s == "active"]


def _on(modes: dict[int, GpuModes], gpus: list[int], attr: str) -> list[int]:
    return [i for i in gpus if i in modes and getattr(modes[i], attr)]


async def prepare(host: Host, smi: str, systemctl: str, gpus: list[int], sample: HostSample,
                  timeout: float) -> ResetPrep:
    prep = ResetPrep()
    modes, unreadable = await read_modes(host, smi, timeout)
    if unreadable:
        prep.read.append(f"modes unreadable ({unreadable})")
    else:
        for i in gpus:
            m = modes.get(i)
            if m is None:
                prep.read.append(f"GPU {i}: modes not listed")
                continue
            words = {True: "on", False: "off", None: "unknown"}
            prep.read.append(f"GPU {i}: persistence {words[m.persistence]}, MIG {words[m.mig]}, "
                             f"display {words[m.display]}")
    for i in _on(modes, gpus, "persistence"):
        prep.before.append((Change([smi, "-i", str(i), "-pm", "0"], f"persistence mode off on GPU {i}"),
                            Change([smi, "-i", str(i), "-pm", "1"], f"persistence mode back on on GPU {i}")))
    for i in _on(modes, gpus, "mig"):
        prep.refusals.append(f"MIG mode is enabled on GPU {i}: its instances would have to be destroyed first "
                             "(not done here)")
    for i in _on(modes, gpus, "display"):
        prep.refusals.append(f"a display is active on GPU {i}")
    scope = set(gpus)
    for p in sample.procs:
        if p.exe and exe_basename(p.exe) in DISPLAY_EXES and proc_gpus(p) & scope:
            prep.refusals.append(f"{host_daemon(p.exe, p.unit)} (pid {p.pid}) holds GPU "
                                 f"{','.join(map(str, sorted(proc_gpus(p) & scope)))}")
    units = await active_units(host, systemctl, DCGM_UNITS, timeout)
    prep.read.append("nv-hostengine: " + (f"{', '.join(units)} active" if units else "no DCGM unit active"))
    for unit in units:
        prep.before.append((Change([systemctl, "stop", unit], f"stop {unit} (nv-hostengine holds every GPU)"),
                            Change([systemctl, "start", unit], f"start {unit} again")))
    if not units:
        engines = sorted(p.pid for p in sample.procs
                         if p.exe and exe_basename(p.exe) == "nv-hostengine" and proc_gpus(p) & scope)
        if engines:
            prep.refusals.append(f"nv-hostengine (pid {', '.join(map(str, engines))}) holds the GPU outside "
                                 f"{' / '.join(DCGM_UNITS)}: stop it first (not done here)")
    return prep
