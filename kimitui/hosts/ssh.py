"""A GPU host reached over SSH (asyncssh): one connection, one channel, one agent.

- The connection is opened lazily by the first call; it honours ~/.ssh/config (or the ``config_paths``
  given: User, Port, HostName, IdentityFile, ProxyJump, ...) and the SSH agent (SSH_AUTH_SOCK), as
  asyncssh does by default.
- Host keys are checked against known_hosts (the path given, else the config's UserKnownHostsFile, else
  ~/.ssh/known_hosts; "UserKnownHostsFile none" does not turn checking off). An unknown key is refused with
  its SHA256 fingerprint unless ``accept_new_host_key``, which accepts it and appends it to the first of
  those files. A key that differs from a known one is always refused.
- The only command ever run is the agent (``exec PYTHON -u -c BOOTSTRAP``, quoted with shlex.join for the
  remote login shell, which must be POSIX-like): every operation is then a request on that one channel, so
  a slow login shell (a pyenv ~/.bashrc) is paid once per connection, not per operation. ``python`` picks
  the interpreter (``--remote-python``).
- Keepalives every ``keepalive_interval`` seconds; a peer that stops answering is declared lost after
  about two intervals. Retries are the agent link's (kimitui/hosts/link.py): one attempt per call here.
  A refused host key, refused authentication, bad settings or a name that does not resolve is HostFatal:
  said once, never retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import socket
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from kimitui.hosts.base import AncestorProcess, Channel, Host, HostError, HostFatal, Sleep
from kimitui.hosts.ssh_target import SshTarget, parse_target

# cryptography 51 deprecates DSA, and asyncssh (2.24.1) names its DSA types as it is imported: five warnings on
# stderr at every start over SSH, about keys kimitui never makes, and a one-line error would read as six lines.
warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh(\.|$)")
import asyncssh  # noqa: E402

__all__ = ["AncestorProcess", "ConnState", "SshHost", "SshTarget", "parse_target"]

ConnState = Literal["connecting", "reconnecting", "connected", "lost", "failed"]
"""connecting: a first attempt starts; reconnecting: an attempt after a loss or a failed attempt;
connected: the agent is up; lost: the channel dropped; failed: gave up (host key, authentication, DNS,
no python)."""

STDERR_TAIL = 16384


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


FAST_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")
"""Preferred over asyncssh's first default, chacha20-poly1305, unless ~/.ssh/config names Ciphers: AES-GCM
is one AEAD call per packet (AES-NI), chacha20-poly1305 two in asyncssh; measured on loopback, about
0.2 ms less per request round trip. Both are in OpenSSH's default set."""


def _cipher_order(options: asyncssh.SSHClientConnectionOptions) -> dict[str, list[str]]:
    try:
        from asyncssh.encryption import get_default_encryption_algs
    except ImportError:
        return {}
    defaults = [bytes(a) for a in get_default_encryption_algs()]
    if [bytes(a) for a in options.encryption_algs] != defaults:
        return {}  # the config chose: keep its order
    names = [a.decode() for a in defaults]
    return {"encryption_algs": [*(c for c in FAST_CIPHERS if c in names), *(c for c in names if c not in FAST_CIPHERS)]}


class _NoRetry(Exception):
    """A connection error that another attempt cannot fix (host key, authentication, config)."""


class SshChannel:
    """The agent's stdin/stdout on one SSH session channel; its stderr kept (the tail) for errors."""

    def __init__(self, host: SshHost, conn: asyncssh.SSHClientConnection,
                 proc: asyncssh.SSHClientProcess[bytes]) -> None:
        self.host, self.conn, self.proc = host, conn, proc
        self._err = bytearray()
        self._err_task = asyncio.create_task(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        with contextlib.suppress(Exception):
            while chunk := await self.proc.stderr.read(65536):
                self._err.extend(chunk)
                if len(self._err) > 4 * STDERR_TAIL:
                    del self._err[: len(self._err) - STDERR_TAIL]

    def _gone(self) -> bool:
        return self.host._conn is not self.conn

    def write(self, data: bytes) -> None:
        if self._gone() or self.proc.stdin.is_closing():
            raise HostError(self.host._lost_message())
        self.proc.stdin.write(data)

    async def drain(self) -> None:
        try:
            await self.proc.stdin.drain()
        except (asyncssh.Error, OSError) as exc:
            raise HostError(self.host._lost_message(exc)) from None

    async def readline(self) -> bytes:
        try:
            line: bytes = await self.proc.stdout.readline()
        except (asyncssh.Error, OSError) as exc:
            raise HostError(self.host._lost_message(exc)) from None
        if not line and self._gone():
            raise HostError(self.host._lost_message())
        return line

    async def wait_exit(self, timeout: float) -> int | None:
        with contextlib.suppress(TimeoutError, asyncssh.Error, OSError):
            await asyncio.wait_for(self.proc.wait_closed(), timeout)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._err_task), 1.0)
        return self.proc.exit_status

    def stderr_tail(self) -> str:
        return bytes(self._err[-STDERR_TAIL:]).decode(errors="replace")

    def end_reason(self) -> str:
        if self._gone():
            return self.host._lost_message()
        rc = self.proc.exit_status
        last = (self.stderr_tail().strip().splitlines() or [""])[-1]
        what = "agent exited" + (f" (status {rc})" if rc is not None else "")
        return f"{what}: {last}" if last else what

    async def close(self) -> None:
        """EOF to the agent (it ends its workers and exits), a grace, then the channel is closed."""
        if not self._gone():
            with contextlib.suppress(asyncssh.Error, OSError, BrokenPipeError):
                self.proc.stdin.write_eof()
            with contextlib.suppress(TimeoutError, asyncssh.Error, OSError):
                await asyncio.wait_for(self.proc.wait_closed(), self.host.close_grace)
        self.proc.close()
        self._err_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._err_task


class SshHost(Host):
    def __init__(self, target: str, *, known_hosts: str | None = None, accept_new_host_key: bool = False,
                 config_paths: list[str] | None = None, connect_timeout: float = 10,
                 keepalive_interval: float = 5, username: str | None = None,
                 client_keys: list[str] | None = None, close_grace: float = 8.0, sleep: Sleep | None = None,
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
        self.close_grace = close_grace
        """How long the agent may take to end its workers and exit after its channel's EOF."""
        self.python = python
        self._sleep = sleep
        self._conn: asyncssh.SSHClientConnection | None = None
        self._client: _Client | None = None
        self._lock = asyncio.Lock()
        self._lost_reason = ""
        self._closing = False
        self.connect_s: float | None = None
        """How long the last SSH connection took to open."""

    @property
    def connected(self) -> bool:
        return self._conn is not None

    def _on_lost(self, client: _Client, exc: Exception | None) -> None:
        if client is not self._client:
            return
        self._conn = None
        self._client = None
        if not self._closing:
            self._lost_reason = _one_line(exc) if exc else "closed by the server"

    def _lost_message(self, exc: BaseException | None = None) -> str:
        reason = self._lost_reason or (_one_line(exc) if exc else "connection closed")
        return f"connection to {self.name} lost: {reason}"


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
                keepalive_interval=self.keepalive_interval, keepalive_count_max=1, **_cipher_order(options))
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
        """The SSH connection, opened now if there is none: one attempt."""
        if self._conn is not None:
            return self._conn
        async with self._lock:
            if self._conn is not None:
                return self._conn
            if self._closing:
                raise HostError(f"{self.name}: host is closed")
            started = time.monotonic()
            try:
                conn, client = await self._open()
            except _NoRetry as exc:
                raise HostFatal(str(exc)) from None
            except socket.gaierror as exc:
                raise HostFatal(f"{self.name}: cannot resolve {self.target.host} ({_one_line(exc.strerror or exc)}); "
                                "check the name or its ~/.ssh/config entry") from None
            except (TimeoutError, OSError, asyncssh.Error) as exc:
                raise HostError(f"cannot connect to {self.name}: {_one_line(exc) or type(exc).__name__}") from None
            self._conn, self._client = conn, client
            self._lost_reason = ""
            self.connect_s = time.monotonic() - started
            return conn

    async def open_channel(self, argv: list[str]) -> Channel:
        conn = await self._connection()
        try:
            proc = await conn.create_process(shlex.join(["exec", *argv]), encoding=None)
        except (asyncssh.Error, OSError) as exc:
            if self._conn is not conn:
                raise HostError(self._lost_message(exc)) from None
            raise HostError(f"{self.name}: cannot start the agent: {_one_line(exc)}") from None
        return SshChannel(self, conn, proc)

    async def close(self) -> None:
        await super().close()
        self._closing = True
        conn, self._conn, self._client = self._conn, None, None
        if conn is not None:
            conn.close()
            with contextlib.suppress(asyncssh.Error, OSError, TimeoutError):
                await asyncio.wait_for(conn.wait_closed(), 5.0)


def _one_line(exc: object) -> str:
    text = str(exc).strip()
    return " ".join(text.split()) if text else (type(exc).__name__ if isinstance(exc, BaseException) else "")
