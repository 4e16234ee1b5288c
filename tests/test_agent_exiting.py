"""A GPU holder on its way out is read as "exiting", never as a handle-only holder (an NVML monitor): the
kernel sets PF_EXITING (0x4, /proc/PID/stat field 9) in do_exit before exit_mm tears the mappings down and
before exit_files closes the files, so for a while an exiting CUDA process holds its device files with no
mapping left (issue 31: the cleanup's summary then listed an exiting worker next to the monitor it leaves
alone). Checked on /proc text captured from real exiting holders (tests/fixtures/exiting: a torch process on
an H200, a simulated host's holder) and on a real process caught while it exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kimitui.cleanup.executor import CleanupExecutor
from kimitui.cleanup.plan import cuda_holders
from kimitui.commands.cleanup import untouched
from kimitui.core.events import HostSample, ProcSample
from kimitui.hosts.telemetry import parse_agent_line
from kimitui.hostside import holders, procfs
from kimitui.hostside.simholder import DEV_FILE_BYTES, device_paths

HERE = Path(__file__).resolve().parent
CAPTURES = HERE / "fixtures" / "exiting"
H200X2 = HERE / "fixtures" / "h200x2"
SIM_PREFIX = "/tmp/kimitui-sim-7_tus7cf/dev/nvidia"
"""The simulated host's device folder when sim-*.txt were captured (the fd links name it)."""
REPO = HERE.parent


def capture(name: str) -> str:
    return (CAPTURES / name).read_text()


def fd_targets(listing: str) -> list[str]:
    """Link targets of a fd capture (``FD -> TARGET`` lines, or ``ls -l`` lines)."""
    return [line.split(" -> ", 1)[1].strip() for line in listing.splitlines() if " -> " in line]


def fake_proc(root: Path, pid: int, stat: str, fds: str, maps: str) -> None:
    """/proc/PID as captured: stat, fd links (dangling links read all the same), maps."""
    d = root / str(pid)
    (d / "fd").mkdir(parents=True)
    for n, target in enumerate(fd_targets(fds)):
        os.symlink(target, d / "fd" / str(n))
    (d / "stat").write_text(stat.replace(stat.split(" (", 1)[0] + " (", f"{pid} (", 1))
    (d / "maps").write_text(maps)


def test_stat_flags_say_a_process_is_in_exit() -> None:
    """The stat parser keeps field 9 (flags): PF_EXITING is set in the captures read during an exit, not in
    those read before."""
    for name in ("sim-live-stat.txt", "h200-live-stat.txt", "../h200x2/holder-stat.txt"):
        st = procfs.parse_stat(capture(name))
        assert st.flags and not procfs.in_exit(st), name
    for name, flags in (("sim-exiting-stat.txt", 0x40040C), ("h200-exiting-stat.txt", 0x40050C)):
        st = procfs.parse_stat(capture(name))
        assert st.flags == flags and procfs.in_exit(st) and st.state == "R", name
    odd = procfs.parse_stat("42 (a) b (c)) R 7 3 5 0 -1 4194308 0 0 0 0 0 0 0 0 20 0 1 0 999 0 0")
    assert (odd.comm, odd.start_time, odd.flags, procfs.in_exit(odd)) == ("a) b (c)", 999, 0x400004, True)


def test_the_captured_holders_in_exit_read_exiting_and_the_monitor_a_handle(tmp_path: Path) -> None:
    """From the captures: the simulated holder alive maps its device files ("cuda"); in exit its maps are
    gone and its fds still open, which read "handle" before (issue 31) and read "exiting" now; the torch
    process in exit on the H200 (fds and maps still listed) is "exiting" too; the NVML-only process of the
    2 x H200 capture stays a "handle"."""
    root = tmp_path / "proc"
    fake_proc(root, 101, capture("sim-live-stat.txt"), capture("sim-live-fd.txt"), capture("sim-live-maps-dev.txt"))
    fake_proc(root, 102, capture("sim-exiting-stat.txt"), capture("sim-exiting-fd.txt"),
              capture("sim-exiting-maps.txt"))
    sim = holders.HolderScan(str(root), SIM_PREFIX, skip=set(), every=2.0)
    assert sim.scan_pid(101) == ("cuda", [0], True)
    assert sim.scan_pid(102) == ("exiting", [0], True)

    fake_proc(root, 201, capture("h200-exiting-stat.txt"), capture("h200-exiting-fd.txt"),
              capture("h200-exiting-maps-nvidia.txt"))
    fake_proc(root, 202, (H200X2 / "holder-stat.txt").read_text(), (H200X2 / "nvmlonly-fd.txt").read_text(),
              (H200X2 / "nvmlonly-maps-nvidia.txt").read_text())
    real = holders.HolderScan(str(root), "/dev/nvidia", skip=set(), every=2.0)
    assert real.scan_pid(201) == ("exiting", [0], True)
    assert real.scan_pid(202) == ("handle", [0, 1], True)
    assert real.update(0.0, set()) == {201: ("exiting", [0], True), 202: ("handle", [0, 1], True)}


def test_a_holder_gone_to_a_zombie_between_the_reads_holds_nothing(tmp_path: Path) -> None:
    """Fds read while it held them, stat read after it became a zombie: no holder (a zombie holds no
    files), not a handle."""
    root = tmp_path / "proc"
    zombie = capture("sim-exiting-stat.txt").replace(") R ", ") Z ", 1)
    fake_proc(root, 103, zombie, capture("sim-exiting-fd.txt"), "")
    assert holders.HolderScan(str(root), SIM_PREFIX, skip=set(), every=2.0).scan_pid(103) == (None, [], True)


HOLDER = """
import signal, sys
from kimitui.hostside.simholder import open_device_files
held = open_device_files(sys.argv[1], [0])
ballast = bytearray(64 << 20)  # memory for exit_mm to tear down: the window with fds and no maps
print("ready", flush=True)
signal.pause()  # held until the test kills it
"""
"""A holder of the simulated host (device files open and mapped, as the sim's workers hold them)."""


def raw_state_and_flags(pid: int) -> tuple[str | None, int]:
    """Stat fields 3 and 9, read here apart from the code under test."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rpartition(b")")[2].split()
    except OSError:
        return None, 0
    return fields[0].decode(), int(fields[6])


def readings_while_it_exits(sim_dir: Path) -> list[tuple[str | None, bool]]:
    """(kind, PF_EXITING read after) of every scan of one holder from its SIGTERM until it is a zombie."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(sim_dir)], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    scan = holders.HolderScan("/proc", str(sim_dir / "dev" / "nvidia"), skip=set(), every=2.0)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        assert scan.scan_pid(proc.pid) == ("cuda", [0], True)
        out: list[tuple[str | None, bool]] = []
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            kind, _, _ = scan.scan_pid(proc.pid)
            state, flags = raw_state_and_flags(proc.pid)
            if state in ("Z", "X", None):
                break
            out.append((kind, bool(flags & 0x4)))
        return out
    finally:
        proc.kill()
        proc.wait()


def test_a_real_holder_caught_in_exit_reads_exiting_never_handle(tmp_path: Path) -> None:
    """A real process holding the simulated device files, scanned as fast as the agent can while it exits
    after a SIGTERM: each reading is "cuda" (not yet in exit), "exiting" or nothing (files closed), never a
    handle. The window (fds open, maps gone) lasts while the kernel frees the 64 MiB; the holder is started
    again until a reading fell in it (one did in each of 10 tries on a 2-core VM)."""
    for path in device_paths(str(tmp_path), [0]):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Path(path).write_bytes(bytes(DEV_FILE_BYTES))
    seen: list[tuple[str | None, bool]] = []
    for _ in range(20):
        seen += readings_while_it_exits(tmp_path)
        if ("exiting", True) in seen:
            break
    assert "handle" not in {kind for kind, _ in seen}
    assert ("exiting", True) in seen, f"no reading caught the holder in exit: {sorted(set(seen), key=str)}"
    assert all(kind != "exiting" or in_exit for kind, in_exit in seen)


# --- what the kind means downstream -------------------------------------------------------------------

def sample_with(*procs: ProcSample) -> HostSample:
    return HostSample(t=0.0, host="h", procs=list(procs))


MONITOR = ProcSample(pid=10, start_time=1, kind="handle", gpus=[0, 1], cmdline="nvml-monitor")
EXITING = ProcSample(pid=11, start_time=1, kind="exiting", gpus=[0], cmdline="worker", state="R")
EXITING_WITH_MEMORY = ProcSample(pid=12, start_time=1, kind="exiting", gpus=[1], gpu_mem_mib={1: 4000.0},
                                 cmdline="worker", state="R")


def test_an_exiting_holder_is_no_monitor_left_alone_but_still_holds_the_gpu() -> None:
    """The summary's left alone lists the monitor only; verification still counts an exiting holder (its
    files are not closed yet); the kill steps see it as on its way out, not as one to signal."""
    sample = sample_with(MONITOR, EXITING, EXITING_WITH_MEMORY)
    assert [k["pid"] for k in untouched(sample, [0, 1], signalled=set())] == [10]
    assert [p.pid for p in cuda_holders(sample, [0, 1])] == [11, 12]
    assert CleanupExecutor.not_live(_Scan(), EXITING) == "exiting: the kernel is closing its files and " \
        "releasing its memory (verify waits for it)"
    assert CleanupExecutor.not_live(_Scan(), MONITOR) is None


class _Info:
    state, start_time = "R", 1


class _Scan:
    procs = {10: _Info(), 11: _Info(), 12: _Info()}


def test_the_agent_line_with_an_exiting_process_is_a_sample() -> None:
    line = ('{"type": "sample", "t": 1.0, "seq": 1, "gpus": [], "procs": [{"pid": 11, "kind": "exiting", '
            '"gpus": [0], "gpu_mem_mib": {}}]}')
    sample = parse_agent_line(line, host="h")
    assert isinstance(sample, HostSample) and sample.procs[0].kind == "exiting"


def test_an_exiting_holder_is_shown_muted_like_a_handle() -> None:
    from kimitui.tui.widgets.proc_table import kind_style

    class Colors:
        primary, muted, warning = "p", "m", "w"

    shown = {kind: kind_style(kind, Colors()) for kind in ("cuda", "handle", "exiting", "unknown")}  # type: ignore[arg-type]
    assert shown == {"cuda": "p", "handle": "m", "exiting": "m", "unknown": "w"}
