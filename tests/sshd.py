"""A real OpenSSH server on loopback for tests and benchmarks.

``start_sshd()`` makes a temporary folder with a host key, a client key pair, authorized_keys, a
known_hosts file holding the server's key, an ssh client config with a ``gpubox`` alias, and runs
``/usr/sbin/sshd -D -e -f CONFIG`` as a child on a free port of 127.0.0.1. ``SshServer.stop()`` kills it
and everything it started. Faults are real: ``drop_connections()`` kills the per-connection sshd
processes (the client sees its TCP connection close), ``freeze_connections()`` stops them (the client
sees a peer that no longer answers, as when a cable is pulled).

Needs ``/usr/sbin/sshd`` and ``ssh-keygen`` (scripts/ci_sshd_deps.sh installs them); without them
``start_sshd`` raises ``SshdMissing`` so a test fails with that message, never skips.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kimitui.hostside.procfs import read_stat, start_time_of
from tests import waiting
from tests.waiting import DEADLINE_S, wait_until

POLL_S = 0.02
"""Interval between checks of a condition waited on with a deadline."""

SSHD = "/usr/sbin/sshd"
ALIAS = "gpubox"
JUMP_ALIAS = "gpubox-via-jump"


class SshdMissing(RuntimeError):
    """OpenSSH server or ssh-keygen not installed."""


def require_sshd() -> None:
    missing = [p for p in (SSHD,) if not os.access(p, os.X_OK)]
    if shutil.which("ssh-keygen") is None:
        missing.append("ssh-keygen")
    if missing:
        raise SshdMissing(f"{', '.join(missing)} not found: the SSH tests need a real OpenSSH server; "
                          "run scripts/ci_sshd_deps.sh (apt-get install -y openssh-server)")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def keygen(path: Path, comment: str) -> str:
    """A new ed25519 key pair at PATH (and PATH.pub); returns the public key line."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL)
    return path.with_suffix(".pub").read_text().strip()


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(comm, ppid, start time) of a local pid, or None when gone."""
    st = read_stat(pid)
    return None if st is None else (st.comm, st.ppid, st.start_time)


def descendants(root: int) -> list[int]:
    """Every live process below ROOT (by ppid), parents before children."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None:
            children.setdefault(st[1], []).append(int(entry))
    out: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


@dataclass
class SshServer:
    dir: Path
    port: int
    client_key: Path
    host_key: Path
    known_hosts: Path
    ssh_config: Path
    config: Path
    log_path: Path
    user: str
    proc: subprocess.Popen[bytes]
    host: str = "127.0.0.1"
    alias: str = ALIAS
    jump_alias: str = JUMP_ALIAS
    _orphans: list[tuple[int, int]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def target(self) -> str:
        return f"ssh://{self.user}@{self.host}:{self.port}"

    def host_key_line(self) -> str:
        return self.host_key.with_suffix(".pub").read_text().strip()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def connection_pids(self) -> list[int]:
        """The per-connection sshd processes (monitor and session child) of every open connection."""
        return [p for p in descendants(self.pid) if (st := _stat(p)) is not None and st[0] == "sshd"]

    def session_pids(self) -> list[int]:
        """Processes started by clients (shells, commands), below the per-connection sshd processes."""
        return [p for p in descendants(self.pid) if (st := _stat(p)) is not None and st[0] != "sshd"]

    def find_sessions(self, token: str) -> list[int]:
        """Live client-started processes whose command line contains TOKEN."""
        out = []
        for pid in self.session_pids():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if token in cmdline and alive(pid):
                out.append(pid)
        return out

    def wait_connections(self, n: int = 1, timeout: float = DEADLINE_S) -> list[int]:
        wait_until(lambda: len(self.connection_pids()) >= n, f"{n} ssh connection(s)", timeout)
        return self.connection_pids()

    def _remember_orphans(self) -> None:
        for pid in self.session_pids():
            if (st := _stat(pid)) is not None:
                self._orphans.append((pid, st[2]))

    def drop_connections(self) -> list[int]:
        """Kill every per-connection sshd process (a real drop: the client's TCP connection closes).
        Their session processes become orphans; stop() kills those. Returns the killed pids."""
        self._remember_orphans()
        pids = self.connection_pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not self.connection_pids(), "dropped sshd processes to exit")
        return pids

    def unread_bytes(self) -> int:
        """Bytes that reached the server's end of its open connections and are not read yet (what a frozen
        connection holds), from the kernel's socket table."""
        total = 0
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, queues = fields[1], fields[3], fields[4]
            if state == "01" and int(local.rsplit(":", 1)[1], 16) == self.port:  # 01: established
                total += int(queues.split(":")[1], 16)
        return total

    def freeze_connections(self) -> list[int]:
        """SIGSTOP every per-connection sshd process: the peer stops answering without closing TCP."""
        self._remember_orphans()
        pids = self.connection_pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        return pids

    def stop(self) -> None:
        """Kill the server, its connections, their sessions and any orphans left by a drop; wait."""
        if self.proc.poll() is None:
            self._remember_orphans()
            for pid in reversed(descendants(self.pid)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.proc.kill()
        self.proc.wait(timeout=10)
        for pid, start in self._orphans:
            st = _stat(pid)
            if st is not None and st[2] == start:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self._orphans.clear()

    def __enter__(self) -> SshServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


SSHD_CONFIG = """\
ListenAddress 127.0.0.1
Port {port}
HostKey {host_key}
PidFile {dir}/sshd.pid
AuthorizedKeysFile {dir}/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
LogLevel VERBOSE
MaxSessions 32
Subsystem sftp internal-sftp
"""

CLIENT_CONFIG = """\
Host {alias}
    HostName 127.0.0.1
    Port {port}
    User {user}
    IdentityFile {key}
    IdentitiesOnly yes
    UserKnownHostsFile {known_hosts}

Host {jump_alias}
    HostName 127.0.0.1
    Port {port}
    User {user}
    IdentityFile {key}
    IdentitiesOnly yes
    UserKnownHostsFile {known_hosts}
    ProxyJump {alias}
"""


LOGIN_WORK = """\
# What a GPU box's login shell does before it runs a command: pyenv, then python tooling that starts an
# interpreter (conda/module/venv hooks do the same). Real work, no sleep; ROUNDS is calibrated by
# slow_login_home() so the whole file costs about the asked-for seconds.
export PYENV_ROOT="${{PYENV_ROOT:-{pyenv_root}}}"
if [ -x "$PYENV_ROOT/bin/pyenv" ]; then
    export PATH="$PYENV_ROOT/bin:$PATH"
    eval "$(pyenv init -)"
fi
i=0
while [ "$i" -lt {rounds} ]; do
    {python} -I -S -c 'import json' >/dev/null 2>&1
    i=$((i + 1))
done
"""


def _bashrc_cost(home: Path) -> float:
    t0 = time.monotonic()
    subprocess.run(["bash", "-c", f". {home / '.bashrc'}"], env={"HOME": str(home), "PATH": os.environ["PATH"]},
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.monotonic() - t0


def slow_login_home(d: Path, seconds: float) -> Path:
    """A home folder whose ~/.bashrc (read by bash for every command sshd runs) costs about SECONDS of
    real work, as a pyenv-managed GPU box's does: measured, then scaled by the number of interpreter
    starts. Returns the folder (give it to the server with ``SetEnv HOME=...``)."""
    home = d / "home"
    home.mkdir(mode=0o700, exist_ok=True)
    pyenv_root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    python = sys.executable

    def write(rounds: int) -> float:
        (home / ".bashrc").write_text(LOGIN_WORK.format(pyenv_root=pyenv_root, rounds=rounds, python=python))
        return min(_bashrc_cost(home) for _ in range(3))

    base = write(0)
    one = max(write(10) - base, 0.02) / 10
    write(max(0, round((seconds - base) / one)))
    return home


def start_sshd(base: Path | None = None, *, timeout: float = 10.0, extra_config: str = "",
               slow_login_s: float | None = None) -> SshServer:
    """Start a real sshd on a free loopback port; see the module docstring. EXTRA_CONFIG lines are
    appended to sshd_config (e.g. "SetEnv HOME=/tmp/x" to time commands without the login dotfiles).
    SLOW_LOGIN_S gives every session a login shell that costs about that long (slow_login_home)."""
    require_sshd()
    d = Path(tempfile.mkdtemp(prefix="kimitui-sshd-", dir=base))
    os.chmod(d, 0o700)
    if slow_login_s is not None:
        extra_config += f"SetEnv HOME={slow_login_home(d, slow_login_s)}\n"
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
    user = getpass.getuser()
    host_key = d / "ssh_host_ed25519_key"
    host_pub = keygen(host_key, "kimitui-test-host")
    client_key = d / "id_ed25519"
    client_pub = keygen(client_key, "kimitui-test-client")
    (d / "authorized_keys").write_text(client_pub + "\n")
    last_error = ""
    for _attempt in range(3):  # a free port may be taken between choosing and binding it
        port = free_port()
        config = d / "sshd_config"
        config.write_text(SSHD_CONFIG.format(port=port, host_key=host_key, dir=d) + extra_config)
        known_hosts = d / "known_hosts"
        known_hosts.write_text(f"[127.0.0.1]:{port} {host_pub}\n")
        ssh_config = d / "ssh_config"
        ssh_config.write_text(CLIENT_CONFIG.format(alias=ALIAS, jump_alias=JUMP_ALIAS, port=port, user=user,
                                                   key=client_key, known_hosts=known_hosts))
        log_path = d / "sshd.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=log, start_new_session=True)
        server = SshServer(d, port, client_key, host_key, known_hosts, ssh_config, config, log_path, user, proc)
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return server
            time.sleep(POLL_S)
        last_error = server.log().strip().splitlines()[-5:].__str__()
        server.stop()
    raise RuntimeError(f"sshd did not start on 127.0.0.1: {last_error}")


@contextlib.contextmanager
def sshd_server(base: Path | None = None, extra_config: str = "",
                slow_login_s: float | None = None) -> Iterator[SshServer]:
    server = start_sshd(base, extra_config=extra_config, slow_login_s=slow_login_s)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)


async def until(pred: Callable[[], object], timeout: float, what: str, interval: float = POLL_S) -> None:
    """tests/waiting.py's ``until`` under its old argument order and error (TimeoutError), for
    tests/safety_tables.py; new code calls tests.waiting.until."""
    try:
        await waiting.until(pred, what, timeout, interval)
    except AssertionError as exc:
        raise TimeoutError(str(exc)) from None


def alive(pid: int) -> bool:
    """True while PID exists and is not a zombie."""
    return start_time_of(pid) is not None


def start_time(pid: int) -> int:
    st = _stat(pid)
    assert st is not None, f"pid {pid} is gone"
    return st[2]
