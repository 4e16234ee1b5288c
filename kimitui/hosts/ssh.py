"""A GPU host reached over SSH (asyncssh): one connection per host, one channel per command.

- The connection is opened lazily by the first call and shared by all; it honours ~/.ssh/config (or the
  ``config_paths`` given: User, Port, HostName, IdentityFile, ProxyJump, ...) and the SSH agent
  (SSH_AUTH_SOCK), as asyncssh does by default.
- Host keys are checked against known_hosts (the path given, else the config's UserKnownHostsFile, else
  ~/.ssh/known_hosts; "UserKnownHostsFile none" does not turn checking off). An unknown key is refused with
  its SHA256 fingerprint unless ``accept_new_host_key``, which accepts it and appends it to the first of
  those files. A key that differs from a known one is always refused.
- Commands are argument lists joined with shlex.join; the remote login shell must be POSIX-like. Each
  command runs as ``exec sh -c 'WRAPPER' sh ARGV...``: the wrapper prints the command's pid and start
  time on stderr (one marker line, removed from what callers see) and execs it, so a timed-out run() or
  a closed stream() whose command outlives its stdin can be killed with its process group. (sshd refuses
  SSH "signal" requests for root logins, so the protocol's own signal cannot be relied on.)
- Keepalives every ``keepalive_interval`` seconds; a peer that stops answering is declared lost after
  about two intervals. A lost connection makes the streams on it raise HostError("connection to HOST
  lost: ..."); the next call reconnects, waiting 0.5, 1, 2, 5, 5... s between failed attempts.
- ``on_state(callback)`` reports (state, detail) for "connecting", "reconnecting", "connected", "lost"
  and "failed"; see ``ConnState``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal as signal_mod
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import asyncssh

from kimitui.hosts.base import CommandResult, Host, HostError, ProcId, SignalResult
from kimitui.hosts.signal_guard import SIGNAL_SNIPPET, parse_signal_reply
from kimitui.hosts.ssh_target import SshTarget, parse_target

__all__ = ["BACKOFF", "ConnState", "SessionProcess", "SshHost", "SshTarget", "parse_target"]

ConnState = Literal["connecting", "reconnecting", "connected", "lost", "failed"]
"""connecting: a first attempt starts; reconnecting: an attempt after a loss or a failed attempt;
connected: the connection is up; lost: an open connection dropped; failed: gave up (or host key refused)."""

StateCallback = Callable[[ConnState, str], None]
Sleep = Callable[[float], Awaitable[None]]

BACKOFF: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0)
"""Seconds to wait before the 1st, 2nd, 3rd, ... retry after failed attempts (the last one repeats)."""

_MARK = b"kimitui-pid "
# Prints "kimitui-pid PID START" on stderr, then becomes the command (same pid, session leader: sshd
# runs each command in a session of its own, so the pid is also the process group).
_WRAPPER = ('m() { shift 21; printf "kimitui-pid %s %s\\n" "$$" "$1" >&2; }; '
            'read -r st < /proc/$$/stat; m $st; exec "$@"')
# (builtins only: field 22 of /proc/$$/stat is the start time; the comm is "sh" here, without spaces.)
# Kills the process group PID only if PID still has the start time it had at launch.
_KILL_GROUP = ('[ "$(cut -d" " -f22 /proc/$1/stat 2>/dev/null)" = "$2" ] && kill -s KILL -- "-$1" '
               '2>/dev/null; exit 0')

SESSION_SNIPPET = r"""
import os
pid = os.getppid()
while pid > 1:
    try:
        with open("/proc/%d/stat" % pid) as f:
            text = f.read()
    except OSError:
        break
    head, _, rest = text.rpartition(")")
    fields = rest.split()
    print(pid, fields[19], fields[1], head.partition(" (")[2])
    pid = int(fields[1])
"""
"""Run by the host's python3 over this connection: prints "PID START PPID COMM" for each ancestor of
itself up to (not including) PID 1: the sshd process(es) serving this connection and the listening sshd.
(The login shell and the wrapper exec into python3, so they are the snippet's own pid, not listed.)"""


@dataclass(frozen=True, slots=True)
class SessionProcess:
    pid: int
    start_time: int
    ppid: int
    comm: str

    @property
    def proc_id(self) -> ProcId:
        return ProcId(self.pid, self.start_time)


class _HostKeyCheck:
    """asyncssh asks this about a key that is not in the trusted set; it tells unknown from changed."""

    def __init__(self, known: asyncssh.SSHKnownHosts, accept_new: bool) -> None:
        self.known = known
        self.accept_new = accept_new
        self.verdict: Literal["unknown", "changed", "accepted"] | None = None
        self.key: asyncssh.SSHKey | None = None
        self.host = ""
        self.port = 22

    def __call__(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        self.key, self.host, self.port = key, host, port
        trusted = asyncssh.match_known_hosts(self.known, host, addr, port if port != 22 else None)[0]
        if trusted:
            self.verdict = "changed"
            return False
        self.verdict = "accepted" if self.accept_new else "unknown"
        return self.accept_new

    def known_hosts_line(self) -> str:
        assert self.key is not None
        pattern = self.host if self.port == 22 else f"[{self.host}]:{self.port}"
        algo, blob = self.key.export_public_key("openssh").decode().split()[:2]
        return f"{pattern} {algo} {blob}\n"


class _Client(asyncssh.SSHClient):
    def __init__(self, check: _HostKeyCheck, on_lost: Callable[[_Client, Exception | None], None]) -> None:
        self.check = check
        self.on_lost = on_lost

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        return self.check(host, addr, port, key)

    def connection_lost(self, exc: Exception | None) -> None:
        self.on_lost(self, exc)


class _NoRetry(Exception):
    """A connection error that another attempt cannot fix (host key, authentication, config)."""


@dataclass
class _Launched:
    """One command on one channel, with its launch marker read from stderr."""

    proc: asyncssh.SSHClientProcess[bytes]
    conn: asyncssh.SSHClientConnection
    marker: asyncio.Future[tuple[int, int] | None]
    stderr: bytearray
    stderr_task: asyncio.Task[None]


class SshHost(Host):
    def __init__(self, target: str, *, known_hosts: str | None = None, accept_new_host_key: bool = False,
                 config_paths: list[str] | None = None, connect_timeout: float = 10,
                 keepalive_interval: float = 5, username: str | None = None,
                 client_keys: list[str] | None = None, attempts_per_call: int = 3,
                 close_grace: float = 2.0, max_channels: int = 8, sleep: Sleep | None = None,
                 name: str | None = None, python: str = "python3") -> None:
        self.target = parse_target(target)
        self.name = name or str(self.target)
        self.known_hosts = known_hosts
        self.accept_new_host_key = accept_new_host_key
        self.config_paths = config_paths
        self.connect_timeout = connect_timeout
        self.keepalive_interval = keepalive_interval
        self.username = username or self.target.user
        self.client_keys = client_keys
        self.attempts_per_call = max(1, attempts_per_call)
        self.close_grace = close_grace
        self.python = python
        """The host's python, for signal() and session_pids() (the agent layer may use it too)."""
        self._sleep: Sleep = sleep or asyncio.sleep
        self._conn: asyncssh.SSHClientConnection | None = None
        self._client: _Client | None = None
        self._lock = asyncio.Lock()
        self._channels = asyncio.Semaphore(max_channels)  # sshd's MaxSessions is 10 by default
        self._callbacks: list[StateCallback] = []
        self._ever_connected = False
        self._lost_reason = ""
        self._failures = 0
        self._closing = False
        self._session: list[SessionProcess] | None = None
        self.state: ConnState | None = None
        self.backoff_log: list[float] = []
        """Every wait between failed connection attempts, in seconds (for tests and the log)."""
        self.connects = 0
        """Successful connections so far (1 plus the reconnects)."""

    # -- connection state -------------------------------------------------------------------------

    def on_state(self, callback: StateCallback) -> Callable[[], None]:
        """Call ``callback(state, detail)`` on every connection-state change; returns an unsubscriber."""
        self._callbacks.append(callback)
        return lambda: self._callbacks.remove(callback) if callback in self._callbacks else None

    def _emit(self, state: ConnState, detail: str) -> None:
        self.state = state
        for cb in list(self._callbacks):
            cb(state, detail)

    @property
    def connected(self) -> bool:
        return self._conn is not None

    def _on_lost(self, client: _Client, exc: Exception | None) -> None:
        if client is not self._client:
            return
        self._conn = None
        self._client = None
        self._session = None
        if self._closing:
            return
        self._lost_reason = _one_line(exc) if exc else "closed by the server"
        self._emit("lost", self._lost_reason)

    def _known_hosts_paths(self, options: asyncssh.SSHClientConnectionOptions) -> list[Path]:
        if self.known_hosts:
            return [Path(self.known_hosts).expanduser()]
        from_config = [Path(p).expanduser() for p in (options.known_hosts or []) if isinstance(p, str)]
        return from_config or [Path("~/.ssh/known_hosts").expanduser()]

    async def _open(self) -> tuple[asyncssh.SSHClientConnection, _Client]:
        t = self.target
        config: list[str] | tuple[()] = list(self.config_paths) if self.config_paths is not None else ()
        kwargs: dict[str, object] = {}
        if self.username:
            kwargs["username"] = self.username
        if self.client_keys is not None:
            kwargs["client_keys"] = list(self.client_keys)
        try:
            options = await asyncio.to_thread(
                asyncssh.SSHClientConnectionOptions, config=config, host=t.host,
                port=t.port if t.port is not None else (), **kwargs)  # type: ignore[arg-type]
        except (ValueError, OSError, asyncssh.Error) as exc:
            raise _NoRetry(f"bad SSH settings for {self.name}: {_one_line(exc)}") from exc
        paths = self._known_hosts_paths(options)
        text = ""
        for p in paths:
            with contextlib.suppress(FileNotFoundError):
                text += p.read_text(errors="replace") + "\n"
        check = _HostKeyCheck(asyncssh.import_known_hosts(text), self.accept_new_host_key)
        holder: list[_Client] = []

        def factory() -> _Client:
            holder.append(_Client(check, self._on_lost))
            return holder[-1]

        try:
            conn = await asyncssh.connect(
                t.host, t.port if t.port is not None else (), options=options, config=config,
                known_hosts=check.known,
                client_factory=factory, connect_timeout=self.connect_timeout,
                keepalive_interval=self.keepalive_interval, keepalive_count_max=1)
        except asyncssh.HostKeyNotVerifiable as exc:
            raise _NoRetry(self._host_key_message(check, exc, paths[0])) from None
        except asyncssh.PermissionDenied as exc:
            raise _NoRetry(f"{self.name}: authentication refused ({_one_line(exc)}); check the key, the "
                           "SSH agent and the user name") from None
        if check.verdict == "accepted":
            self._append_known_host(paths[0], check.known_hosts_line())
        return conn, holder[-1]

    def _host_key_message(self, check: _HostKeyCheck, exc: Exception, path: Path) -> str:
        if check.key is None:
            return f"{self.name}: host key not accepted: {_one_line(exc)}"
        fp = check.key.get_fingerprint("sha256")
        where = f"[{check.host}]:{check.port}" if check.port != 22 else check.host
        if check.verdict == "changed":
            return (f"{self.name}: HOST KEY CHANGED for {where}: the server now offers {fp}, which does not "
                    f"match {path}; refusing to connect (possible man-in-the-middle). If the change is "
                    "expected, remove the old entry yourself")
        return (f"{self.name}: unknown host key for {where}: {check.key.get_algorithm()} {fp} is not in "
                f"{path}; check it and re-run with --accept-new-host-key to trust it")

    @staticmethod
    def _append_known_host(path: Path, line: str) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a") as fh:
            fh.write(line)

    async def _connection(self) -> asyncssh.SSHClientConnection:
        if self._conn is not None:
            return self._conn
        async with self._lock:
            if self._conn is not None:
                return self._conn
            if self._closing:
                raise HostError(f"{self.name}: host is closed")
            last = ""
            for attempt in range(1, self.attempts_per_call + 1):
                if self._failures:
                    delay = BACKOFF[min(self._failures - 1, len(BACKOFF) - 1)]
                    self.backoff_log.append(delay)
                    await self._sleep(delay)
                if self._ever_connected or self._failures:
                    why = self._lost_reason if not self._failures else last
                    self._emit("reconnecting", f"attempt {attempt}: {why}" if why else f"attempt {attempt}")
                else:
                    self._emit("connecting", f"attempt {attempt}")
                started = time.monotonic()
                try:
                    conn, client = await self._open()
                except _NoRetry as exc:
                    self._emit("failed", str(exc))
                    raise HostError(str(exc)) from None
                except (TimeoutError, OSError, asyncssh.Error) as exc:
                    self._failures += 1
                    last = _one_line(exc) or type(exc).__name__
                    continue
                self._conn, self._client = conn, client
                self._failures = 0
                self._ever_connected = True
                self._lost_reason = ""
                self.connects += 1
                self._emit("connected", f"{self.name} in {time.monotonic() - started:.2f}s")
                return conn
            msg = f"cannot connect to {self.name}: {last}"
            self._emit("failed", msg)
            raise HostError(msg)

    def _lost_error(self, exc: BaseException | None = None) -> HostError:
        reason = self._lost_reason or (_one_line(exc) if exc else "connection closed")
        return HostError(f"connection to {self.name} lost: {reason}")

    # -- commands ---------------------------------------------------------------------------------

    @staticmethod
    def command_line(argv: list[str]) -> str:
        """The remote command line for ARGV: every argument quoted, run through the pid wrapper."""
        if not argv:
            raise ValueError("empty command")
        return shlex.join(["exec", "sh", "-c", _WRAPPER, "sh", *argv])

    async def _launch(self, argv: list[str]) -> _Launched:
        conn = await self._connection()
        try:
            proc = await conn.create_process(self.command_line(argv), encoding=None)
        except (asyncssh.Error, OSError) as exc:
            if self._conn is not conn:
                raise self._lost_error(exc) from None
            raise HostError(f"{self.name}: cannot start {argv[0]}: {_one_line(exc)}") from None
        marker: asyncio.Future[tuple[int, int] | None] = asyncio.get_running_loop().create_future()
        buf = bytearray()

        async def read_stderr() -> None:
            try:
                first = await proc.stderr.readline()
                if first.startswith(_MARK):
                    parts = first[len(_MARK):].split()
                    ok = len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit()
                    marker.set_result((int(parts[0]), int(parts[1])) if ok else None)
                else:
                    marker.set_result(None)
                    buf.extend(first)
                while chunk := await proc.stderr.read(65536):
                    buf.extend(chunk)
                    if len(buf) > 1 << 20:
                        del buf[: len(buf) - (1 << 20)]
            except (asyncssh.Error, OSError, asyncio.IncompleteReadError):
                pass
            finally:
                if not marker.done():
                    marker.set_result(None)

        task = asyncio.create_task(read_stderr())
        return _Launched(proc, conn, marker, buf, task)

    async def _kill(self, job: _Launched) -> None:
        """Kill the command's process group (checked by start time), then close its channel."""
        if job.proc.exit_status is None and job.proc.exit_signal is None and self._conn is job.conn:
            mark: tuple[int, int] | None = None
            with contextlib.suppress(TimeoutError):  # the wrapper prints it as it starts
                mark = await asyncio.wait_for(asyncio.shield(job.marker), 5.0)
            if mark is not None and self._conn is job.conn:
                with contextlib.suppress(asyncssh.Error, OSError, TimeoutError):
                    await asyncio.wait_for(job.conn.run(shlex.join(
                        ["exec", "sh", "-c", _KILL_GROUP, "sh", str(mark[0]), str(mark[1])]),
                        check=False), self.close_grace + 3)
        job.proc.close()
        with contextlib.suppress(asyncssh.Error, OSError, TimeoutError):
            await asyncio.wait_for(job.proc.wait_closed(), 2.0)
        job.stderr_task.cancel()

    def _exit_code(self, job: _Launched, argv: list[str]) -> int:
        proc = job.proc
        if proc.exit_status is not None and proc.exit_status >= 0:
            rc = proc.exit_status
        elif proc.exit_signal is not None:
            name = proc.exit_signal[0]
            try:
                rc = -signal_mod.Signals["SIG" + name].value
            except KeyError:
                rc = -1
        elif self._conn is not job.conn:
            raise self._lost_error()
        else:
            rc = -1
        if rc == 127 and b"not found" in job.stderr:
            raise HostError(f"{self.name}: command not found: {argv[0]}")
        return rc

    async def run(self, argv: list[str], *, timeout: float | None = 30.0,
                  stdin: bytes | None = None) -> CommandResult:
        rc, out, err = await self._run_bytes(argv, timeout, stdin)
        return CommandResult(rc, out.decode(errors="replace"), err.decode(errors="replace"))

    async def stream(self, argv: list[str], *, stdin: bytes | None = None) -> AsyncIterator[str]:
        async with self._channels:
            job = await self._launch(argv)
            try:
                try:
                    if stdin:
                        job.proc.stdin.write(stdin)
                        await job.proc.stdin.drain()
                    while True:
                        line = await job.proc.stdout.readline()
                        if not line:
                            break
                        yield line.decode(errors="replace").rstrip("\n")
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(job.proc.wait_closed(), self.close_grace)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(job.stderr_task, 1.0)
                except (asyncssh.Error, OSError) as exc:
                    if self._conn is not job.conn:
                        raise self._lost_error(exc) from None
                    raise HostError(f"{self.name}: {argv[0]} failed: {_one_line(exc)}") from None
                if self._conn is not job.conn and job.proc.exit_status is None \
                        and job.proc.exit_signal is None:
                    raise self._lost_error()
                self._exit_code(job, argv)
            finally:
                await self._end_stream(job)

    async def _end_stream(self, job: _Launched) -> None:
        """EOF on stdin, a grace period for the command to exit, then its process group is killed."""
        if job.proc.exit_status is None and job.proc.exit_signal is None and self._conn is job.conn:
            with contextlib.suppress(asyncssh.Error, OSError, BrokenPipeError):
                job.proc.stdin.write_eof()
            try:
                await asyncio.wait_for(job.proc.wait_closed(), self.close_grace)
            except (TimeoutError, asyncssh.Error, OSError):
                pass
        await self._kill(job)

    async def read_file(self, path: str) -> bytes:
        res = await self._run_bytes(["sh", "-c", '[ -e "$1" ] || exit 44; exec cat -- "$1"', "sh", path])
        if res[0] == 44:
            raise FileNotFoundError(2, "No such file or directory", path)
        if res[0] != 0:
            err = res[2].decode(errors="replace").strip()
            if "ermission denied" in err:
                raise PermissionError(13, "Permission denied", path)
            raise HostError(f"{self.name}: cannot read {path}: {_one_line(err) or f'rc {res[0]}'}")
        return res[1]

    async def _run_bytes(self, argv: list[str], timeout: float | None = 30.0,
                         stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
        async with self._channels:
            job = await self._launch(argv)
            try:
                async def communicate() -> bytes:
                    if stdin:
                        job.proc.stdin.write(stdin)
                        await job.proc.stdin.drain()
                    job.proc.stdin.write_eof()
                    out = await job.proc.stdout.read()
                    await job.proc.wait_closed()
                    await job.stderr_task
                    return out

                out = await asyncio.wait_for(communicate(), timeout)
            except TimeoutError:
                await self._kill(job)
                raise HostError(f"{self.name}: {argv[0]} timed out after {timeout:.1f}s") from None
            except (asyncssh.Error, OSError) as exc:
                await self._kill(job)
                if self._conn is not job.conn:
                    raise self._lost_error(exc) from None
                raise HostError(f"{self.name}: {argv[0]} failed: {_one_line(exc)}") from None
            except BaseException:
                await self._kill(job)
                raise
            return self._exit_code(job, argv), out, bytes(job.stderr)

    async def signal(self, proc: ProcId, sig: int) -> SignalResult:
        try:
            res = await self.run([self.python, "-c", SIGNAL_SNIPPET, str(proc.pid), str(proc.start_time),
                                  str(int(sig))], timeout=15.0)
        except HostError as exc:
            if "command not found" in str(exc):
                raise HostError(f"{self.name}: no python3 on host ({self.python} not found; "
                                "needed to signal safely)") from None
            raise
        if res.rc != 0:
            return SignalResult("error", _one_line(res.stderr) or f"rc {res.rc}")
        word, detail = parse_signal_reply(res.stdout)
        return SignalResult(word, detail)  # type: ignore[arg-type]

    async def session_pids(self) -> list[SessionProcess]:
        """The remote processes that carry this SSH connection: the per-connection sshd process(es) and
        the listening sshd, nearest first (the ancestors of a command run on it, PID 1 excluded). Cleanup
        must never signal these. Cached per connection; a reconnect gives new ones."""
        conn = await self._connection()
        if self._session is not None and self._conn is conn:
            return list(self._session)
        try:
            res = await self.run([self.python, "-c", SESSION_SNIPPET], timeout=15.0)
        except HostError as exc:
            if "command not found" in str(exc):
                raise HostError(f"{self.name}: no python3 on host ({self.python} not found)") from None
            raise
        out: list[SessionProcess] = []
        for line in res.stdout.splitlines():
            pid, start, ppid, comm = line.split(" ", 3)
            out.append(SessionProcess(int(pid), int(start), int(ppid), comm))
        if self._conn is conn:
            self._session = out
        return list(out)

    async def close(self) -> None:
        self._closing = True
        conn, self._conn, self._client = self._conn, None, None
        if conn is not None:
            conn.close()
            with contextlib.suppress(asyncssh.Error, OSError, TimeoutError):
                await asyncio.wait_for(conn.wait_closed(), 5.0)


def _one_line(exc: object) -> str:
    text = str(exc).strip()
    return " ".join(text.split()) if text else (type(exc).__name__ if isinstance(exc, BaseException) else "")
