"""Real processes for the cleanup tests: a simulated driver directory and the children that hold it.

Run as a script it becomes one of those children (stdlib only, starts fast):
  service SIM NGPU MIB IGNORE   a parent (pidfile SIM/run/service.pid) with one worker per GPU; on SIGTERM it
                                forwards SIGTERM to its workers and exits; the first IGNORE workers ignore it
  worker SIM GPU MIB IGNORE     maps SIM/dev/nvidiaGPU (a CUDA context) and records MIB on that GPU
  stray SIM GPU                 maps the device file, holds no memory
  ctx SIM MEM MAPS              a torch-like process: maps the device files of MAPS (e.g. 0,1) and records MEM
                                (e.g. 0=518,1=2426; "-" for none), as torch on cuda:1 does on a real 2 x H200 host
  monitor SIM                   opens every device file, maps none (an NVML-only monitor)
  sleeper [stopped]             does nothing until killed (stopped: it stops itself first)
  tty SIM ROLE ARGS...          screen -dm / tmux new -d: holds a pty's master and runs ``ROLE ARGS`` as the
                                leader of a new session with the pty as its controlling terminal
  hup_main SIM GPU MIB          a worker (GPU, MIB) that first double-forks a sleeper without setsid: re-parented
                                away, no descendant, but in the terminal's foreground group (SIM/ready/helper-PID
                                names it)
  session SIM ROLE ARGS...      a new session (setsid) whose leader stays, running ``ROLE ARGS`` in a process group
                                of its own: the leader is that group's link to its session (SIM/ready/session-PID)
  orphan_main SIM GPU MIB       a worker (GPU, MIB) with a child it stopped (SIGSTOP) and a sleeper it double-forked
                                without setsid (re-parented away, in its group), stopped too: when it exits the group
                                is orphaned with stopped members (SIM/ready/stopped-PID and helper-PID name them).
                                Both stopped, as kernels differ on the running ones (docs/cleanup.md)
  exec_daemon SIM GPU MIB EXE   a worker that, on SIGTERM, execs EXE (a host daemon's path): same pid, same start
  leader_exit SIM GPU MIB       a worker whose main thread calls pthread_exit while another thread holds on
  orphaner SIM GPU MIB          takes a context (MIB on GPU) and forks two children that inherit it, then waits to
                                be SIGKILLed: the driver keeps its memory under its dead pid while they live
Every child records (pid, start time) under SIM/spawned so the fixture's teardown kills what is left.
No test lives here; pytest collects nothing from this module.
"""

from __future__ import annotations

import json
import mmap
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

HERE = Path(__file__).resolve()
RESERVED_MIB = 616.0


def start_time(pid: int) -> int | None:
    """The start time of a live process (None: gone or a zombie), read by the agent's helper."""
    from kimitui.hostside.procfs import start_time_of

    return start_time_of(pid)


def _me() -> int:
    """This process's pid as /proc shows it: the host's, in a PID namespace of its own too (as NVML reports it)."""
    return int(os.readlink("/proc/self"))


def _record(sim: Path) -> None:
    me = _me()
    try:
        (sim / "spawned" / str(me)).write_text(str(start_time(me)))
    except OSError:  # another user: the test records it
        pass


def _holder(sim: Path, mem: dict[int, float]) -> None:
    me = _me()
    tmp = sim / "holders" / f".{me}.tmp"
    tmp.write_text(json.dumps({"pid": me, "start_time": start_time(me),
                               "mem_mib": {str(k): v for k, v in mem.items()}}))
    os.replace(tmp, sim / "holders" / f"{me}.json")


def _map(sim: Path, *gpus: int) -> list[object]:
    keep: list[object] = []
    for name in [f"nvidia{g}" for g in gpus] + ["nvidiactl", "nvidia-uvm"]:
        fd = os.open(sim / "dev" / name, os.O_RDWR)
        keep += [fd, mmap.mmap(fd, 4096, mmap.MAP_SHARED)]
    return keep


def _forever() -> None:
    while True:
        signal.pause()


def child(argv: list[str]) -> None:
    # the dispositions a process started from an operator's shell has: the suite may run under nohup, or in the
    # background of a script, and an ignored SIGHUP or SIGINT would be inherited by every child (a helper that
    # ignores SIGHUP survives its terminal's hangup)
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    role, sim = argv[0], Path(argv[1]) if len(argv) > 1 else None
    if sim is not None:
        _record(sim)
    if role == "worker":
        assert sim is not None
        gpu, mib, ignore = int(argv[2]), float(argv[3]), argv[4] == "1"
        if ignore:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        keep = _map(sim, gpu)
        _holder(sim, {gpu: mib})
        _forever()
        del keep
    elif role == "stray":
        assert sim is not None
        keep = _map(sim, int(argv[2]))
        (sim / "ready" / str(os.getpid())).touch()
        _forever()
        del keep
    elif role == "ctx":
        assert sim is not None
        mem = {int(g): float(m) for g, _, m in (x.partition("=") for x in argv[2].split(",") if x != "-")}
        keep = _map(sim, *(int(g) for g in argv[3].split(",")))
        if mem:
            _holder(sim, mem)
        (sim / "ready" / str(os.getpid())).touch()
        _forever()
        del keep
    elif role == "monitor":
        assert sim is not None
        fds = [os.open(p, os.O_RDWR) for p in sorted((sim / "dev").iterdir())]
        (sim / "ready" / str(os.getpid())).touch()
        _forever()
        del fds
    elif role == "service":
        assert sim is not None
        n, mib, ignore = int(argv[2]), float(argv[3]), int(argv[4])
        workers = [subprocess.Popen([sys.executable, str(HERE), "worker", str(sim), str(i), str(mib),
                                     "1" if i < ignore else "0"]) for i in range(n)]

        def stop(signum: int, frame: object) -> None:
            for w in workers:
                try:
                    os.kill(w.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            os._exit(0)

        signal.signal(signal.SIGTERM, stop)
        (sim / "run" / "service.pid").write_text(f"{os.getpid()}\n")
        _forever()
    elif role == "sleeper":
        if argv[2:] == ["stopped"]:
            os.kill(os.getpid(), signal.SIGSTOP)
        _forever()
    elif role == "tty":
        assert sim is not None
        master, slave = os.openpty()
        pid = os.fork()
        if pid == 0:
            os.close(master)
            os.login_tty(slave)  # setsid, the pty as controlling terminal, and stdin/out/err
            os.execv(sys.executable, [sys.executable, str(HERE), argv[2], str(sim), *argv[3:]])
        os.close(slave)
        (sim / "ready" / f"tty-{os.getpid()}").write_text(str(pid))
        os.waitpid(pid, 0)  # the master stays open while the session runs, as screen's does
    elif role == "hup_main":
        assert sim is not None
        gpu, mib = int(argv[2]), float(argv[3])
        keep = _map(sim, gpu)
        first = os.fork()
        if first == 0:  # double fork, no setsid: the helper stays in this session and process group
            helper = os.fork()
            if helper == 0:
                os.execv(sys.executable, [sys.executable, str(HERE), "sleeper", str(sim)])
            (sim / "ready" / f"helper-{os.getppid()}").write_text(str(helper))
            os._exit(0)
        os.waitpid(first, 0)
        _holder(sim, {gpu: mib})
        (sim / "ready" / str(os.getpid())).touch()
        _forever()
        del keep
    elif role == "session":
        assert sim is not None
        os.setsid()
        pid = os.fork()
        if pid == 0:
            os.setpgid(0, 0)
            os.execv(sys.executable, [sys.executable, str(HERE), argv[2], str(sim), *argv[3:]])
        (sim / "ready" / f"session-{os.getpid()}").write_text(str(pid))
        os.waitpid(pid, 0)
    elif role == "orphan_main":
        assert sim is not None
        gpu, mib = int(argv[2]), float(argv[3])
        keep = _map(sim, gpu)
        stopped = os.fork()
        if stopped == 0:
            _record(sim)
            os.kill(os.getpid(), signal.SIGSTOP)
            _forever()
        os.waitpid(stopped, os.WUNTRACED)  # it is stopped: the group has a stopped member from here on
        first = os.fork()
        if first == 0:  # double fork, no setsid: the helper stays in this process group
            helper = os.fork()
            if helper == 0:  # stopped too: every kernel sends an orphaned group's stopped members SIGHUP
                os.execv(sys.executable, [sys.executable, str(HERE), "sleeper", str(sim), "stopped"])
            os.waitpid(helper, os.WUNTRACED)
            (sim / "ready" / f"helper-{os.getppid()}").write_text(str(helper))
            os._exit(0)
        os.waitpid(first, 0)
        (sim / "ready" / f"stopped-{os.getpid()}").write_text(str(stopped))
        _holder(sim, {gpu: mib})
        (sim / "ready" / str(os.getpid())).touch()
        _forever()
        del keep
    elif role == "exec_daemon":
        assert sim is not None
        gpu, mib, exe = int(argv[2]), float(argv[3]), argv[4]
        keep = _map(sim, gpu)

        def become(signum: int, frame: object) -> None:
            os.execv(exe, [exe, "infinity"])

        signal.signal(signal.SIGTERM, become)
        _holder(sim, {gpu: mib})
        (sim / "ready" / str(os.getpid())).touch()
        _forever()
        del keep
    elif role == "leader_exit":
        assert sim is not None
        import ctypes
        import threading

        gpu, mib = int(argv[2]), float(argv[3])
        keep = _map(sim, gpu)
        _holder(sim, {gpu: mib})
        threading.Thread(target=_forever).start()
        (sim / "ready" / str(os.getpid())).touch()
        ctypes.CDLL(None).pthread_exit(None)
        del keep
    elif role == "orphaner":
        assert sim is not None
        from kimitui.hostside import simholder

        gpu, mib = int(argv[2]), float(argv[3])
        keep = _map(sim, gpu)
        ctx, _fd = simholder.open_context(str(sim))
        simholder.write_holder_record(str(sim), {gpu: mib}, None, ctx)
        kids = []
        for _ in range(2):
            kid = os.fork()
            if kid == 0:
                _record(sim)
                _forever()
            kids.append(kid)
        (sim / "ready" / str(os.getpid())).write_text(" ".join(map(str, kids)))
        _forever()
        del keep
    else:
        raise SystemExit(f"unknown role {role}")


# --- the test side ------------------------------------------------------------------------------------

@dataclass
class SimDir:
    """A simulated driver's directory (kimitui.hosts.sim's layout) plus the children started on it."""

    path: Path
    gpus: int
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)
    """What spawn started (ended by teardown)."""

    @property
    def dev_prefix(self) -> str:
        return str(self.path / "dev" / "nvidia")

    @property
    def pidfile(self) -> Path:
        return self.path / "run" / "service.pid"

    def spawn(self, *args: str, user: str | None = None) -> subprocess.Popen[bytes]:
        child = subprocess.Popen([sys.executable, str(HERE), args[0], str(self.path), *args[1:]],
                                 stdin=subprocess.DEVNULL, user=user)
        self.children.append(child)
        return child

    def holder_pids(self) -> set[int]:
        return {int(p.stem) for p in (self.path / "holders").glob("*.json")
                if start_time(int(p.stem)) is not None}

    def wait(self, pred: Callable[[], object], what: str) -> object:
        """tests/waiting.py's wait_until (imported here: run as a script, this module loads no tests/ module)."""
        from tests.waiting import wait_until

        return wait_until(pred, what)

    def start_service(self, n: int | None = None, mib: float = 40_000.0, ignore: int = 0) -> int:
        n = self.gpus if n is None else n
        before = self.holder_pids()
        self.spawn("service", str(n), str(mib), str(ignore))
        self.wait(lambda: self.pidfile.exists() and len(self.holder_pids() - before) >= n, what="service workers")
        return int(self.pidfile.read_text())

    def start_ready(self, *args: str) -> int:
        proc = self.spawn(*args)
        self.wait(lambda: (self.path / "ready" / str(proc.pid)).exists(), what=args[0])
        return proc.pid

    def start_holder(self, gpu: int, mib: float, ignore: bool = False) -> int:
        before = self.holder_pids()
        proc = self.spawn("worker", str(gpu), str(mib), "1" if ignore else "0")
        self.wait(lambda: proc.pid in self.holder_pids() - before, what="holder")
        return proc.pid

    def teardown(self) -> None:
        # Our own children first, by their Popen (unreaped, the pid is theirs): one that had not yet written
        # its record when the test ended (a quick test waits only for the pid) is ended too.
        for child in self.children:
            if child.poll() is None:
                child.kill()
                child.wait()
        for rec in (self.path / "spawned").iterdir():
            pid = int(rec.name)
            if start_time(pid) is not None and str(start_time(pid)) == rec.read_text():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def make_sim(path: Path, gpus: int = 4, total_mib: int = 97_887) -> SimDir:
    for sub in ("dev", "holders", "run", "spawned", "ready"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    spec = [{"index": i, "uuid": f"GPU-test-{i}", "name": "Test GPU", "total_mib": total_mib,
             "reserved_mib": RESERVED_MIB, "pci": f"00000000:{i:02X}:00.0"} for i in range(gpus)]
    (path / "gpus.json").write_text(json.dumps({"driver": "sim-test", "gpus": spec}))
    for name in [f"nvidia{i}" for i in range(gpus)] + ["nvidiactl", "nvidia-uvm"]:
        (path / "dev" / name).write_bytes(b"\0" * 4096)
    return SimDir(path, gpus)


def alive(pid: int) -> bool:
    return start_time(pid) is not None


NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")


def spawn_at_pid(sim: SimDir, pid: int, *args: str, tries: int = 200) -> subprocess.Popen[bytes]:
    """A real child started under a pid that was free again (a forced pid reuse): the kernel's last pid
    set to pid - 1 right before the fork (root, /proc/sys/kernel/ns_last_pid); retried while another
    process of the machine takes the pid first. Needs the pid free (its old process exited and reaped).
    The counter is put back to where it was (its high-water mark), so the processes other tests start meanwhile
    (the suite runs in parallel) are not handed pids just freed, which a check by pid alone would misread."""
    high = int(NS_LAST_PID.read_text())
    try:
        for _ in range(tries):
            NS_LAST_PID.write_text(str(pid - 1))
            proc = sim.spawn(*args)
            if proc.pid == pid:
                return proc
            proc.kill()
            proc.wait()
        raise AssertionError(f"pid {pid} not reused after {tries} tries")
    finally:
        NS_LAST_PID.write_text(str(max(high, int(NS_LAST_PID.read_text()))))


def can_force_pids() -> bool:
    return os.geteuid() == 0 and os.access(NS_LAST_PID, os.W_OK)


if __name__ == "__main__":
    child(sys.argv[1:])
