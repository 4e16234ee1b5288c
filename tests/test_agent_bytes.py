"""Processes whose names are not UTF-8, seen by the real agent: a name the kernel cut mid-character
(prctl(PR_SET_NAME) keeps 15 bytes) and a program whose file (or a symlink exec'd) is named with the bytes
\\xff\\xfe. They are visible with their start time, their names shown with visible escapes, and a real cleanup on a
simulated driver cleans them and the GPUs verify. The micro workers' simulated holder record takes them too."""

from __future__ import annotations

import asyncio
import json
import os
import select
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimitui.cleanup import auto_consent
from kimitui.core.events import StepPreview
from kimitui.hosts.local import LocalHost
from kimitui.hostside.procfs import parse_cmdline, parse_stat, read_stat
from tests.agent_helpers import host as host  # a fixture: a local agent under each python
from tests.agent_helpers import make_sim_dir
from tests.cleanup_rig import Rig, results
from tests.cleanup_support import HERE as CLEANUP_SUPPORT
from tests.cleanup_support import SimDir
from tests.pythons import agent_pythons
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parent.parent
CUT_NAME = "ab日本語ワーカー".encode()  # 23 bytes: the kernel keeps 15, cutting the 6th character after 2 bytes
KEPT = CUT_NAME[:15]

NAMED = r"""
import ctypes, runpy, sys
ctypes.CDLL(None).prctl(15, ctypes.c_char_p(bytes.fromhex(sys.argv[1])), 0, 0, 0)
path = sys.argv[2]
sys.argv = [path] + sys.argv[3:]
runpy.run_path(path, run_name="__main__")
"""
"""Set this process's name (raw bytes, hex), then run a script as __main__ (a cleanup_support child)."""

GPU_HOLDER = r"""
import ctypes, json, mmap, os, signal, sys
sim, mode, gpu, mib, name = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
if name != "-":
    ctypes.CDLL(None).prctl(15, ctypes.c_char_p(bytes.fromhex(name)), 0, 0, 0)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
keep = []
for dev in ("nvidia" + gpu, "nvidiactl", "nvidia-uvm"):
    fd = os.open(os.path.join(sim, "dev", dev), os.O_RDWR)
    keep += [fd, mmap.mmap(fd, 4096, mmap.MAP_SHARED)]
if mode == "cuda":
    with open("/proc/self/stat", "rb") as fh:
        start = int(fh.read().rpartition(b")")[2].split()[19])
    tmp = os.path.join(sim, "holders", ".%d.tmp" % os.getpid())
    with open(tmp, "w") as fh:
        json.dump({"pid": os.getpid(), "start_time": start, "mem_mib": {gpu: mib}}, fh)
    os.rename(tmp, os.path.join(sim, "holders", "%d.json" % os.getpid()))
open(os.path.join(sim, "ready", str(os.getpid())), "w").close()
signal.pause()
"""
"""A CUDA-like holder (maps its GPU's device files; mode cuda: records MIB with the simulated driver, mode
stray: no memory) that ignores SIGTERM, under the name given (hex bytes; '-': its program's). Stdlib only,
its start time parsed here: nothing of kimitui runs in it."""


def true_start(pid: int) -> int:
    """/proc/PID/stat field 22, parsed here (bytes, after the last ')') so the test does not lean on the agent."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        return int(fh.read().rpartition(b")")[2].split()[19])


def kernel_comm(pid: int) -> bytes:
    with open(f"/proc/{pid}/comm", "rb") as fh:
        return fh.read().rstrip(b"\n")


class Kids:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str | bytes]) -> subprocess.Popen[bytes]:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()


@pytest.fixture
def kids() -> Iterator[Kids]:
    k = Kids()
    yield k
    k.close()


def wait_line(proc: subprocess.Popen[bytes], want: bytes) -> None:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 15.0)
    assert ready and proc.stdout.readline().strip() == want, "child did not start"


def cut_name_sleeper(kids: Kids) -> subprocess.Popen[bytes]:
    code = ("import ctypes, signal, sys; ctypes.CDLL(None).prctl(15, ctypes.c_char_p(bytes.fromhex(sys.argv[1])), "
            "0, 0, 0); print('ready', flush=True); signal.pause()")
    proc = kids.start([sys.executable, "-c", code, CUT_NAME.hex()])
    wait_line(proc, b"ready")
    assert kernel_comm(proc.pid) == KEPT
    return proc


def odd_exe_sleeper(kids: Kids, tmp: Path) -> subprocess.Popen[bytes]:
    """sleep, copied to a file named with the bytes \\xff\\xfe: its name, argv[0] and exe are all them."""
    exe = os.path.join(os.fsencode(tmp), b"\xff\xfe")
    shutil.copy(b"/bin/sleep", exe)
    proc = kids.start([exe, "600"])
    # exec'd once its name is the link's (before that it is the forked python's)
    wait_until(lambda: kernel_comm(proc.pid) == b"\xff\xfe", "the symlinked sleep to start")
    return proc


# --- the parser -------------------------------------------------------------------------------------

def test_stat_is_parsed_as_bytes_after_the_last_paren() -> None:
    raw = b"4242 (" + KEPT + b") x) S 1 4242 4242 0 -1 4194560 " + b"0 " * 8 + b"20 0 1 0 987654 0 0"
    st = parse_stat(raw)
    assert (st.pid, st.state, st.ppid, st.start_time) == (4242, "S", 1, 987654)
    assert st.comm == "ab日本語ワ\\xe3) x"  # the cut character's byte shown, escaped; JSON stays valid
    assert json.loads(json.dumps(st.comm)) == st.comm
    assert parse_cmdline(b"/tmp/\xff\xfe\0--flag\0") == "/tmp/\\xff\\xfe --flag"


# --- the agent: scan, stat, sample ------------------------------------------------------------------

PYTHONS = agent_pythons()




async def test_names_that_are_not_utf8_are_visible_with_their_start_time(
        host: LocalHost, kids: Kids, tmp_path: Path) -> None:
    cut = cut_name_sleeper(kids)
    odd = odd_exe_sleeper(kids, tmp_path)
    stat = await host.stat([cut.pid, odd.pid])
    assert stat == {cut.pid: (true_start(cut.pid), "S"), odd.pid: (true_start(odd.pid), "S")}
    scan = {p["pid"]: p for p in (await host.scan_processes())["procs"]}
    assert scan[cut.pid]["start"] == true_start(cut.pid) and scan[odd.pid]["start"] == true_start(odd.pid)
    assert scan[odd.pid]["cmdline"] == os.fsdecode(tmp_path) + "/\\xff\\xfe 600"
    assert scan[odd.pid]["exe"] == os.fsdecode(tmp_path) + "/\\xff\\xfe"
    local = read_stat(cut.pid)  # the helper kimitui itself uses (start_time_of, the sim host's teardown)
    assert local is not None and local.comm == KEPT.decode("utf-8", "backslashreplace")

    sim = make_sim_dir(tmp_path / "sim")
    (sim / "spawned").mkdir()
    holder = kids.start([sys.executable, "-c", NAMED, CUT_NAME.hex(), str(CLEANUP_SUPPORT), "worker",
                         str(sim), "1", "2048", "0"])
    wait_until(lambda: (sim / "holders" / f"{holder.pid}.json").exists(), "the holder to start")
    queue = host.link.subscribe()
    await host.request("sample", {"sim_dir": str(sim), "interval": 0.1, "scan_interval": 0.1})
    while True:
        sample = json.loads(await asyncio.wait_for(queue.get(), 15.0))
        procs = {p["pid"]: p for p in sample.get("procs", [])}
        if holder.pid in procs and procs[holder.pid]["kind"] == "cuda":
            break
    seen = procs[holder.pid]
    assert seen["visible"] and "pid-not-visible" not in seen["flags"]
    assert seen["start_time"] == true_start(holder.pid) and seen["kind"] == "cuda"
    assert seen["gpu_mem_mib"] == {"1": 2048.0}


# --- a real cleanup ---------------------------------------------------------------------------------

async def test_a_cleanup_kills_holders_whose_names_are_not_utf8_and_the_gpus_verify(
        sim: SimDir, tmp_path: Path, kids: Kids) -> None:
    holder = kids.start([sys.executable, "-c", GPU_HOLDER, str(sim.path), "cuda", "0", "30000", CUT_NAME.hex()])
    link = os.path.join(os.fsencode(tmp_path), b"\xff\xfe")
    os.symlink(os.fsencode(sys.executable), link)
    stray = kids.start([link, "-c", GPU_HOLDER, str(sim.path), "stray", "1", "0", "-"])
    sim.wait(lambda: all((sim.path / "ready" / str(p.pid)).exists() for p in (holder, stray)), what="the holders")
    assert kernel_comm(holder.pid) == KEPT and kernel_comm(stray.pid) == b"\xff\xfe"
    rig = Rig(sim, LocalHost(), tmp_path)
    await rig.start()
    try:
        sample = await rig.settled({holder.pid, stray.pid})
        by_pid = {p.pid: p for p in sample.procs}
        assert by_pid[holder.pid].visible and by_pid[holder.pid].start_time == true_start(holder.pid)
        assert by_pid[stray.pid].visible and by_pid[stray.pid].start_time == true_start(stray.pid)
        report = await rig.executor(auto_consent(["graceful", "process", "others", "device"])).run()
        res = results(rig)
        others = next(p for p in rig.of(StepPreview) if p.step == "others")  # no service: whatever holds them
        assert {t.pid for t in others.targets} == {holder.pid, stray.pid}, res
        assert [s.signal for s in rig.signals(holder.pid)] == ["SIGTERM", "SIGKILL"]  # it ignores SIGTERM
        assert [s.signal for s in rig.signals(stray.pid)] == ["SIGTERM", "SIGKILL"]
        assert report.clean and report.verification is not None and report.verification.clean
        assert holder.wait(10) == -9 and stray.wait(10) != 0
    finally:
        await rig.close()


# --- the micro workers ------------------------------------------------------------------------------

def test_micro_workers_read_their_start_time_under_a_name_cut_mid_character(tmp_path: Path, kids: Kids) -> None:
    """Both workers hold simulated memory through kimitui/hostside/simholder.py (its record carries the
    start time procfs parses)."""
    sim = make_sim_dir(tmp_path / "sim")
    script = tmp_path / "hold.py"
    script.write_text(
        "import sys\n"
        "from kimitui.hostside.simholder import hold_simulated_memory\n"
        "keep = hold_simulated_memory(sys.argv[1], [1], 100, 35)\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n")
    proc = kids.start([sys.executable, "-c", NAMED, CUT_NAME.hex(), str(script), str(sim)])
    wait_line(proc, b"held")
    assert kernel_comm(proc.pid) == KEPT
    record = json.loads((sim / "holders" / f"{proc.pid}.json").read_text())
    assert record["start_time"] == true_start(proc.pid)
