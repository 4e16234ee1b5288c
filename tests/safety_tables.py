"""Randomized safety tables for tests/test_cleanup_random.py: generated process tables of REAL processes run
through the real cleanup planner and executor, and an oracle that checks every signal against ground truth.

A table is a random set of real processes whose roles the harness knows because it started them: the
service's process tree (a dash script: each node and leaf ends as a copy of sleep with a token of its own as
argument), its main pid behind a pidfile or given as pid:N (or no service at all); GPU holders that are not
the service's; holders whose memory is outside the scope; handle-only monitors; other users' processes (uid
nobody, also inside the service's tree); host daemons (a copy of sleep at .../usr/bin/nvidia-persistenced,
with its systemd unit in the sample); names that are not UTF-8 (a symlink to sleep named b'w\\xe6\\x97', cut
mid-character, or b'\\xff-worker'); processes the host names as protected; bystanders; SIGTERM-ignoring stuck
workers; and pid reuse forced through /proc/sys/kernel/ns_last_pid: before the cleanup (a stale pidfile),
between the graceful and the process step, or while the operator is being asked (after the preview, before
the signal). Each reuse is checked: the new process really has the pid, with a later start time. And groups
where the kernel decides more than one fate or /proc misleads (tests/safety_groups.py): a terminal's leader and
the helper its hangup kills, a PID namespace's init and a process entered into it, a holder that execs into a host
daemon on SIGTERM, one whose main thread exited, an owner SIGKILLed while its children keep its memory.

The tables run in a pid namespace of their own (``unshare --pid --fork --mount-proc``: run_tables starts a
python there, pid 1 of it, which runs them and hands the summary back): the pid counter the forced reuses
move is theirs alone, and no process of the host or of another test (the suite runs under pytest-xdist,
several workers forking at once) can take a pid a table freed. After each forced reuse the counter is put
back to its high-water mark, so a pid just freed (a stale main's) is handed out again only once the counter
has gone round the whole range.

NVML is the only simulated part: each table's ProcessView builds its HostSamples from the table and the
processes' liveness read from /proc (memory is released when its holder is gone). The host side is real: one
local agent (LocalHost) scans, stats and signals for every table. The operator is random too (accept all, a
random subset, spared rows ticked in, declined, pids never shown); every preview and decision is kept.

The oracle, per table: every SignalSent with outcome "sent" must be (a) to a row of that step's preview (a
target, or a spared row marked optional) whose pid the operator ticked (all targets when accepted as
previewed), (b) to a process whose role allows it: the service's tree in any step, a GPU holder that is not
the service's only in the step named ``OTHERS_STEP`` (or a later one, once the operator accepted that
step), a handle-only monitor only when its pid was ticked, never a daemon, another user's process, a
protected one or a bystander (a process that took a reused pid is judged by its own role); (c) to the
incarnation the preview showed, which is the one the harness started (pid and start
time), alive when the signal was sent: a process the harness killed and reaped itself (a stale main, a
reuse's victim) was dead from then on, whatever process has its pid and start time now. And independently
of the events: every process the harness started that died during the table must have died of a signal the
executor reported as sent to that very process while it lived, or of the kernel's own signal (SIGHUP, SIGKILL)
when a process the same step signalled ended, it having been listed in that step's preview as dying with it and
consented (the service's, or ticked): the harness reaps its own children (and, as the namespace's init, the
orphans of its trees; through a launcher that dies of what its child died of, the groups' terminal leaders and
namespace processes) and reads WTERMSIG from waitpid. A worker that became a host daemon gets no second signal.

A signal that reached a process no table started, or a death a signal of another table explains, is the
harness's doing (a pid it freed went to another process), never a wrong of the cleanup's: it is counted apart
(``foreign``), and the tests require none.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimitui.cleanup import (
    CleanupExecutor,
    CleanupTarget,
    ConsentDecision,
    Deadlines,
    PidService,
    is_optional,
)
from kimitui.cleanup.services import ServiceNotFound
from kimitui.core.events import (
    Consent,
    Event,
    GpuSample,
    HostSample,
    ProcRef,
    ProcSample,
    SignalSent,
    StepPreview,
    StepResult,
)
from kimitui.hosts.local import LocalHost
from tests.safety_groups import (
    EXEC_ON_TERM,
    LAUNCH,
    LEAD_EXIT,
    OTHER_HOLDERS,
    ROLES,
    TICK_ONLY,
    GroupSpec,
    generate_groups,
)
from tests.sshd import until

OTHERS_STEP = "others"
"""The step whose consent is for the GPU holders that are not the service's (engineer A1's group): such a
holder may be signalled in that step, or in a later one (the device step) once the operator accepted it. On
a tree without that step, every signal to one is counted wrong. The one name to adjust if it is renamed."""

GPUS = 4
TOTAL_MIB = 97_887.0
RESERVED_MIB = 616.0
NOBODY = 65534
SLEEP = "/usr/bin/sleep"
DASH = "/bin/sh"
SETPRIV = "/usr/bin/setpriv"
NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"
UNSHARE = ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child")
"""A pid namespace of the tables' own, with its own /proc; its init (the harness) killed with the caller."""
IN_NAMESPACE = "KIMITUI_SAFETY_IN_NAMESPACE"
"""Set for the python run_tables starts in the namespace: there it runs the tables itself."""
ROOT = Path(__file__).resolve().parent.parent
PR_SET_CHILD_SUBREAPER = 36
CLK_TCK = os.sysconf("SC_CLK_TCK")
TOKEN_BASE = 100_000
"""A process's token is its sleep argument (seconds): unique within the run, it names the process in /proc."""

DAEMONS: dict[str, str] = {
    "nvidia-persistenced": "nvidia-persistenced.service",
    "nv-hostengine": "nvidia-dcgm.service",
    "nv-fabricmanager": "nvidia-fabricmanager.service",
}
"""Host daemon executables (copies of sleep at ROOT/usr/bin/NAME) and the systemd unit the sample gives them."""
BAD_NAMES: tuple[bytes, ...] = (b"w\xe6\x97", b"\xff-worker")
"""Executable names that are not UTF-8 (symlinks to sleep): a character cut in the middle, a lone 0xff."""

DEADLINES = Deadlines(graceful_s=0.05, term_grace_s=0.05, kill_s=2.0, verify_s=0.05, sample_s=5.0, poll_s=0.005,
                      command_s=5.0, reconnect_s=1.0)
TABLE_TIMEOUT_S = 60.0
"""A table that has not finished by then is reported as an error (with its seed), not waited for."""
SETUP_TIMEOUT_S = 10.0
REUSE_ATTEMPTS = 8
STALE_AGE_S = 0.1
"""How long ago a stale pidfile was written (its mtime, set back): the service ran that long, then exited.
Staleness is proven to a few centiseconds (the file's mtime in nanoseconds against the process's start in
clock ticks on a boot time bounded by /proc/uptime): a tenth of a second is past that bound."""

SERVICE_ROLES = frozenset({"main", "node", "worker", "child", "stuck"})
"""Roles of the service's process tree: the cleanup may signal them in any step, once consented. A holder
that is not the service's ("other_holder") only in OTHERS_STEP, a monitor only when ticked in; never the
others: other_user, daemon, protected, bystander, outside (memory only outside the scope), self (kimitui,
the agent)."""


def cannot_run() -> str | None:
    """Why this machine cannot run the tables (they need root: another uid, a pid namespace of their own and
    its ns_last_pid, pidfds), or None."""
    if os.geteuid() != 0:
        return "needs root (processes of another uid, a pid namespace, its /proc/sys/kernel/ns_last_pid)"
    if not (hasattr(os, "pidfd_open") and os.path.exists(SETPRIV) and os.path.exists(SLEEP)):
        return f"needs pidfds, {SETPRIV} and {SLEEP}"
    if shutil.which(UNSHARE[0]) is None:
        return "needs unshare (util-linux) to run the tables in a pid namespace of their own"
    probe = 'test "$$" = 1 && test -w /proc/sys/kernel/ns_last_pid && test -e /proc/1/task/1/children'
    try:
        res = subprocess.run([*UNSHARE, "sh", "-c", probe], capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot start a pid namespace ({' '.join(UNSHARE)}): {exc}"
    if res.returncode != 0:
        return (f"a pid namespace of their own ({' '.join(UNSHARE)}) with a writable {NS_LAST_PID} and "
                f"/proc/PID/task/TID/children (CONFIG_PROC_CHILDREN): not here (status {res.returncode}: "
                f"{res.stderr.strip()[:200]})")
    return None


# --- /proc, read as bytes ------------------------------------------------------------------------------

def proc_stat(pid: int) -> tuple[int, str, int] | None:
    """(start time, state, ppid) of a process, None when gone; bytes, so a non-UTF-8 name is no problem. A
    process whose main thread exited reads as a zombie: its state is then a live thread's."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data.rpartition(b")")[2].split()
    try:
        st = int(fields[19]), fields[0].decode(), int(fields[1])
    except (IndexError, ValueError):
        return None
    if st[1] == "Z":
        live = live_thread_state(pid)
        if live is not None:
            return st[0], live, st[2]
    return st


def live_thread_state(pid: int) -> str | None:
    """The state of a thread of PID other than its leader that is not a zombie, or None."""
    try:
        tids = [t for t in os.listdir(f"/proc/{pid}/task") if t != str(pid)]
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as fh:
                state = fh.read().rpartition(b")")[2].split()[0].decode()
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            return state
    return None


def _raw_state(pid: int) -> str | None:
    """/proc/PID/stat's state as it reads (a zombie leader included)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rpartition(b")")[2].split()[0].decode()
    except (OSError, IndexError):
        return None


def find_token(token: int) -> int | None:
    """The process running ``sleep TOKEN`` (tokens are unique in a run), or None."""
    want = [os.fsencode(SLEEP), str(token).encode()]
    for name in os.listdir("/proc"):
        if name.isdigit() and proc_argv(int(name)) == want:
            return int(name)
    return None


def sig_caught(pid: int, sig: int) -> bool:
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def proc_argv(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().rstrip(b"\0").split(b"\0")
    except OSError:
        return []


def proc_exe(pid: int) -> str | None:
    """/proc/PID/exe, as the agent reads it into its samples (None when unreadable)."""
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def proc_uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def proc_children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as fh:
            return [int(x) for x in fh.read().split()]
    except (OSError, ValueError):
        return []


def boot_ticks() -> int:
    """Now, in the clock ticks after boot that a start time counts."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * CLK_TCK)


def set_child_subreaper(on: bool) -> None:
    """Orphans of the harness's trees are reparented to this process (so it can reap them and read how
    they died) instead of to init."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def kill_identity(pid: int, start_time: int, sig: int = signal.SIGKILL) -> bool:
    """The harness's own teardown signal: through a pidfd, only if (pid, start time) still match."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        st = proc_stat(pid)
        if st is None or st[0] != start_time or st[1] in ("Z", "X"):
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


# --- the programs ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Programs:
    """The executables the tables run: sleep, its copies at daemon paths, its symlinks with bad names."""

    root: Path
    daemons: dict[str, Path]
    bad_names: tuple[Path, ...]

    @property
    def scripts(self) -> Path:
        return self.root / "scripts"

    @property
    def pidfiles(self) -> Path:
        return self.root / "run"


def make_programs(root: Path) -> Programs:
    """Under ``root``, which must be reachable by other users (the uid nobody runs some of these)."""
    (root / "usr" / "bin").mkdir(parents=True, exist_ok=True)
    (root / "bin").mkdir(exist_ok=True)
    for sub in ("scripts", "run"):
        (root / sub).mkdir(exist_ok=True)
    daemons = {}
    for name in DAEMONS:
        path = root / "usr" / "bin" / name
        shutil.copy2(SLEEP, path)  # a copy: /proc/PID/exe names the daemon's path, not sleep's
        daemons[name] = path
    bad = []
    for raw in BAD_NAMES:
        link = os.path.join(os.fsencode(root / "bin"), raw)
        with contextlib.suppress(FileExistsError):
            os.symlink(SLEEP, link)
        bad.append(Path(os.fsdecode(link)))
    return Programs(root, daemons, tuple(bad))


# --- the table, as generated ----------------------------------------------------------------------------

@dataclass(slots=True)
class LeafSpec:
    """One process: what it runs and what NVML is made to say about it."""

    token: int
    role: str
    program: str = "sleep"
    """sleep | daemon:NAME | bad:N"""
    stuck: bool = False
    uid: int = 0
    mem: dict[int, float] = field(default_factory=dict)
    kind: str | None = None
    """What the sample says it holds: cuda | handle | None (not in the sample)."""
    handle_gpus: list[int] = field(default_factory=list)
    unit: str | None = None


@dataclass(slots=True)
class NodeSpec:
    """A node of the service's tree: a dash that starts its children, then becomes a sleep itself."""

    leaf: LeafSpec
    leaves: list[LeafSpec] = field(default_factory=list)
    nodes: list[NodeSpec] = field(default_factory=list)

    def walk(self) -> Iterator[tuple[LeafSpec, int | None]]:
        """(leaf, parent token) of every process of the tree, this node first."""
        yield self.leaf, None
        stack: list[NodeSpec] = [self]
        while stack:
            node = stack.pop()
            for leaf in node.leaves:
                yield leaf, node.leaf.token
            for sub in node.nodes:
                yield sub.leaf, node.leaf.token
                stack.append(sub)


@dataclass(slots=True)
class TableSpec:
    seed: int
    service: str
    """pidfile | pid | none"""
    tree: NodeSpec | None
    loose: list[LeafSpec]
    scope: list[int] | None
    reuse: str
    """none | stale (the main exited before the cleanup, its pid left free) | before (a stale pidfile: its pid
    reused before the cleanup) | between (the graceful and the process step) | consent (after a preview)"""
    self_holders: bool
    """kimitui's own process and the agent listed as GPU holders too (both protected)."""
    groups: list[GroupSpec] = field(default_factory=list)
    """Groups where the kernel decides more than one fate, or /proc misleads (tests/safety_groups.py)."""

    def rerun(self, table: str = "") -> str:
        """The command that runs this table alone; TABLE: its class as module:name where it is not ``Table``."""
        if not table:
            return (f"KIMITUI_SAFETY_SEED={self.seed} KIMITUI_SAFETY_TABLES=1 pytest tests/test_cleanup_random.py "
                    "-k signal_only_what")
        module, name = table.split(":")
        return (f"python -c 'import asyncio; from tests.safety_tables import run_tables; from {module} import {name}; "
                f"print(asyncio.run(run_tables(1, {self.seed}, table_cls={name})).report())'")


class Tokens:
    def __init__(self, start: int) -> None:
        self.next = start

    def __call__(self) -> int:
        self.next += 1
        return self.next


def _gpu(rng: random.Random, gpus: list[int]) -> int:
    return rng.choice(gpus)


def _mib(rng: random.Random) -> float:
    return float(rng.choice((300, 2048, 17_000, 40_000)))


def _program(rng: random.Random, bad_odds: float = 0.12) -> str:
    return f"bad:{rng.randrange(len(BAD_NAMES))}" if rng.random() < bad_odds else "sleep"


def _service_leaf(rng: random.Random, tok: Tokens, scope: list[int]) -> LeafSpec:
    pick = rng.random()
    if pick < 0.45:
        return LeafSpec(tok(), "worker", _program(rng), stuck=rng.random() < 0.3, mem={_gpu(rng, scope): _mib(rng)},
                        kind="cuda")
    if pick < 0.7:
        return LeafSpec(tok(), "child", _program(rng), stuck=rng.random() < 0.2)
    if pick < 0.85:
        return LeafSpec(tok(), "stuck", stuck=True, mem={_gpu(rng, scope): _mib(rng)}, kind="cuda")
    if pick < 0.95:  # the service started something as another user: never signalled unless allowed
        return LeafSpec(tok(), "other_user", uid=NOBODY, mem={_gpu(rng, scope): _mib(rng)}, kind="cuda")
    name = rng.choice(list(DAEMONS))  # started by the service: known by its executable only (no unit of its own)
    return LeafSpec(tok(), "daemon", f"daemon:{name}", kind="handle", handle_gpus=list(range(GPUS)))


def _tree(rng: random.Random, tok: Tokens, scope: list[int], depth: int, lone: bool) -> NodeSpec:
    role = "main" if depth == 0 else "node"
    holds = rng.random() < 0.3
    node = NodeSpec(LeafSpec(tok(), role, stuck=rng.random() < 0.25, mem={_gpu(rng, scope): _mib(rng)} if holds
                             else {}, kind="cuda" if holds else None))
    if lone:
        return node
    node.leaves = [_service_leaf(rng, tok, scope) for _ in range(rng.randint(0, 4))]
    if depth < 2 and rng.random() < 0.35:
        node.nodes = [_tree(rng, tok, scope, depth + 1, False)]
    return node


def _daemon(rng: random.Random, tok: Tokens) -> LeafSpec:
    """A host daemon known by its executable and its unit, by its executable only, or by its unit only (a
    helper in the daemon's cgroup: its executable is plain sleep)."""
    name = rng.choice(list(DAEMONS))
    known_by = rng.choice(("exe+unit", "exe", "unit"))
    return LeafSpec(tok(), "daemon", "sleep" if known_by == "unit" else f"daemon:{name}",
                    kind=rng.choice(("handle", "handle", "cuda")), handle_gpus=list(range(GPUS)),
                    unit=None if known_by == "exe" else DAEMONS[name])


def _loose(rng: random.Random, tok: Tokens, scope: list[int], outside: list[int]) -> list[LeafSpec]:
    out: list[LeafSpec] = []
    for _ in range(rng.choice((0, 1, 1, 2))):
        if rng.random() < 0.2:  # a stray: maps a device file, NVML lists no memory for it
            g = _gpu(rng, scope)
            out.append(LeafSpec(tok(), "other_holder", _program(rng), rng.random() < 0.3, kind="cuda",
                                handle_gpus=[g]))
        else:
            out.append(LeafSpec(tok(), "other_holder", _program(rng), rng.random() < 0.3,
                                mem={_gpu(rng, scope): _mib(rng)}, kind="cuda"))
    for _ in range(rng.choice((0, 0, 1, 2))):
        out.append(LeafSpec(tok(), "other_user", _program(rng), uid=NOBODY, mem={_gpu(rng, scope): _mib(rng)},
                            kind="cuda"))
    for _ in range(rng.choice((0, 1, 1, 2))):
        out.append(LeafSpec(tok(), "monitor", _program(rng), kind="handle", handle_gpus=list(range(GPUS))))
    for _ in range(rng.choice((0, 1, 1, 2))):
        out.append(_daemon(rng, tok))
    for _ in range(rng.choice((0, 1))):
        out.append(LeafSpec(tok(), "bystander", _program(rng)))
    for _ in range(rng.choice((0, 0, 1))):
        out.append(LeafSpec(tok(), "protected", mem={_gpu(rng, scope): _mib(rng)}, kind="cuda"))
    if outside and rng.random() < 0.5:
        g = _gpu(rng, outside)
        out.append(LeafSpec(tok(), "outside", mem={g: _mib(rng)}, kind="cuda", handle_gpus=[g, _gpu(rng, scope)]))
    return out


def generate(seed: int, tok: Tokens) -> TableSpec:
    """One random table (the same one for the same seed; tokens aside)."""
    rng = random.Random(seed)
    scope = None if rng.random() < 0.5 else sorted(rng.sample(range(GPUS), rng.randint(1, GPUS)))
    in_scope = scope or list(range(GPUS))
    outside = [g for g in range(GPUS) if g not in in_scope]
    service = rng.choices(("pidfile", "pid", "none"), (5, 3, 2))[0]
    reuses = ["none", "none", "consent"] + (["stale", "between"] if service != "none" else []) + (
        ["before"] if service == "pidfile" else [])
    reuse = rng.choice(reuses)
    tree = None
    if service != "none" or rng.random() < 0.3:  # no service: a tree may still run, nobody's service
        tree = _tree(rng, tok, in_scope, 0, lone=reuse in ("before", "stale"))
    loose = _loose(rng, tok, in_scope, outside)
    if tree is not None and service == "none":
        tree = _orphaned(tree)
    return TableSpec(seed, service, tree, loose, scope, reuse, rng.random() < 0.15,
                     generate_groups(seed, in_scope, tok))


def _nodes(tree: NodeSpec) -> Iterator[NodeSpec]:
    yield tree
    for sub in tree.nodes:
        yield from _nodes(sub)


def _orphaned(tree: NodeSpec) -> NodeSpec:
    """With no service chosen, a tree is nobody's service: its GPU holders are 'others', the rest bystanders."""
    for leaf, _ in tree.walk():
        if leaf.role in SERVICE_ROLES:
            leaf.role = "other_holder" if leaf.kind == "cuda" else "bystander"
    return tree


# --- the table, as run ----------------------------------------------------------------------------------

@dataclass(slots=True)
class Proc:
    """A process of the table, as the harness knows it."""

    spec: LeafSpec
    pid: int
    start_time: int
    cmdline: str
    exe: str | None = None
    popen: subprocess.Popen[bytes] | None = None
    parent: int | None = None
    """The token of its parent node (tree members)."""
    reused_from: str | None = None
    """Set on a process started on purpose with the pid of another that had exited: that one's role."""
    harness_killed: bool = False
    status: int | None = None
    """Its waitpid status once reaped."""
    freed_at: int | None = None
    """How many of the table's events there were when the harness reaped it itself (Table.free): from then on
    its pid was free, and a signal to its (pid, start time) reached another process, if any."""
    waiter: subprocess.Popen[bytes] | None = None
    """A launcher that waits for it and dies of what it died of (its status is the process's)."""
    owner: Proc | None = None
    """An inheritor's exited owner (whose memory it keeps)."""

    @property
    def role(self) -> str:
        return self.spec.role

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.start_time)

    def alive(self) -> bool:
        st = proc_stat(self.pid)
        return st is not None and st[0] == self.start_time and st[1] not in ("Z", "X")

    def label(self) -> str:
        if self.reused_from:
            return f"{self.role} that took the reused pid of a {self.reused_from}"
        return self.role

    def lived_at(self, event: int) -> bool:
        """Whether it could still receive a signal whose event is number ``event`` of the table's."""
        return self.freed_at is None or event < self.freed_at


class ReuseMissed(Exception):
    """Another process took the pid the harness meant to reuse: the table stops before the next step."""


class TableHost(LocalHost):
    """The shared local agent, with this table's protected processes. A command the cleanup runs there (the
    pidfile's staleness check: sh, date, stat, cat) forks in the tables' namespace: it runs under the forks
    lock, never while a table moves the pid counter back."""

    def __init__(self, shared: LocalHost, protected: set[int], forks: asyncio.Lock) -> None:
        super().__init__(name=shared.name)
        self._link = shared.link
        self._protected = protected
        self._forks = forks

    def protected_pids(self) -> list[int]:
        return sorted(self._protected)

    async def run(self, *args: Any, **kwargs: Any) -> Any:
        async with self._forks:
            return await super().run(*args, **kwargs)

    async def close(self) -> None:  # the shared agent is closed by the harness
        return None


def _argv(prog: Programs, leaf: LeafSpec) -> list[str | bytes]:
    if leaf.program.startswith("daemon:"):
        exe: str | bytes = str(prog.daemons[leaf.program.partition(":")[2]])
    elif leaf.program.startswith("bad:"):
        exe = os.fsencode(prog.bad_names[int(leaf.program.partition(":")[2])])
    else:
        exe = SLEEP
    return [exe, str(leaf.token)]


def _quote(arg: str | bytes) -> bytes:
    raw = os.fsencode(arg)
    assert b"'" not in raw
    return b"'" + raw + b"'"


def tree_script(prog: Programs, tree: NodeSpec) -> bytes:
    """The dash script of the tree: ``sh SCRIPT nTOKEN`` runs one node, which starts its children (each
    ``( trap ...; exec PROGRAM TOKEN ) &``), then becomes ``sleep TOKEN`` itself."""
    lines = [b'case "$1" in']
    for node in _nodes(tree):
        lines.append(f"n{node.leaf.token})".encode())
        if node.leaf.stuck:
            lines.append(b"  trap '' TERM")
        for leaf in node.leaves:
            argv = _argv(prog, leaf)
            if leaf.uid:
                argv = [SETPRIV, f"--reuid={leaf.uid}", f"--regid={leaf.uid}", "--clear-groups", *argv]
            trap = b"trap '' TERM" if leaf.stuck else b"trap - TERM"
            lines.append(b"  ( " + trap + b"; exec " + b" ".join(map(_quote, argv)) + b" ) &")
        for sub in node.nodes:
            trap = b"trap '' TERM" if sub.leaf.stuck else b"trap - TERM"
            lines.append(b"  ( " + trap + b'; exec sh "$0" ' + f"n{sub.leaf.token}".encode() + b" ) &")
        lines.append(b"  exec " + b" ".join(map(_quote, _argv(prog, node.leaf))) + b" ;;")
    lines.append(b"esac")
    return b"\n".join(lines) + b"\n"


def _cmdline(argv: list[bytes]) -> str:
    return b" ".join(argv).decode("utf-8", "replace")


def spawn(prog: Programs, leaf: LeafSpec) -> subprocess.Popen[bytes]:
    """Start one loose process (its own session). A stuck one inherits SIGTERM ignored across exec."""
    argv = _argv(prog, leaf)
    kw: dict[str, Any] = {}
    if leaf.uid:
        kw = {"user": leaf.uid, "group": leaf.uid, "extra_groups": []}
    old = signal.signal(signal.SIGTERM, signal.SIG_IGN) if leaf.stuck else None
    try:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True, **kw)
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def last_pid() -> int:
    """The pid counter of this pid namespace: the last pid handed out (or what was written there)."""
    with open(NS_LAST_PID) as fh:
        return int(fh.read())


def set_last_pid(pid: int) -> None:
    with open(NS_LAST_PID, "w") as fh:
        fh.write(str(pid))


def spawn_at(prog: Programs, leaf: LeafSpec, pid: int) -> subprocess.Popen[bytes] | None:
    """Start ``leaf`` with exactly this (free) pid, through ns_last_pid; None when another process took it.
    Only in the tables' own pid namespace (the harness is its init): the counter moved is theirs alone.

    The counter is put back after to its high-water mark (the highest value read before each move), so it
    only ever goes forward: later processes get pids never handed out yet, not the ones just freed, which a
    stale pidfile or a previewed row may still name (a freed pid comes back only after the counter went round
    the whole range). Not to the highest live pid: a process near the top of the range (a kernel thread, on
    some hosts) sent the counter there, it wrapped, and pids just freed came back within a few forks."""
    if os.getpid() != 1:
        raise RuntimeError("spawn_at moves the pid counter: only in the tables' own pid namespace (run_tables)")
    high = last_pid()
    try:
        for _ in range(REUSE_ATTEMPTS):
            if proc_stat(pid) is not None:
                return None  # taken by someone else meanwhile
            high = max(high, last_pid())
            set_last_pid(pid - 1)
            popen = spawn(prog, leaf)
            if popen.pid == pid:
                return popen
            popen.kill()
            popen.wait()
        return None
    finally:
        set_last_pid(max(high, last_pid()))


@dataclass(slots=True)
class Decision:
    step: str
    preview: StepPreview
    decision: ConsentDecision
    mode: str


@dataclass(slots=True)
class Wrong:
    kind: str
    detail: str


@dataclass(slots=True)
class TableResult:
    spec: TableSpec
    wrong: list[Wrong] = field(default_factory=list)
    sent: int = 0
    refused: int = 0
    odd: Counter[str] = field(default_factory=Counter)
    """The details of the signals that ended in error (or unknown), to be looked at."""
    outcomes: Counter[str] = field(default_factory=Counter)
    """Every SignalSent by signal and outcome ("SIGTERM mismatch": the pid was another process's by then;
    "- refused": ticked but refused at consent)."""
    reuses: Counter[str] = field(default_factory=Counter)
    error: str | None = None
    decisions: list[Decision] = field(default_factory=list)
    roles: Counter[str] = field(default_factory=Counter)
    foreign: list[Wrong] = field(default_factory=list)
    """What reached, or came from, outside the table: the harness's doing (a pid it freed went to another
    process), not the cleanup's: a signal that reached no process of the table, a death of one of its
    processes that another table's signal explains."""
    signals: set[tuple[int, int | None, str]] = field(default_factory=set)
    """(pid, start time, signal) of every signal the table's events say was sent."""
    unexplained: list[tuple[int, int, str | None, Wrong]] = field(default_factory=list)
    """(pid, start time, signal it died of, the wrong) of each death this table's signals do not explain:
    run_tables makes each a wrong, or the harness's doing when another table's signal explains it."""
    died_with: Counter[str] = field(default_factory=Counter)
    """Deaths by the kernel's signal along with a signalled target, listed in its preview and consented: by role."""
    notes: list[str] = field(default_factory=list)
    """Why a table sent no signal at all (the service not found, the executor's last events): said in the
    report, so a table that exercised nothing explains itself."""

    def describe(self, table: str = "") -> str:
        s = self.spec
        lines = [f"table seed {s.seed}: service {s.service}, scope {s.scope}, reuse {s.reuse} "
                 f"(rerun: {s.rerun(table)})"]
        if self.error:
            lines.append(f"  error: {self.error}")
        lines += [f"  wrong: {w.kind}: {w.detail}" for w in self.wrong]
        lines += [f"  the harness's doing: {w.kind}: {w.detail}" for w in self.foreign]
        lines += [f"  note: {n}" for n in self.notes]
        for d in self.decisions:
            lines.append(f"  {d.step} [{d.mode}] targets {[r.pid for r in d.preview.targets]} spared "
                         f"{[r.pid for r in d.preview.spared]} -> accepted={d.decision.accepted} "
                         f"pids={d.decision.pids}")
        return "\n".join(lines)


class Table:
    """One table: its processes started, the executor run on them, then judged and torn down."""

    @classmethod
    def prepare(cls) -> None:
        """Run once in the tables' namespace before the first table (a variant may patch kimitui there)."""

    def __init__(self, spec: TableSpec, prog: Programs, shared: LocalHost, agent_pid: int, tok: Tokens,
                 forks: asyncio.Lock | None = None) -> None:
        self.spec, self.prog, self.shared, self.agent_pid = spec, prog, shared, agent_pid
        self.tok = tok
        self.forks = forks or asyncio.Lock()
        """Held by whatever makes processes fork on their own (a tree starting, a command run on the agent)
        and around a forced pid reuse, shared by every table: while the pid counter is moved back to take a
        pid, no other process of the namespace forks, so none can take a pid just freed near it (a stale
        main's)."""
        self.rng = random.Random(spec.seed ^ 0x5EED)
        self.procs: list[Proc] = []
        self.events: list[Event] = []
        self.result = TableResult(spec)
        self.main: Proc | None = None
        self.pidfile: Path | None = None
        self.reuse_pending = spec.reuse != "none"
        self.stopped = False

    # --- setup ----------------------------------------------------------------------------------------

    async def setup(self) -> None:
        for leaf in self.spec.loose:
            self._add_loose(leaf)
        for group in self.spec.groups:
            await self._start_group(group)
        if self.spec.tree is not None:
            await self._start_tree(self.spec.tree)
        if self.spec.self_holders:
            for pid, token in ((os.getpid(), 1), (self.agent_pid, 2)):
                st = proc_stat(pid)
                assert st is not None
                leaf = LeafSpec(token, "self", mem={0: 1000.0}, kind="cuda")
                self.procs.append(Proc(leaf, pid, st[0], _cmdline(proc_argv(pid)), proc_exe(pid)))
        if self.spec.reuse == "before":
            await self._reuse_main()
        elif self.spec.reuse == "stale":  # the service's main has exited: its pidfile (or pid:N) names no one
            self.reuse_pending = False
            main = self._main()
            assert main.popen is not None
            if self.pidfile is not None:  # the service ran a while, then exited: a later process with its
                self._date_back_pidfile()  # pid (another table's, by chance) is provably not it
            self.free(main)
            self.result.reuses["stale"] += 1

    def free(self, p: Proc) -> None:
        """End ``p`` (a child of the harness; SIGKILL unless it is dead already) and reap it: its pid is free
        from now on, and the table's events say when (``freed_at``)."""
        assert p.popen is not None
        if p.alive():
            p.harness_killed = True
            p.popen.kill()
        code = p.popen.wait()
        p.status = code
        p.freed_at = len(self.events)

    def _add_loose(self, leaf: LeafSpec, popen: subprocess.Popen[bytes] | None = None,
                   reused_from: str | None = None) -> Proc:
        popen = popen or spawn(self.prog, leaf)
        st = proc_stat(popen.pid)
        assert st is not None, f"{leaf.role} {popen.pid} gone right after its start"
        proc = Proc(leaf, popen.pid, st[0], _cmdline(proc_argv(popen.pid)), proc_exe(popen.pid), popen,
                    reused_from=reused_from)
        self.procs.append(proc)
        return proc

    async def _start_group(self, g: GroupSpec) -> None:
        """Start one group (tests/safety_groups.py) and know each of its processes by role."""
        roles, toks = ROLES[g.kind], g.tokens
        leaves = [LeafSpec(t, r, "group") for t, r in zip(toks, roles, strict=True)]
        holder = leaves[0]
        holder.mem, holder.kind = {g.gpu: g.mib}, "cuda"
        quiet: dict[str, Any] = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL,
                                 "stderr": subprocess.DEVNULL}
        py = sys.executable

        async def found(token: int) -> int:
            await until(lambda: find_token(token), SETUP_TIMEOUT_S, f"sleep {token}", interval=0.002)
            pid = find_token(token)
            assert pid is not None, f"sleep {token} gone right after its start"
            return pid

        def add(leaf: LeafSpec, pid: int, argv: list[str], **kw: Any) -> Proc:
            st = proc_stat(pid)
            assert st is not None, f"{leaf.role} {pid} gone right after its start"
            proc = Proc(leaf, pid, st[0], _cmdline([os.fsencode(a) for a in argv]), proc_exe(pid), **kw)
            self.procs.append(proc)
            return proc

        async with self.forks:
            if g.kind == "tty":
                script = f"( {SLEEP} {toks[1]} & ) ; exec {SLEEP} {toks[0]}"
                launcher = subprocess.Popen([py, "-c", LAUNCH, "tty", DASH, "-c", script], **quiet)
                add(holder, await found(toks[0]), [SLEEP, str(toks[0])], waiter=launcher)
                add(leaves[1], await found(toks[1]), [SLEEP, str(toks[1])])
            elif g.kind == "ns":
                launcher = subprocess.Popen([py, "-c", LAUNCH, "ns", SLEEP, str(toks[0])], **quiet)
                init = await found(toks[0])
                add(holder, init, [SLEEP, str(toks[0])], waiter=launcher)
                stuck = random.Random(f"{self.spec.seed}:{self.spec.groups.index(g)}").random() < 0.5
                # stuck: it ignores SIGTERM, and only the namespace's end kills it
                old = signal.signal(signal.SIGTERM, signal.SIG_IGN) if stuck else None
                try:
                    entered = subprocess.Popen(["nsenter", "-t", str(init), "--pid", "--", SLEEP, str(toks[1])],
                                               **quiet)
                finally:
                    if old is not None:
                        signal.signal(signal.SIGTERM, old)
                add(leaves[1], await found(toks[1]), [SLEEP, str(toks[1])], waiter=entered)
            elif g.kind == "pgrp":
                script = f"( {SLEEP} {toks[2]} & ) ; {SLEEP} {toks[1]} & exec {SLEEP} {toks[0]}"
                launcher = subprocess.Popen([py, "-c", LAUNCH, "pgrp", DASH, "-c", script], **quiet)
                add(holder, await found(toks[0]), [SLEEP, str(toks[0])], waiter=launcher)
                child, helper = await found(toks[1]), await found(toks[2])
                # the group's stopped members (the harness stops them: not a cleanup's); the helper too, as some
                # kernels send an orphaned group's SIGHUP to its stopped members only (docs/vllm.md)
                for member in (child, helper):
                    os.kill(member, signal.SIGSTOP)
                    await until(lambda m=member: _raw_state(m) == "T", SETUP_TIMEOUT_S, "a member to stop",
                                interval=0.002)
                add(leaves[1], child, [SLEEP, str(toks[1])])
                add(leaves[2], helper, [SLEEP, str(toks[2])])
            elif g.kind == "exec_daemon":
                argv = [py, "-c", EXEC_ON_TERM, str(self.prog.daemons["nvidia-persistenced"]), str(toks[0])]
                popen = subprocess.Popen(argv, **quiet)
                await until(lambda: sig_caught(popen.pid, signal.SIGTERM), SETUP_TIMEOUT_S, "the exec handler",
                            interval=0.002)
                add(holder, popen.pid, argv, popen=popen)
            elif g.kind == "lead_exit":
                argv = [py, "-c", LEAD_EXIT, str(toks[0])]
                popen = subprocess.Popen(argv, **quiet)
                await until(lambda: live_thread_state(popen.pid) is not None and _raw_state(popen.pid) == "Z",
                            SETUP_TIMEOUT_S, "the main thread to exit", interval=0.002)
                add(holder, popen.pid, argv, popen=popen)
            else:  # orphans: the owner forks two children, then the harness SIGKILLs it
                script = f"{SLEEP} {toks[1]} & {SLEEP} {toks[2]} & exec {SLEEP} {toks[0]}"
                popen = subprocess.Popen([DASH, "-c", script], **quiet)
                kids = [await found(toks[1]), await found(toks[2])]
                owner = add(holder, await found(toks[0]), [SLEEP, str(toks[0])], popen=popen)
                for leaf, pid in zip(leaves[1:], kids, strict=True):
                    leaf.kind, leaf.handle_gpus = "handle", [g.gpu]
                    add(leaf, pid, [SLEEP, str(leaf.token)], owner=owner)
                self.free(owner)

    async def _start_tree(self, tree: NodeSpec) -> None:
        script = self.prog.scripts / f"t{self.spec.seed}.sh"
        script.write_bytes(tree_script(self.prog, tree))
        expected = {leaf.token: (leaf, parent) for leaf, parent in tree.walk()}
        async with self.forks:  # its nodes fork until every process of it has exec'd its program
            # not a session (or group) leader: a pid that names a live group is not free for reuse when it exits
            popen = subprocess.Popen([DASH, str(script), f"n{tree.leaf.token}"], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            found = await self._discover(popen.pid, expected)
        for token, (leaf, parent) in expected.items():
            pid = found[token]
            st = proc_stat(pid)
            assert st is not None
            proc = Proc(leaf, pid, st[0], _cmdline(proc_argv(pid)), proc_exe(pid), popen if parent is None else None,
                        parent)
            assert proc_uid(pid) == leaf.uid, f"{leaf.role} {pid}: uid {proc_uid(pid)}, wanted {leaf.uid}"
            self.procs.append(proc)
            if parent is None:
                self.main = proc
        assert self.main is not None
        if self.spec.service == "pidfile":
            self.pidfile = self.prog.pidfiles / f"t{self.spec.seed}.pid"
            self.pidfile.write_text(f"{self.main.pid}\n")

    async def _discover(self, root: int, expected: dict[int, tuple[LeafSpec, int | None]]) -> dict[int, int]:
        """token -> pid of every process of the tree, once each one has exec'd its program."""
        want = {tok: os.fsencode(_argv(self.prog, leaf)[0]) for tok, (leaf, _) in expected.items()}
        found: dict[int, int] = {}

        def complete() -> bool:
            found.clear()
            queue: list[tuple[int, int | None]] = [(root, None)]
            while queue:
                pid, parent_token = queue.pop()
                argv = proc_argv(pid)
                token = int(argv[-1]) if len(argv) == 2 and argv[-1].isdigit() else None
                if token in want and argv[0] == want[token] and expected[token][1] == parent_token:
                    found[token] = pid
                queue += [(child, token) for child in proc_children(pid)]
            return len(found) == len(expected)

        await until(complete, SETUP_TIMEOUT_S, f"the tree of table {self.spec.seed} ({len(expected)} processes)",
                    interval=0.002)
        return found

    # --- pid reuse ------------------------------------------------------------------------------------

    def _reuser(self) -> LeafSpec:
        """What takes a reused pid: a bystander, another user's process, or a new GPU job."""
        scope = self.spec.scope or list(range(GPUS))
        pick = self.rng.random()
        if pick < 0.4:
            return LeafSpec(self.tok(), "bystander")
        if pick < 0.6:
            return LeafSpec(self.tok(), "other_user", uid=NOBODY)
        return LeafSpec(self.tok(), "other_holder", mem={self.rng.choice(scope): 1000.0}, kind="cuda")

    async def _reuse(self, victim: Proc) -> Proc:
        """End ``victim`` (a child of the harness), wait a clock tick past its start, and start another
        process with its pid."""
        assert victim.popen is not None
        # the new start time must differ (and follow the pidfile)
        await until(lambda: boot_ticks() > victim.start_time + 2, SETUP_TIMEOUT_S,
                    "a clock tick past the victim's start", interval=0.002)
        async with self.forks:  # no tree forks meanwhile
            return self._take_pid(victim)

    def _take_pid(self, victim: Proc) -> Proc:
        """No await here: the pid is freed and taken again before anything else of the harness runs."""
        self.free(victim)
        leaf = self._reuser()
        popen = spawn_at(self.prog, leaf, victim.pid)
        if popen is None:
            self.result.reuses["missed"] += 1
            raise ReuseMissed(f"pid {victim.pid} taken by another process before the harness could reuse it")
        proc = self._add_loose(leaf, popen, reused_from=victim.role)
        assert proc.pid == victim.pid and proc.start_time > victim.start_time
        self.result.reuses[self.spec.reuse] += 1
        return proc

    async def _reuse_main(self) -> None:
        """A stale pidfile: the service wrote it, exited, and another process took its pid. The file is dated
        back STALE_AGE_S, as if the service had run that long: a pidfile can only be proven stale by its
        mtime against the new process's start, to a few centiseconds, so one reused within that of its
        writing cannot be told from the service (said in the README, not tested)."""
        self.reuse_pending = False
        assert self.main is not None
        self._date_back_pidfile()
        await self._reuse(self.main)

    def _date_back_pidfile(self) -> None:
        assert self.pidfile is not None
        written = time.time() - STALE_AGE_S
        os.utime(self.pidfile, (written, written))

    # --- what the executor sees -----------------------------------------------------------------------

    def sample(self) -> HostSample:
        used = dict.fromkeys(range(GPUS), 0.0)
        procs = []
        for p in self.procs:
            leaf = p.spec
            if p.role == "dead_owner":  # the driver keeps its memory while a child holds its descriptors
                kept = [k.pid for k in self.procs if k.owner is p and k.alive()]
                if kept:
                    for g, mib in leaf.mem.items():
                        used[g] += mib
                    procs.append(ProcSample(pid=p.pid, start_time=p.start_time, gpu_mem_mib=dict(leaf.mem),
                                            kind="exited", visible=False, held_by=kept, flags=["exited"]))
                continue
            if leaf.kind is None:
                continue
            st = proc_stat(p.pid)
            if st is None or st[0] != p.start_time or st[1] in ("Z", "X"):
                continue  # exited: the driver released its memory
            for g, mib in leaf.mem.items():
                used[g] += mib
            procs.append(ProcSample(pid=p.pid, start_time=p.start_time, user="nobody" if leaf.uid else "root",
                                    gpu_mem_mib=dict(leaf.mem), kind=leaf.kind,  # type: ignore[arg-type]
                                    unit=leaf.unit, cmdline=p.cmdline, state=st[1], ppid=st[2],
                                    gpus=sorted(leaf.handle_gpus or leaf.mem), exe=p.exe,
                                    inherits=[p.owner.pid] if p.owner is not None else []))
        gpus = [GpuSample(index=i, uuid=f"GPU-safety-{i}", name="Safety GPU", mem_used_mib=used[i],
                          mem_total_mib=TOTAL_MIB, mem_reserved_mib=RESERVED_MIB) for i in range(GPUS)]
        return HostSample(t=time.time(), host="local", gpus=gpus, procs=procs, agent_pid=self.agent_pid)

    async def latest(self, after: float | None = None, timeout: float = 5.0) -> HostSample:
        """The ProcessView: a sample taken now. Between the graceful and the process step (the first
        sample after the graceful result) it first reuses the service main's pid when the table says so."""
        if self.stopped:
            raise ReuseMissed("a pid the harness meant to reuse went to another process")
        if self.reuse_pending and self.spec.reuse == "between" and self._step_done("graceful"):
            self.reuse_pending = False
            await self._reuse(self._main())
        return self.sample()

    def _main(self) -> Proc:
        assert self.main is not None
        return self.main

    def _step_done(self, step: str) -> bool:
        return any(isinstance(e, StepResult) and e.step == step for e in self.events)

    # --- the operator ---------------------------------------------------------------------------------

    async def consent(self, preview: StepPreview) -> ConsentDecision:
        mode = self.rng.choices(("all", "subset", "spared", "decline", "unshown"), (40, 20, 15, 10, 15))[0]
        targets = [r.pid for r in preview.targets]
        if mode == "decline":
            decision = ConsentDecision(False, None, "safety", "declined")
        elif mode == "all":
            decision = ConsentDecision(True, None, "safety", "as previewed")
        else:
            ticked = [pid for pid in targets if self.rng.random() < 0.6]
            if mode == "spared":
                ticked += [r.pid for r in preview.spared if self.rng.random() < 0.6]
            elif mode == "unshown":
                shown = {r.pid for r in [*preview.targets, *preview.spared]}
                never = [p.pid for p in self.procs if p.pid not in shown] + [1, os.getpid(), self.agent_pid]
                ticked += self.rng.sample(never, min(len(never), self.rng.randint(1, 3)))
            decision = ConsentDecision(True, ticked, "safety", mode)
        if decision.accepted and self.reuse_pending and self.spec.reuse == "consent":
            await self._reuse_in_consent(preview, decision)
        self.result.decisions.append(Decision(preview.step, preview, decision, mode))
        return decision

    async def _reuse_in_consent(self, preview: StepPreview, decision: ConsentDecision) -> None:
        """After the preview, before the signal: a previewed target (a child of the harness) exits and its
        pid is taken by another process, which the operator's tick now names."""
        shown = {(r.pid, r.start_time) for r in preview.targets}
        victims = [p for p in self.procs if p.key in shown and p.popen is not None and p.reused_from is None
                   and p.alive()]
        if not victims:
            return
        self.reuse_pending = False
        victim = self.rng.choice(victims)
        try:
            await self._reuse(victim)
        except ReuseMissed:  # another process has the pid now: the table stops at its next sample
            self.stopped = True
        if decision.pids is not None and victim.pid not in decision.pids:
            decision.pids.append(victim.pid)

    # --- the run ----------------------------------------------------------------------------------------

    def target(self) -> CleanupTarget:
        service = None
        if self.spec.service == "pidfile":
            assert self.pidfile is not None
            service = PidService(pidfile=str(self.pidfile))
        elif self.spec.service == "pid":
            service = PidService(pid=self._main().pid)
        return CleanupTarget(host="safety", service=service, gpus=self.spec.scope, deadlines=DEADLINES,
                             operator="safety")

    async def run(self) -> TableResult:
        try:
            await self.setup()
            protected = {p.pid for p in self.procs if p.role == "protected"}
            host = TableHost(self.shared, protected, self.forks)
            ex = CleanupExecutor(host, self.target(), self, self.consent, publish=self.events.append)
            try:
                await ex.run()
            except ServiceNotFound as exc:
                self.result.notes.append(f"the service was not found: {exc}")
        except ReuseMissed:
            pass  # counted; the table stopped before its next step
        except Exception as exc:  # the table is reported, with its seed; the others go on
            where = traceback.extract_tb(exc.__traceback__)[-1]
            self.result.error = f"{type(exc).__name__}: {exc} (at {Path(where.filename).name}:{where.lineno})"
        finally:
            alive = {p.key for p in self.procs if p.freed_at is None and p.alive()}
            if self.spec.reuse == "stale" and self.main is not None and proc_stat(self.main.pid) is not None:
                self.result.reuses["stale pid taken"] += 1  # by the table's end: the counter let it go
            await self.teardown()
            self.judge(alive)
            if not self.result.sent:
                from kimitui.core.describe import describe

                said = [describe(ev) for ev in self.events[-6:]]
                self.result.notes.append("no signal sent; the executor's last events: "
                                         + " | ".join(x for x in said if x) if said else "no signal, no event")
        return self.result

    async def teardown(self) -> None:
        """Kill what is left (by identity) and reap every process, top down (a node before its children,
        which are then the harness's as the namespace's init), each with its waitpid status. One the harness
        freed itself is reaped already: its (pid, start time) may be another process's by now."""
        mine = [p for p in self.procs if p.role != "self"]
        for p in mine:
            if p.freed_at is None:
                kill_identity(p.pid, p.start_time)
        by_token = {p.spec.token: p for p in self.procs}
        for p in sorted(mine, key=lambda p: _depth(p, by_token)):
            p.status = await reap(p)
        if self.pidfile is not None:
            self.pidfile.unlink(missing_ok=True)

    # --- the oracle -----------------------------------------------------------------------------------

    def holder_at(self, pid: int, start_time: int | None, event: int) -> Proc | None:
        """The table's process a signal to (pid, start time) reached, its event being number ``event``: the
        one with that identity that lived then (the latest started, should the harness have started two in one
        clock tick), or None: the signal reached a process the table did not start, if any."""
        lived = [p for p in self.procs if p.key == (pid, start_time) and p.lived_at(event)]
        return lived[-1] if lived else None

    def judge(self, alive_at_end: set[tuple[int, int]]) -> None:
        """The oracle (the module's docstring): each signal against the preview, the consent and the ground
        truth; each death the harness reaped against the signals sent to that process while it lived. A
        signal that reached no process of the table, and a death no signal of this table explains, wait for
        run_tables: with every table's signals known, the one another table sent is the harness's doing."""
        res = self.result
        res.roles.update(p.label() for p in self.procs)
        previews = {e.step: e for e in self.events if isinstance(e, StepPreview)}
        decisions = {d.step: d.decision for d in res.decisions}
        sent_to: dict[int, set[str]] = {}
        """id() of the process reached -> the signals the events say it was sent."""
        sent_steps: dict[int, set[str]] = {}
        """id() of the process reached -> the steps that sent it a signal."""
        sent_count: dict[int, int] = {}
        for i, e in enumerate(self.events):
            if not isinstance(e, SignalSent):
                continue
            res.outcomes[f"{e.signal} {e.outcome}"] += 1
            if e.outcome in ("error", "unknown"):
                res.odd[f"{e.signal} {e.outcome}: {e.detail}"] += 1
            if e.outcome == "refused":
                res.refused += 1
            if e.outcome not in ("sent", "unknown"):
                continue
            res.sent += 1
            res.signals.add((e.pid, e.start_time, e.signal))
            truth = self.holder_at(e.pid, e.start_time, i)
            if truth is not None:
                sent_to.setdefault(id(truth), set()).add(e.signal)
                sent_steps.setdefault(id(truth), set()).add(e.step)
                if truth.role == "exec_daemon" and sent_count.get(id(truth)):  # it exec'd at its first signal
                    res.wrong.append(Wrong("exec_daemon: signalled after it became a host daemon",
                                           f"{e.signal} to pid {e.pid} in step {e.step}"))
                sent_count[id(truth)] = sent_count.get(id(truth), 0) + 1
            why = self._wrong_signal(e, previews.get(e.step), decisions.get(e.step), truth)
            if why is not None:
                res.wrong.append(why)
            elif truth is None:  # previewed and consented, but no process of the table's had that identity then
                res.foreign.append(Wrong(f"{e.signal} reached a process the table did not start",
                                         f"{e.signal} to pid {e.pid} (start {e.start_time}) in step {e.step}"
                                         + self._freed_note(e.pid, e.start_time)))
        for p in self.procs:
            if p.role == "self" or p.key in alive_at_end:
                continue
            died = signal.Signals(-p.status).name if p.status is not None and p.status < 0 else None
            if p.harness_killed and died == "SIGKILL":
                continue  # the harness's own kill (a stale main, a reuse's victim)
            if died is not None and self._died_with(p, died, sent_steps, decisions):
                res.died_with[f"{p.role} ({died})"] += 1
                continue
            if died is None or died not in sent_to.get(id(p), set()):
                how = f"died of {died}" if died else f"ended with status {p.status}"
                res.unexplained.append((p.pid, p.start_time, died, Wrong(
                    f"{p.label()}: delivered without a signal event", f"pid {p.pid} ({p.cmdline}) {how}; events "
                    f"sent it {sorted(sent_to.get(id(p), set()))}")))
        for e in self.events:
            if isinstance(e, Consent) and e.step not in decisions:
                res.wrong.append(Wrong("consent without the operator", f"step {e.step}: {e}"))

    def _died_with(self, p: Proc, died: str, sent_steps: dict[int, set[str]],
                   decisions: dict[str, ConsentDecision]) -> bool:
        """Whether P died, of the kernel's signal (SIGHUP: a terminal hangup; SIGKILL: its PID namespace ended),
        with a process a step signalled, having been listed in that step's preview as dying with it and
        consented: the service's, or ticked by the operator."""
        for e in self.events:
            if not isinstance(e, StepPreview):
                continue
            row = next((r for r in e.spared if (r.pid, r.start_time) == p.key and r.dies_with is not None), None)
            if row is None or died not in ("SIGHUP", "SIGKILL"):
                continue
            via = [q for q in self.procs if q.pid == row.dies_with and e.step in sent_steps.get(id(q), set())]
            decision = decisions.get(e.step)
            ticked = decision is not None and decision.pids is not None and p.pid in decision.pids
            if via and (ticked or p.role in SERVICE_ROLES):
                return True
        return False

    def _others_consented_before(self, step: str) -> bool:
        """Whether the operator accepted the others step's preview before this step's."""
        for d in self.result.decisions:
            if d.step == step:
                return False
            if d.step == OTHERS_STEP and d.decision.accepted:
                return True
        return False

    def _freed_note(self, pid: int, start_time: int | None) -> str:
        freed = [p for p in self.procs if p.key == (pid, start_time) and p.freed_at is not None]
        if not freed:
            return ""
        return (f"; the table's {freed[-1].label()} with that pid and start time was killed and reaped by the "
                f"harness before it (its event {freed[-1].freed_at}): a taker started in the same clock tick")

    def _wrong_signal(self, e: SignalSent, preview: StepPreview | None, decision: ConsentDecision | None,
                      truth: Proc | None) -> Wrong | None:
        """Why this signal breaks the preview, the consent or the ground truth (``truth``: the table's process
        it reached), or None. One that reached no process of the table's is not judged here: the cleanup
        signalled what the operator consented to; who had the pid is the harness's doing."""
        who = truth.label() if truth else "a process the table did not start"
        where = f"{e.signal} to pid {e.pid} in step {e.step}"
        if preview is None or decision is None:
            return Wrong(f"{who}: signalled with no preview or consent", where)
        target = _row(preview.targets, e.pid)
        optional = _row([r for r in preview.spared if is_optional(r)], e.pid)
        row = target or optional
        if row is None:
            return Wrong(f"{who}: not in the step's preview", where)
        if row.start_time != e.start_time:
            return Wrong(f"{who}: another incarnation than the preview's", f"{where} (previewed start "
                         f"{row.start_time}, signalled {e.start_time})")
        ticked = decision.pids is not None and e.pid in decision.pids
        if not decision.accepted or not (ticked or (decision.pids is None and target is not None)):
            return Wrong(f"{who}: not consented", f"{where}; decision {decision}")
        if truth is None:
            return None
        return _role_refusal(truth, e.step, ticked, self._others_consented_before(e.step), where)


def _row(rows: list[ProcRef], pid: int) -> ProcRef | None:
    return next((r for r in rows if r.pid == pid), None)


def _role_refusal(truth: Proc, step: str, ticked: bool, others_consented: bool, where: str) -> Wrong | None:
    """Why the ground truth says this process must not get this step's signal, or None. ``ticked``: the
    operator named its pid (not only accepted the preview as it was); ``others_consented``: the operator
    accepted the others step before this one (the device step then reaches them too)."""
    if truth.role in SERVICE_ROLES:
        return None
    if truth.role == "other_holder" or truth.role in OTHER_HOLDERS:
        if step == OTHERS_STEP or others_consented:
            return None
        return Wrong(f"{truth.label()}: signalled in step {step} (only {OTHERS_STEP!r} may, or a later step "
                     "once it was consented)", where)
    if truth.role == "monitor" or truth.role in TICK_ONLY:
        return None if ticked else Wrong(f"{truth.label()}: signalled in step {step} without its pid ticked", where)
    return Wrong(f"{truth.label()}: signalled in step {step}", where)


async def reap(p: Proc) -> int | None:
    """The process's exit status (a signal as its negative number), waited for with a deadline; None when
    it is not (or no longer) a child of the harness."""
    status: list[int | None] = []

    def exited() -> bool:
        if p.popen is not None or p.waiter is not None:
            code = (p.popen or p.waiter).poll()  # type: ignore[union-attr]
            if code is not None:
                status.append(code)
        else:
            try:
                pid, raw = os.waitpid(p.pid, os.WNOHANG)
            except ChildProcessError:
                status.append(None)
                return True
            if pid:
                status.append(-os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw))
        return bool(status)

    await until(exited, SETUP_TIMEOUT_S, f"{p.role} {p.pid} reaped", interval=0.001)
    return status[0]


def _depth(p: Proc, by_token: dict[int, Proc]) -> int:
    depth, parent = 0, p.parent
    while parent is not None:
        depth += 1
        parent = by_token[parent].parent
    return depth


# --- many tables ------------------------------------------------------------------------------------------

@dataclass(slots=True)
class Summary:
    tables: int = 0
    sent: int = 0
    refused: int = 0
    wrong: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    reuses: Counter[str] = field(default_factory=Counter)
    roles: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    odd: Counter[str] = field(default_factory=Counter)
    errors: list[TableResult] = field(default_factory=list)
    failing: list[TableResult] = field(default_factory=list)
    elapsed_s: float = 0.0
    foreign: int = 0
    """Signals and deaths across a table's edge: the harness's doing (TableResult.foreign), not the cleanup's."""
    foreign_kinds: Counter[str] = field(default_factory=Counter)
    died_with: Counter[str] = field(default_factory=Counter)
    quiet: list[TableResult] = field(default_factory=list)
    """Tables that sent no signal (their notes say why)."""
    table: str = ""
    """The tables' class as module:name where it is a subclass of ``Table`` (their rerun hint names it)."""

    def add(self, res: TableResult) -> None:
        self.tables += 1
        self.sent += res.sent
        self.refused += res.refused
        self.wrong += len(res.wrong)
        self.kinds.update(w.kind for w in res.wrong)
        self.reuses.update(res.reuses)
        self.roles.update(res.roles)
        self.outcomes.update(res.outcomes)
        self.odd.update(res.odd)
        self.foreign += len(res.foreign)
        self.foreign_kinds.update(w.kind for w in res.foreign)
        self.died_with.update(res.died_with)
        if res.error:
            self.errors.append(res)
        if res.wrong or res.foreign:
            self.failing.append(res)
        elif res.notes:
            self.quiet.append(res)

    def line(self) -> str:
        return (f"{self.tables} tables, {self.sent} signals sent, {self.wrong} wrong"
                + (f", {self.foreign} across a table's edge (the harness's doing)" if self.foreign else ""))

    def report(self, show: int = 3) -> str:
        lines = [f"{self.line()} ({self.elapsed_s:.1f} s; {len(self.errors)} tables in error)",
                 f"  signal outcomes {dict(self.outcomes)}; pid reuses {dict(self.reuses)}",
                 f"  processes {dict(self.roles.most_common())}",
                 f"  died with a signalled target, listed in its preview and consented: {dict(self.died_with)}"]
        lines += [f"  {n} x {detail}" for detail, n in self.odd.most_common()]
        lines += [f"  {n} x {kind}" for kind, n in self.kinds.most_common()]
        lines += [f"  {n} x the harness's doing: {kind}" for kind, n in self.foreign_kinds.most_common()]
        lines += [r.describe(self.table) for r in (self.failing + self.errors + self.quiet)[:show]]
        return "\n".join(lines)


@contextlib.contextmanager
def programs_dir() -> Iterator[Path]:
    """A folder other users can reach (pytest's tmp_path is private to root): the programs live there."""
    root = Path(tempfile.mkdtemp(prefix="kimitui-safety-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def run_tables(count: int, seed: int, concurrency: int = 4, agents: int = 2,
                     table_cls: type[Table] = Table) -> Summary:
    """Generate and run ``count`` tables (seeds seed, seed+1, ...), ``concurrency`` at a time, spread over
    ``agents`` local agents (each answers one request at a time: two use both cores), in a pid namespace of
    their own: a python started there (pid 1, run_in_namespace) runs them and hands the summary back.
    ``table_cls`` is found there by its module and name (a test module's class is imported there); its
    ``prepare()`` runs there first."""
    if os.environ.get(IN_NAMESPACE) == "1" and os.getpid() == 1:
        with programs_dir() as root:
            return await _run_tables(make_programs(root), count, seed, concurrency, agents, table_cls)
    with tempfile.TemporaryDirectory(prefix="kimitui-safety-summary-") as tmp:
        out = Path(tmp) / "summary.pickle"
        argv = [*UNSHARE, sys.executable, "-c", "import sys; from tests.safety_tables import run_in_namespace; "
                "run_in_namespace(sys.argv[1:])", str(count), str(seed), str(concurrency), str(agents),
                f"{table_cls.__module__}:{table_cls.__qualname__}", str(out)]
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        proc = await asyncio.create_subprocess_exec(*argv, cwd=ROOT, stdin=subprocess.DEVNULL,
                                                    env=dict(os.environ, PYTHONPATH=path, **{IN_NAMESPACE: "1"}))
        try:
            code = await proc.wait()
        finally:
            if proc.returncode is None:  # cancelled: unshare --kill-child ends the namespace with it
                proc.kill()
                await proc.wait()
        if code != 0 or not out.exists():
            raise RuntimeError(f"the tables' pid namespace ({' '.join(UNSHARE)}) ended with status {code} "
                               "and no summary (its output above says why)")
        summary = pickle.loads(out.read_bytes())
        assert isinstance(summary, Summary)
        return summary


def run_in_namespace(argv: list[str]) -> None:
    """The harness as pid 1 of the tables' own pid namespace: COUNT SEED CONCURRENCY AGENTS MODULE:CLASS OUT."""
    count, seed, concurrency, agents, cls_name, out = argv
    if os.getpid() != 1 or os.environ.get(IN_NAMESPACE) != "1":
        raise SystemExit("run_in_namespace: not the init of the tables' pid namespace")
    module, _, name = cls_name.partition(":")
    table_cls = importlib.import_module(module)
    for part in name.split("."):
        table_cls = getattr(table_cls, part)
    assert isinstance(table_cls, type) and issubclass(table_cls, Table), cls_name
    table_cls.prepare()
    summary = asyncio.run(run_tables(int(count), int(seed), int(concurrency), int(agents), table_cls))
    Path(out).write_bytes(pickle.dumps(summary))


async def _run_tables(prog: Programs, count: int, seed: int, concurrency: int, agents: int,
                      table_cls: type[Table]) -> Summary:
    hosts = [LocalHost(name=f"local{i}") for i in range(agents)]
    summary = Summary(table="" if table_cls is Table else f"{table_cls.__module__}:{table_cls.__qualname__}")
    results: list[TableResult] = []
    started = time.monotonic()
    set_child_subreaper(True)
    try:
        agent_pids = [(await host.link.connect()).pid for host in hosts]
        gate = asyncio.Semaphore(concurrency)
        forks = asyncio.Lock()
        tok = Tokens(TOKEN_BASE)

        async def one(i: int) -> None:
            async with gate:
                spec = generate(seed + i, tok)
                table = table_cls(spec, prog, hosts[i % agents], agent_pids[i % agents], tok, forks)
                try:
                    res = await asyncio.wait_for(table.run(), TABLE_TIMEOUT_S)
                except TimeoutError:
                    res = table.result
                    res.error = f"did not finish within {TABLE_TIMEOUT_S:g} s"
                results.append(res)

        await asyncio.gather(*(one(i) for i in range(count)))
    finally:
        set_child_subreaper(False)
        for host in hosts:
            await host.close()
    settle(results)
    for res in sorted(results, key=lambda r: r.spec.seed):
        summary.add(res)
    summary.elapsed_s = time.monotonic() - started
    return summary


def settle(results: list[TableResult]) -> None:
    """Each death a table's own signals do not explain: the harness's doing when another table's signal
    explains it (a pid the harness freed went to that table's process), else a wrong."""
    senders: dict[tuple[int, int | None, str], set[int]] = {}
    for n, res in enumerate(results):
        for sent in res.signals:
            senders.setdefault(sent, set()).add(n)
    for n, res in enumerate(results):
        for pid, start_time, died, wrong in res.unexplained:
            if died is not None and senders.get((pid, start_time, died), set()) - {n}:
                res.foreign.append(Wrong(f"{wrong.kind.partition(':')[0]}: killed by another table's {died}",
                                         wrong.detail))
            else:
                res.wrong.append(wrong)
        res.unexplained = []
