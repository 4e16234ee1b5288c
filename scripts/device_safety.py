#!/usr/bin/env python3
"""What the cleanup promises, on real GPUs: only the service, others apart, the host's daemons spared.

    PYTHONPATH=. python3 scripts/device_safety.py --out DIR [--gib 8]

On GPU 0 of the machine it runs on (needs torch and pynvml) it starts:
  - a "service" (a pidfile parent) with one torch worker holding --gib GiB that ignores SIGTERM and whose
    name the kernel cut mid-character (prctl PR_SET_NAME "ab日本語ワーカー": 15 bytes, not UTF-8);
  - a torch process holding 2 GiB that is NOT the service (an operator's notebook, say);
  - a stand-in for nvidia-persistenced: a copy of sleep at DIR/root/usr/bin/nvidia-persistenced holding
    the device files open, as the real daemon does (the machine runs none of its own);
  - an NVML-only monitor.
Then `kimitui cleanup --host local --service pidfile:... --json` twice:
  1. `--yes graceful,process,device`: the service goes; the other holder, the daemon and the monitor stay;
     the GPU is NOT clean and the summary names the other holder (exit 1);
  2. `--yes graceful,process,others,device`: the other holder goes too; CLEAN (exit 0); daemon and
     monitor alive.
Writes DIR/safety.txt (the checks, PASS/FAIL a line) and both runs' JSON lines and run files.
Exit 0 only when every check passed. Every process it starts is killed on exit.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
CUT_NAME = "ab日本語ワーカー".encode()[:15]


def role_worker(gib: float, ready: Path) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, ctypes.c_char_p(CUT_NAME), 0, 0, 0)  # PR_SET_NAME
    import torch

    block = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda:0")
    block.fill_(1)
    torch.cuda.synchronize()
    ready.write_text(str(os.getpid()))
    while True:
        signal.pause()


def role_other(gib: float, ready: Path) -> None:
    import torch

    block = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda:0")
    block.fill_(1)
    torch.cuda.synchronize()
    ready.write_text(str(os.getpid()))
    while True:
        signal.pause()


def role_service(gib: float, workdir: Path) -> None:
    worker = subprocess.Popen([sys.executable, str(HERE), "--role", "worker", str(gib),
                               str(workdir / "worker.ready")])

    def stop(signum: int, frame: object) -> None:
        os._exit(0)  # the worker is left behind, as a stuck vLLM worker is

    signal.signal(signal.SIGTERM, stop)
    (workdir / "service.pid").write_text(f"{os.getpid()}\n")
    worker.wait()


def role_monitor(beat: Path) -> None:
    import pynvml

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    n = 0
    while True:
        pynvml.nvmlDeviceGetMemoryInfo(h)
        n += 1
        beat.write_text(str(n))
        time.sleep(0.2)  # the monitor's own sampling period


def wait_for(pred, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def cleanup(out: Path, name: str, pidfile: Path, steps: str) -> tuple[int, list[dict], float]:
    env = {**os.environ, "XDG_DATA_HOME": str(out / f"data-{name}"), "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    started = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "kimitui", "cleanup", "--host", "local", "--service",
                          f"pidfile:{pidfile}", "--gpus", "0", "--yes", steps, "--json", "--threshold-mib", "64"],
                         capture_output=True, text=True, env=env, timeout=240)
    took = time.monotonic() - started
    (out / f"{name}.jsonl").write_text(res.stdout)
    (out / f"{name}.err").write_text(res.stderr)
    lines = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    return res.returncode, lines, took


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/kimitui-safety"))
    ap.add_argument("--gib", type=float, default=8.0)
    args = ap.parse_args()
    if args.role:
        role, rest = args.role[0], args.role[1:]
        {"worker": lambda: role_worker(float(rest[0]), Path(rest[1])),
         "other": lambda: role_other(float(rest[0]), Path(rest[1])),
         "service": lambda: role_service(float(rest[0]), Path(rest[1])),
         "monitor": lambda: role_monitor(Path(rest[0]))}[role]()
        return 0

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    work.mkdir(exist_ok=True)
    lines: list[str] = []
    ok = True

    def check(cond: bool, what: str) -> None:
        nonlocal ok
        ok = ok and cond
        lines.append(f"{'PASS' if cond else 'FAIL'} {what}")
        print(lines[-1], flush=True)

    spawned: list[subprocess.Popen[bytes]] = []
    fds: list[int] = []
    try:
        daemon_exe = work / "root" / "usr" / "bin" / "nvidia-persistenced"
        daemon_exe.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(shutil.which("sleep") or "/bin/sleep", daemon_exe)
        fds = [os.open(p, os.O_RDWR) for p in ("/dev/nvidiactl", "/dev/nvidia0") if os.path.exists(p)]
        daemon = subprocess.Popen([str(daemon_exe), "infinity"], pass_fds=fds, start_new_session=True)
        spawned.append(daemon)
        for fd in fds:  # the daemon holds them now; this script is no holder of its own
            os.close(fd)
        fds = []
        service = subprocess.Popen([sys.executable, str(HERE), "--role", "service", str(args.gib), str(work)],
                                   start_new_session=True)
        spawned.append(service)
        other = subprocess.Popen([sys.executable, str(HERE), "--role", "other", "2", str(work / "other.ready")],
                                 start_new_session=True)
        spawned.append(other)
        monitor = subprocess.Popen([sys.executable, str(HERE), "--role", "monitor", str(work / "monitor.beat")],
                                   start_new_session=True)
        spawned.append(monitor)
        wait_for(lambda: all((work / f).exists() for f in ("worker.ready", "other.ready", "monitor.beat",
                                                             "service.pid")), 180, "the GPU processes")
        worker = int((work / "worker.ready").read_text())
        comm = Path(f"/proc/{worker}/comm").read_bytes().rstrip(b"\n")
        check(comm == CUT_NAME and not _utf8(comm), f"the service's worker {worker} has a name that is not UTF-8: "
              f"{comm!r}")
        pidfile = work / "service.pid"
        print(f"service {service.pid}, worker {worker}, other {other.pid}, daemon {daemon.pid}, "
              f"monitor {monitor.pid}", flush=True)

        rc, ev, took = cleanup(out, "without-others", pidfile, "graceful,process,device")
        summary = ev[-1] if ev else {}
        signalled = {e["pid"] for e in ev if e.get("type") == "signal" and e.get("outcome") == "sent"}
        check(rc == 1 and summary.get("clean") is False, f"without others: exit {rc}, clean {summary.get('clean')} "
              f"({took:.1f} s)")
        check(not alive(worker), f"the worker (cut name, ignores SIGTERM) was cleaned: signals to it "
              f"{sorted(s for s in signalled if s == worker)}")
        check(alive(other.pid) and other.pid not in signalled, f"the other holder {other.pid} was left alone")
        named = [k["pid"] for k in summary.get("others_left", [])]
        check(named == [other.pid], f"the summary names it: others_left {named}")
        previews = [e for e in ev if e.get("type") == "step_preview"]
        daemon_rows = [r for p in previews for r in p.get("spared", []) if r.get("pid") == daemon.pid]
        check(alive(daemon.pid) and daemon.pid not in signalled and any(
            "own daemon" in r.get("reason", "") for r in daemon_rows),
            f"the daemon {daemon.pid} spared: {daemon_rows[0]['reason'] if daemon_rows else 'not in a preview'}")

        rc, ev, took = cleanup(out, "with-others", pidfile, "graceful,process,others,device")
        summary = ev[-1] if ev else {}
        signalled = {e["pid"] for e in ev if e.get("type") == "signal" and e.get("outcome") == "sent"}
        check(rc == 0 and summary.get("clean") is True, f"with others: exit {rc}, clean {summary.get('clean')}, "
              f"last consent -> clean {summary.get('consent_to_clean_s')} s, last signal -> clean "
              f"{summary.get('signal_to_clean_s')} s ({took:.1f} s)")
        check(not alive(other.pid) and other.pid in signalled, f"the other holder {other.pid} was freed")
        check(alive(daemon.pid) and daemon.pid not in signalled,
              f"the daemon {daemon.pid} still alive, never signalled")
        beat = (work / "monitor.beat").read_text()
        wait_for(lambda: (work / "monitor.beat").read_text() != beat, 10, "the monitor's next beat")
        check(alive(monitor.pid), f"the NVML monitor {monitor.pid} alive and sampling")
    finally:
        for fd in fds:
            os.close(fd)
        for p in spawned:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for f in ("worker.ready", "other.ready"):
            try:
                os.kill(int((work / f).read_text()), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        for p in spawned:
            p.wait()
        (out / "safety.txt").write_text("\n".join(lines) + "\n")
    return 0 if ok else 1


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


if __name__ == "__main__":
    sys.exit(main())
