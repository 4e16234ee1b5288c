"""The agent's server: one request a line on stdin, each answered on a thread (agent/__init__.py has the
protocol); the hello first; at the end of stdin its workers and commands are ended."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from ..daemons import host_daemon
from ..fate import dropped, fate_now
from ..gpu import NoDriver
from ..procfs import (
    PROC_MAX_BYTES,
    ancestry,
    parse_cgroup,
    parse_cmdline,
    read_bounded,
    read_exe,
    read_stat,
    start_time_of,
    user_name,
)
from ..proctable import process_table
from ..sampler import SampleStream
from ..signals import guarded_signal, killpg
from ..simdriver import SimSource
from ..sources import SOURCE_FIELDS, open_source, source_config, source_info
from ..topology import collect_topology
from ..wire import PROTOCOL, emit, err, log, set_token
from .pool import Lane, Pool
from .requests import READ_FILE_MAX_BYTES, NotRegularFile, RequestError, argv_of, env_with, read_regular_file
from .workers import HostWorker

TYPE_CHECKING = False  # typing is not imported at run time
if TYPE_CHECKING:
    from typing import Any


class Agent:
    IN_ORDER = ("probe", "sample", "sample_stop")
    """Requests answered one after another in the order they came, on a thread of their own; every other
    request runs on the pool as it comes (so none waits behind another)."""

    def __init__(self, args: Any) -> None:
        self.args = args
        self.pid = os.getpid()
        self.stream: SampleStream | None = None
        self.sources: dict[tuple[Any, ...], Any] = {}
        self.workers: dict[int, HostWorker] = {}
        self.running: dict[int, Any] = {}  # run requests' processes, killed if the caller goes away
        self.lock = threading.Lock()
        self.pool = Pool()
        self.telemetry = Lane("telemetry")

    def hello(self) -> dict[str, Any]:
        import socket

        st = read_stat(self.pid)
        v = sys.version_info
        return {"t": time.time(), "type": "hello", "agent_pid": self.pid,
                "start_time": st.start_time if st else None, "protocol": PROTOCOL,
                "python": f"{v[0]}.{v[1]}.{v[2]}", "executable": sys.executable,
                "host": socket.gethostname(), "user": user_name(os.getuid()), "uid": os.getuid(),
                "ancestors": [[a.pid, a.start_time, a.ppid, a.comm] for a in ancestry(self.pid)]}

    # -- dispatch --

    def handle(self, line: bytes) -> None:
        try:
            req = json.loads(line.decode("utf-8", "replace"))
        except ValueError:
            log("warning", f"bad request line (not JSON): {line[:80]!r}")
            return
        if not isinstance(req, dict):
            log("warning", f"bad request line (not an object): {line[:80]!r}")
            return
        op = req.get("op")
        fn = getattr(self, f"op_{op}", None) if isinstance(op, str) and op.isidentifier() else None
        if fn is None:
            self.reply(req.get("id"), None, f"unknown op {op!r}", "bad_request")
        elif op in self.IN_ORDER:
            self.telemetry.submit(self.answer, fn, req)
        else:
            self.pool.submit(self.answer, fn, req)

    def answer(self, fn: Any, req: dict[str, Any]) -> None:
        try:
            result = fn(req)
        except RequestError as exc:
            self.reply(req.get("id"), None, str(exc), exc.kind)
        except (KeyError, TypeError, ValueError) as exc:
            self.reply(req.get("id"), None, f"bad request: {err(exc)}", "bad_request")
        except Exception as exc:
            self.reply(req.get("id"), None, err(exc), "error")
        else:
            self.reply(req.get("id"), result)

    def reply(self, rid: Any, result: Any, error: str | None = None, kind: str = "error") -> None:
        msg: dict[str, Any] = {"t": time.time(), "type": "reply", "id": rid, "ok": error is None}
        if error is None:
            msg["result"] = result
        else:
            msg["error"], msg["kind"] = " ".join(error.split()), kind
        try:
            emit(msg)
        except (BrokenPipeError, ValueError):
            pass

    # -- telemetry --

    def _source(self, req: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        cfg = source_config(req)
        key = tuple(cfg[k] for k in SOURCE_FIELDS)
        source = self.sources.get(key)
        if source is None or isinstance(source, SimSource):  # a sim driver is re-read from its files
            try:
                source = open_source(cfg)
            except NoDriver as exc:
                raise RequestError(str(exc), "nodriver") from None
            self.sources[key] = source
        return source, cfg

    def op_ping(self, req: dict[str, Any]) -> dict[str, Any]:
        return {"agent_pid": self.pid}

    def op_topology(self, req: dict[str, Any]) -> dict[str, Any]:
        """The interconnect (``collect_topology``): NVML, else nvidia-smi -q -x, else modelled (sim_dir)."""
        return collect_topology(sim_dir=req.get("sim_dir") or None,
                                nvidia_smi=str(req.get("nvidia_smi") or "nvidia-smi"))

    def op_probe(self, req: dict[str, Any]) -> dict[str, Any]:
        return source_info(self._source(req)[0])

    def op_sample(self, req: dict[str, Any]) -> dict[str, Any]:
        self.op_sample_stop(req)
        source, cfg = self._source(req)
        asked = float(req.get("interval") or 0.5)
        if asked < 0.1:
            log("warning", f"interval {asked:.3f}s below the 0.1s minimum: using 0.1s")
        interval = max(0.1, asked)
        scan = float(req.get("scan_interval") or 2.0)
        self.stream = SampleStream(source, cfg, interval, scan, int(req.get("count") or 0))
        info = source_info(source)
        self.stream.start()
        return info

    def op_sample_stop(self, req: dict[str, Any]) -> dict[str, Any]:
        stream, self.stream = self.stream, None
        if stream is None:
            return {"stopped": False}
        stream.stop.set()
        stream.join(10.0)
        return {"stopped": True}

    # -- processes --

    def op_scan(self, req: dict[str, Any]) -> dict[str, Any]:
        return process_table()

    def op_stat(self, req: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for pid in req["pids"]:
            st = read_stat(int(pid))
            if st is not None:
                out[str(int(pid))] = [st.start_time, st.state]
        return {"procs": out}

    def refusal(self, pid: int) -> str | None:
        """Why the agent will not signal this pid, whatever the caller says."""
        if pid < 1:
            return "not a process id"
        if pid == 1:
            return "PID 1 (init)"
        if pid == self.pid:
            return "the agent itself"
        if pid in {a.pid for a in ancestry(self.pid)}:
            return "an ancestor of the agent (its session: the shell, sshd or kimitui)"
        st = read_stat(pid)
        if pid == 2 or (st is not None and st.ppid == 2):
            return "kernel thread"
        return None

    def op_signal(self, req: dict[str, Any]) -> dict[str, Any]:
        """Signal (pid, start time) if it still is that process, is no host daemon now, and takes with it
        nothing but the ``companions`` ([pid, start time] pairs) the operator consented to (fate.py)."""
        pid, start, sig = int(req["pid"]), int(req["start_time"]), int(req["sig"])
        why = self.refusal(pid)
        if why is not None:
            return {"outcome": "refused", "detail": why}
        allowed = {(int(c[0]), int(c[1])) for c in req.get("companions") or []}
        note: list[str] = []
        outcome, detail = guarded_signal(pid, start, sig, check=lambda st: last_look(pid, st, sig, allowed, note))
        if outcome == "sent" and note:
            detail = note[0]
        return {"outcome": outcome, "detail": detail}

    def op_read_file(self, req: dict[str, Any]) -> dict[str, Any]:
        import base64

        path, limit = str(req["path"]), int(req.get("max_bytes") or READ_FILE_MAX_BYTES)
        try:
            data = read_regular_file(path, limit + 1)
        except NotRegularFile as exc:
            raise RequestError(f"{path}: not a regular file: {exc}", "not_regular") from None
        except FileNotFoundError:
            raise RequestError(f"no such file: {path}", "not_found") from None
        except PermissionError:
            raise RequestError(f"permission denied: {path}", "permission") from None
        except OSError as exc:
            raise RequestError(f"cannot read {path}: {exc.strerror or exc}", "error") from None
        if len(data) > limit:
            raise RequestError(f"{path} is larger than {limit} bytes", "too_large")
        return {"data": base64.b64encode(data).decode("ascii"), "size": len(data)}

    def op_model_config(self, req: dict[str, Any]) -> dict[str, Any]:
        import base64

        from ..model_config import find_model_config

        names = [str(n) for n in req["names"]][:8]
        pids = [int(p) for p in req.get("pids") or ()][:64]
        res = find_model_config(names, pids)
        if res["found"] is not None:
            res["found"]["data"] = base64.b64encode(res["found"]["data"]).decode("ascii")
        return res

    # -- commands --

    def _popen(self, argv: list[str], **kw: Any) -> Any:
        import subprocess

        try:
            return subprocess.Popen(argv, start_new_session=True, **kw)
        except FileNotFoundError:
            raise RequestError(f"command not found: {argv[0]}", "not_found") from None
        except PermissionError:
            raise RequestError(f"permission denied: {argv[0]}", "permission") from None
        except OSError as exc:
            raise RequestError(f"cannot start {argv[0]}: {exc.strerror or exc}", "error") from None

    def op_run(self, req: dict[str, Any]) -> dict[str, Any]:
        import base64
        import subprocess

        argv, timeout = argv_of(req), float(req.get("timeout") or 30.0)
        stdin = base64.b64decode(req["stdin"]) if req.get("stdin") is not None else None
        proc = self._popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_with(req.get("env")),
                           cwd=req.get("cwd") or None)
        with self.lock:
            self.running[proc.pid] = proc
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            killpg(proc.pid, signal.SIGKILL)  # not reaped yet: the group id is still the command's
            proc.communicate()
            raise RequestError(f"{argv[0]} timed out after {timeout:.1f}s", "timeout") from None
        finally:
            with self.lock:
                self.running.pop(proc.pid, None)
        return {"rc": proc.returncode, "stdout": out.decode("utf-8", "replace"),
                "stderr": err.decode("utf-8", "replace")}

    def op_spawn(self, req: dict[str, Any]) -> dict[str, Any]:
        import subprocess

        argv, log_path = argv_of(req), str(req.get("log") or os.devnull)
        try:
            out = open(log_path, "ab")  # noqa: SIM115 (closed below, once the child has its copy)
        except OSError as exc:
            raise RequestError(f"cannot open log {log_path}: {exc.strerror or exc}", "error") from None
        with out:
            proc = self._popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env_with(req.get("env")),
                               cwd=req.get("cwd") or None)
        start = start_time_of(proc.pid)
        threading.Thread(target=proc.wait, daemon=True).start()  # reaped when it exits, never signalled
        return {"pid": proc.pid, "start_time": start}

    def op_http_get(self, req: dict[str, Any]) -> dict[str, Any]:
        import urllib.error
        import urllib.request

        url, timeout = str(req["url"]), float(req.get("timeout") or 2.0)
        if not url.startswith(("http://", "https://")):
            raise RequestError(f"not an http(s) URL: {url}", "bad_request")
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                return {"status": r.status, "error": None}
        except urllib.error.HTTPError as exc:
            return {"status": exc.code, "error": None}
        except Exception as exc:
            return {"status": None, "error": err(exc)}

    # -- workers --

    def op_worker_start(self, req: dict[str, Any]) -> dict[str, Any]:
        import subprocess
        import tempfile

        wid, source = int(req["id"]), req["source"]
        args = [str(a) for a in req.get("args") or []]
        python = str(req.get("python") or sys.executable)
        if not isinstance(source, str):
            raise RequestError("source must be a string", "bad_request")
        if wid in self.workers:
            raise RequestError(f"worker {wid} exists", "bad_request")
        workdir = tempfile.mkdtemp(prefix="kimitui-worker-")
        path = os.path.join(workdir, "worker.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(source)
        env = env_with(req.get("env"))
        env["PYTHONUNBUFFERED"] = "1"
        try:
            proc = self._popen([python, "-u", path, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env, cwd=req.get("cwd") or None)
        except RequestError as exc:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
            if exc.kind == "not_found":
                raise RequestError(f"worker python not found: {python}", "not_found") from None
            raise
        worker = HostWorker(wid, proc, workdir)
        self.workers[wid] = worker
        worker.start()
        return {"worker": wid, "pid": proc.pid, "python": python}

    def op_worker_cancel(self, req: dict[str, Any]) -> dict[str, Any]:
        worker = self.workers.get(int(req["worker"]))
        if worker is None:
            raise RequestError(f"no worker {req['worker']}", "not_found")
        return {"signalled": worker.cancel(float(req.get("grace") if req.get("grace") is not None else 5.0))}

    # -- the end --

    def shutdown(self, grace: float = 3.0) -> None:
        """The caller is gone: stop sampling, end every worker and running command (SIGTERM, then SIGKILL)."""
        if self.stream is not None:
            self.stream.stop.set()
        live = [w for w in self.workers.values() if not w.exited.is_set()]
        for w in live:
            w.cancel(grace)
        with self.lock:
            running = list(self.running.values())
        for proc in running:
            if proc.poll() is None:
                killpg(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + grace + 2.0
        for w in live:
            w.exited.wait(max(0.0, deadline - time.monotonic()))
        # requests read before the end are answered (a signal sent is sent), unless one is stuck
        self.pool.wait_idle(max(0.5, deadline - time.monotonic()))


ENDS_NOTHING = frozenset({0, signal.SIGCONT, signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU,
                          signal.SIGCHLD, signal.SIGURG, signal.SIGWINCH})
"""Signals whose default action does not end a process: what dies with it is no question for them."""


def last_look(pid: int, st: Any, sig: int, allowed: set[tuple[int, int]], note: list[str]) -> tuple[str, str] | None:
    """Right before the signal, after the identity check: refused when the process is a host daemon now (it
    may have exec'd into one since the preview, same pid and start time) or would take with it a process not
    in ``allowed``; a signal the kernel will drop is noted (said with 'sent')."""
    exe = read_exe(pid, "/proc", st)
    try:
        unit = parse_cgroup(read_bounded(f"/proc/{pid}/cgroup", PROC_MAX_BYTES))[0]
    except OSError:
        unit = None
    daemon = host_daemon(exe, unit)
    if daemon is not None:
        return "refused", f"{daemon}, seen right before the signal"
    drop = dropped(pid, sig)
    if drop is not None:
        note.append(drop)
        return None
    if sig in ENDS_NOTHING:
        return None
    missing = [c for c in fate_now(pid) if not c.ignores and (c.pid, c.start) not in allowed]
    if missing:
        c = missing[0]
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        return "refused", (f"would take pid {c.pid} ({_gist(c.pid)}) with it ({c.why} when pid {c.via} ends){more}, "
                           "not consented: tick it in the preview, or stop it first")
    return None


def _gist(pid: int) -> str:
    try:
        text = parse_cmdline(read_bounded(f"/proc/{pid}/cmdline", 512))
    except OSError:
        text = ""
    return (text or "?")[:60]


def parse_args(argv: list[str]) -> Any:
    import argparse

    ap = argparse.ArgumentParser(prog="kimitui-agent", description="Answers requests on stdin (see the module "
                                 "docstring); --sample starts a sample stream at once.")
    ap.add_argument("--sample", action="store_true", help="stream samples from the start")
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--scan-interval", type=float, default=2.0, help="seconds between full fd/maps scans")
    ap.add_argument("--count", type=int, default=0, help="stop after N samples (0: until stdin closes)")
    ap.add_argument("--sim-dir", default=None)
    ap.add_argument("--dev-prefix", default=None)
    ap.add_argument("--proc-root", default="/proc")
    ap.add_argument("--nvidia-smi", default="nvidia-smi")
    ap.add_argument("--no-nvml", action="store_true")
    return ap.parse_args(argv)


def read_requests(agent: Agent) -> None:
    """Until stdin closes: one request a line."""
    buf = b""
    while True:
        try:
            data = os.read(0, 65536)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:
            return
        buf += data
        while b"\n" in buf:
            line, _, buf = buf.partition(b"\n")
            if line.strip():
                agent.handle(line)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # the token came on the agent's stdin: the launch bootstrap put it in __main__ (kimitui/hosts/launch.py)
    set_token(str(getattr(sys.modules.get("__main__"), "_KIMITUI_TOKEN", "") or ""))
    agent = Agent(args)
    emit(agent.hello())
    if args.sample:
        req = {"id": 0, "op": "sample", "interval": args.interval, "scan_interval": args.scan_interval,
               "count": args.count, "sim_dir": args.sim_dir, "dev_prefix": args.dev_prefix,
               "proc_root": args.proc_root, "nvidia_smi": args.nvidia_smi, "no_nvml": args.no_nvml}
        agent.answer(agent.op_sample, req)
    if args.count and agent.stream is not None:
        agent.stream.join()  # --count N runs its N samples whatever stdin does
        return 0
    try:
        read_requests(agent)
    finally:
        agent.shutdown()
    return 0

