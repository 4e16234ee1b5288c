"""What more than one test module uses, in one place: no test module imports another (tests/
test_import_contracts.py holds it). The areas' own rigs stay in their helper modules (tests/cleanup_rig.py,
campaign_rig.py, sshd.py, faulty_server.py, tui_runs.py ...); waiting for a condition is tests/waiting.py.
No test lives here.

- paths: ``ROOT`` (the clone), ``FIXTURES`` (real captures of a 2 x H200 host);
- the dashboard on a replay: ``BIG``, ``FakeClock``, ``replay_app``, ``status_text``;
- the serving sweep from the dashboard: ``FAST_SERVER``, ``sweep_app``, ``open_dialog``, ``text_of``;
- the cleanup from the dashboard: ``Live``, ``cleanup_app``, ``start_cleanup``, ``modal``;
- a synthetic run and the fold's state compared: ``campaign``, ``comparable``;
- campaigns: ``phases_of``, ``write_campaign``, ``run_kimitui``;
- the cleanup's fixtures: ``start_daemon``, ``leak``, ``VENV_BIN``, ``ToolHost``, ``exercise_hostile``;
- SSH: ``make_host``; the load generator: ``one_request``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kimitui.core.events import (
    CleanupPlan,
    Consent,
    Event,
    GpuSample,
    HostSample,
    LogLine,
    MacroPoint,
    PhaseEnd,
    PhaseStart,
    ProcSample,
    SignalSent,
    StepPreview,
    StepResult,
    Verification,
)
from kimitui.core.replay import Player
from kimitui.core.runfile import RunReader, RunWriter
from kimitui.core.session import Session
from kimitui.core.state import SessionState
from kimitui.hosts.base import CommandResult, Host, HostError
from kimitui.hosts.local import LocalHost
from kimitui.hosts.sim.batching import BatchingModel
from tests.app_probe import ProbedApp
from tests.campaign_rig import SMALL
from tests.waiting import pilot_until

if TYPE_CHECKING:
    from textual.pilot import Pilot

    from kimitui.bench.macro.request import RequestOutcome
    from kimitui.cleanup.plan import Deadlines
    from kimitui.hosts.sim.host import SimHost
    from kimitui.hosts.ssh import SshHost
    from kimitui.tui.app import KimituiApp
    from kimitui.tui.screens.cleanup_consent import ConsentScreen
    from kimitui.tui.screens.macro_dialog import MacroDialog
    from tests.cleanup_rig import Rig
    from tests.cleanup_support import SimDir
    from tests.sshd import SshServer

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "h200x2"
"""Real captures of a 2 x H200 host (see tests/fixtures/README.md)."""


# --- the dashboard on a replay -------------------------------------------------------------------------

BIG = (120, 40)
"""The terminal size the dashboard's tests draw at unless they test a size."""


class FakeClock:
    """The replay's clock, moved by the test (``clock.now += 1.0``): a replay advances only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def replay_app(path: Path, clock: FakeClock | None = None, **kwargs: object) -> ProbedApp:
    """The dashboard replaying the run at PATH on CLOCK (a FakeClock at 0 if none)."""
    session = Session()
    player = Player(RunReader(path), session, clock=clock or FakeClock())
    return ProbedApp(session, player=player, **kwargs)  # type: ignore[arg-type]


def status_text(app: KimituiApp) -> str:
    from kimitui.tui.widgets.status_bar import StatusBar

    return str(app.screen_stack[0].query_one(StatusBar).render())


# --- the serving sweep from the dashboard --------------------------------------------------------------

FAST_SERVER = BatchingModel(base_s=0.01, per_seq_s=0.0002, max_batch=16)
"""About 100 tok/s for one stream, ~1200 at 16: each level of 4x 16-token requests takes ~0.8 s."""


def sweep_app(url: str) -> ProbedApp:
    """The dashboard live on a local host whose OpenAI server is at URL."""
    from kimitui.live.context import LiveContext

    live = LiveContext(LocalHost(name="sim"), "sim", api_url=url, simulated=True)
    return ProbedApp(Session(), host_label="sim", live=live)


def text_of(app: KimituiApp, selector: str) -> str:
    from textual.widgets import Static

    return str(app.screen_stack[0].query_one(selector, Static).render())


async def open_dialog(app: KimituiApp, pilot: Pilot[None], **values: str) -> MacroDialog:
    """M's sweep dialog, its fields (by id) set to VALUES."""
    from textual.widgets import Input

    from kimitui.tui.screens.macro_dialog import MacroDialog

    await pilot.press("M")
    await pilot_until(pilot, lambda: isinstance(app.screen, MacroDialog), "the sweep dialog")
    dialog = app.screen
    assert isinstance(dialog, MacroDialog)
    for key, value in values.items():
        dialog.query_one(f"#{key}", Input).value = value
    return dialog


# --- the cleanup from the dashboard --------------------------------------------------------------------

@dataclass
class Live:
    app: KimituiApp
    pilot: Pilot[None]
    host: SimHost
    session: Session
    run_path: Path

    def events(self) -> list[Event]:
        return list(RunReader(self.run_path).events())

    def text(self, widget_id: str) -> str:
        return str(self.app.query_one(f"#{widget_id}").render())


@contextlib.asynccontextmanager
async def cleanup_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      deadlines: Deadlines | None = None) -> AsyncIterator[Live]:
    """The dashboard on a fresh SimHost (2 GPUs, the worker on GPU 1 ignores SIGTERM, an NVML-only monitor),
    its telemetry flowing and the service loaded; the audit log in tmp_path; ``deadlines`` replaces the
    demo's (3 s graceful, 2 s SIGTERM grace, 10 s verify)."""
    from kimitui.cleanup.plan import Deadlines
    from kimitui.hosts.sim.host import SimHost
    from kimitui.hosts.telemetry import TelemetrySource
    from kimitui.live.context import LiveContext
    from kimitui.tui.controllers import cleanup as cleanup_controller

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    if deadlines is not None:
        monkeypatch.setattr(cleanup_controller, "deadlines_for", lambda live: Deadlines(**{
            f: getattr(deadlines, f) for f in Deadlines.__dataclass_fields__}))
    async with SimHost(gpus=2, stuck_workers=1, nvml_monitor=True, load_time=0.05) as host:
        source = TelemetrySource(host, interval=0.1, sim_dir=host.sim_dir, dev_prefix=host.dev_prefix)
        run_path = tmp_path / "run.jsonl"
        session = Session(RunWriter(run_path, host=host.name))
        live = LiveContext(host, "sim (2 simulated GPUs)", default_service="sim:vllm", simulated=True)
        app = ProbedApp(session, host_label=live.label, sources=[source], run_path=run_path, live=live)
        try:
            async with app.run_test(size=BIG) as pilot:
                lv = Live(app, pilot, host, session, run_path)
                assert host.monitor_proc is not None
                want = {p.pid for p in host.worker_holders().values()} | {host.monitor_proc.pid}
                await pilot_until(pilot, lambda: want <= {p.pid for p in session.state.procs},
                                  "the workers and the monitor in the telemetry")
                yield lv
        finally:
            source.stop()
            session.close()


async def start_cleanup(lv: Live) -> None:
    """F, the setup dialog's defaults (the sim's service, every GPU) accepted: the cleanup runs."""
    from textual.widgets import Input, TabbedContent

    from kimitui.tui.screens.cleanup_dialog import CleanupSetupScreen

    await lv.pilot.press("F")
    await pilot_until(lv.pilot, lambda: isinstance(lv.app.screen, CleanupSetupScreen), "the setup dialog")
    service = lv.app.screen.query_one("#setup-service", Input)
    assert service.value == "sim:vllm"
    assert lv.app.screen.query_one("#setup-gpus", Input).value == "all"
    await lv.pilot.press("enter")
    await pilot_until(lv.pilot, lambda: lv.app.cleanup.current is not None, "the cleanup worker")
    assert lv.app.query_one("#views", TabbedContent).active == "cleanup"


async def modal(lv: Live, step: str) -> ConsentScreen:
    """The consent modal for ``step`` once it is up."""
    from kimitui.tui.screens.cleanup_consent import ConsentScreen

    def up() -> bool:
        screen = lv.app.screen
        return isinstance(screen, ConsentScreen) and screen.preview.step == step and screen.is_attached

    await pilot_until(lv.pilot, up, f"the {step} consent modal")
    screen = lv.app.screen
    assert isinstance(screen, ConsentScreen)
    return screen


# --- a synthetic run, and the fold's state compared ----------------------------------------------------

def campaign(samples: int = 600) -> list:
    """A synthetic run: samples at 4 Hz with phases and a cleanup in the middle."""
    events: list = []
    t0 = 1_000_000.0
    for i in range(samples):
        t = t0 + i * 0.25
        used = 90000.0 if i < samples // 2 else 0.0
        procs = [ProcSample(pid=100 + g, start_time=5000 + g, user="vllm", gpu_mem_mib={g: used},
                            kind="cuda", unit="vllm.service", cmdline=f"worker {g}", gpus=[g])
                 for g in range(8)] if used else []
        events.append(HostSample(t=t, host="sim", seq=i,
                                 gpus=[GpuSample(g, f"GPU-{g}", "RTX", mem_used_mib=used + g,
                                                 mem_total_mib=97887) for g in range(8)],
                                 procs=procs))
        if i == 10:
            events.append(PhaseStart(t=t + 0.01, phase="macro", title="serving sweep"))
        if i == 100:
            events.append(MacroPoint(t=t + 0.01, concurrency=1, metrics={"output_throughput": 50.0}))
            events.append(MacroPoint(t=t + 0.02, concurrency=128, metrics={"output_throughput": 1536.0}))
            events.append(PhaseEnd(t=t + 0.03, phase="macro"))
        if i == samples // 2 - 2:
            events += [
                PhaseStart(t=t + 0.01, phase="cleanup"),
                CleanupPlan(t=t + 0.02, service="vllm.service", manager="systemd", gpus=list(range(8)),
                            steps=["graceful", "verify"]),
                StepPreview(t=t + 0.03, step="graceful"),
                Consent(t=t + 0.04, step="graceful", accepted=True, operator="op", pids=[100]),
                SignalSent(t=t + 0.05, step="graceful", pid=100, start_time=5000, signal="SIGTERM"),
                StepResult(t=t + 0.2, step="graceful", status="done", elapsed_s=0.16),
            ]
        if i == samples // 2 + 1:
            events += [Verification(t=t + 0.01, clean=True, elapsed_s=0.1), PhaseEnd(t=t + 0.02, phase="cleanup")]
        if i % 50 == 0:
            events.append(LogLine(t=t + 0.001, message=f"tick {i}"))
    return events


def comparable(state: SessionState) -> tuple:
    """What the dashboard shows of a fold's state, as one value two folds can be compared by."""
    return (
        state.gpus, state.procs, {k: list(v) for k, v in state.mem_history.items()}, state.phases,
        [(c.plan, c.steps, c.verification) for c in state.cleanups], state.macro_by_level, list(state.log),
        state.clock, state.sample_seq,
    )


# --- campaigns -----------------------------------------------------------------------------------------

CLI_WAIT_S = 120.0
"""How long one ``kimitui`` command of the campaign tests may run before it counts as hung."""


def phases_of(events: list[Event]) -> list[tuple[str, str]]:
    """The phases of a run in order, each ("phase", "start") then ("phase", "ok" or "not ok")."""
    out = []
    for e in events:
        if isinstance(e, PhaseStart):
            out.append((e.phase, "start"))
        elif isinstance(e, PhaseEnd):
            out.append((e.phase, "ok" if e.ok else "not ok"))
    return out


def write_campaign(tmp_path: Path, text: str = SMALL, **replace: str) -> Path:
    """tmp_path/campaign.toml: TEXT with each key of REPLACE (which must be in it) replaced by its value."""
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "campaign.toml"
    path.write_text(text)
    return path


def cli_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a ``kimitui`` command: its data (runs, audit) under tmp_path, this clone's code."""
    return {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "PYTHONPATH": str(ROOT)}


def run_kimitui(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``kimitui ARGS`` run to its end in tmp_path (cli_env)."""
    return subprocess.run([sys.executable, "-m", "kimitui", *args], capture_output=True, text=True,
                          env=cli_env(tmp_path), timeout=CLI_WAIT_S, cwd=tmp_path)


# --- the cleanup's fixtures ----------------------------------------------------------------------------

VENV_BIN = Path(sys.executable).parent
"""Where the venv's tools are (supervisord, supervisorctl)."""


def start_daemon(sim: SimDir, tmp: Path, name: str = "nvidia-persistenced", mem: dict[int, float] | None = None) -> int:
    """A real process whose executable is TMP/root/usr/bin/NAME (a copy, not a symlink: /proc/PID/exe
    resolves links) holding a handle on every simulated GPU, as the real persistence daemon does, and
    optionally driver memory."""
    from tests.cleanup_support import start_time

    exe = tmp / "root" / "usr" / "bin" / name
    exe.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(shutil.which("sleep") or "/bin/sleep", exe)
    fds = [os.open(p, os.O_RDWR) for p in sorted((sim.path / "dev").iterdir())]
    try:
        proc = subprocess.Popen([str(exe), "infinity"], pass_fds=fds, stdin=subprocess.DEVNULL)
    finally:
        for fd in fds:
            os.close(fd)
    st = start_time(proc.pid)
    (sim.path / "spawned" / str(proc.pid)).write_text(str(st))
    if mem:
        (sim.path / "holders" / f"{proc.pid}.json").write_text(json.dumps(
            {"pid": proc.pid, "start_time": st, "mem_mib": {str(k): v for k, v in mem.items()}}))
    return proc.pid


async def leak(rig: Rig, sim: SimDir, mib: dict[int, float]) -> None:
    """Memory the simulated driver counts with no holder; returns once the agent reports it."""
    from tests.cleanup_rig import sample_where

    (sim.path / "leaked.json").write_text(json.dumps({str(k): v for k, v in mib.items()}))

    def reported(s: HostSample) -> bool:
        used = {g.index: g.mem_used_mib or 0.0 for g in s.gpus}
        return all(used.get(i, 0.0) >= m for i, m in mib.items())

    await sample_where(rig.feed, reported, f"the agent to report the leaked memory {mib}")


class ToolHost(LocalHost):
    """A local host where systemctl/docker answer as a real one would (no systemd or docker daemon here):
    a reply is the tool's stdout (exit 0) or its whole CommandResult; every other command, file read and
    signal is real."""

    def __init__(self, replies: dict[str, str | CommandResult]) -> None:
        super().__init__("tools")
        self.replies = replies
        self.calls: list[list[str]] = []

    async def run(self, argv: list[str], *, timeout: float | None = 30.0,
                  stdin: bytes | None = None) -> CommandResult:
        self.calls.append(argv)
        if argv[0] in ("systemctl", "docker"):
            reply = self.replies.get(argv[1], "")
            return reply if isinstance(reply, CommandResult) else CommandResult(0, reply, "")
        return await super().run(argv, timeout=timeout, stdin=stdin)


def hostile_names(marker: Path) -> list[str]:
    """Service names that would touch MARKER if any tool passed them through a shell or read them as options."""
    return [f"x; touch {marker}", f"$(touch {marker})", f"`touch {marker}`", f"x' ; touch {marker}; '",
            f"x\" ; touch {marker}; \"", f"--help; touch {marker}", f"x\ntouch {marker}"]


async def exercise_hostile(host: Host, marker: Path, supervisor_conf: str | None = None,
                           names: int = 99) -> list[str]:
    """Every manager's stop, start and lookup with every hostile name; returns what the tools said."""
    from kimitui.cleanup import DockerService, PidService, ServiceManager, SupervisorService, SystemdService

    calls = []
    for i, name in enumerate(hostile_names(marker)[:names]):
        managers: list[ServiceManager] = [SystemdService(name), DockerService(name),
                                          PidService(pidfile=name, start=["true", name])]
        if i < 3:  # supervisorctl costs 0.3 s a call: three names are enough to show it quoted
            managers.append(SupervisorService(name, conf=supervisor_conf,
                                              supervisorctl=str(VENV_BIN / "supervisorctl")))
        for svc in managers:
            assert name in (svc.stop_argv() or []) + (svc.start_argv() or []) or svc.kind == "pidfile"
            for action in (svc.processes, svc.start, *([svc.stop] if svc.stop_argv() else [])):
                calls.append(_attempt(svc.kind, action, host))
    said = await asyncio.gather(*calls)
    return list(said)


async def _attempt(kind: str, action: object, host: Host) -> str:
    try:
        return f"{kind}: {await action(host)}"  # type: ignore[operator]
    except HostError as exc:
        return f"{kind}: {exc}"


# --- SSH, the load generator ---------------------------------------------------------------------------

def make_host(server: SshServer, **kw: object) -> SshHost:
    """An SshHost on the test's sshd (its key, its known_hosts, no ~/.ssh/config)."""
    from kimitui.hosts.ssh import SshHost

    return SshHost(server.target, known_hosts=str(server.known_hosts), client_keys=[str(server.client_key)],
                   config_paths=[], **kw)  # type: ignore[arg-type]


async def one_request(client: str, url: str, body: bytes, est: int = 3, chat: bool = False,
                      total_s: float = 10) -> RequestOutcome:
    """One streamed request to URL by CLIENT ("lean": the load generator's own; "httpx")."""
    import httpx

    from kimitui.bench.macro.http_stream import LeanClient
    from kimitui.bench.macro.request import stream_request

    if client == "lean":
        lean = LeanClient(url)
        try:
            return await lean.stream(body, est, chat, time.perf_counter(), total_s)
        finally:
            lean.close()
    async with httpx.AsyncClient() as hc:
        return await stream_request(hc, url, body, est, chat, time.perf_counter(), total_s)


@contextlib.contextmanager
def sim_server_thread(batching: BatchingModel) -> Iterator[str]:
    """A simulated OpenAI server on an event loop of its own thread, for a command that runs its own loop
    (``asyncio.run``): its URL while the block runs."""
    import threading

    from kimitui.hosts.sim.openai_server import SimOpenAIServer

    started = threading.Event()
    box: dict[str, object] = {}
    loop = asyncio.new_event_loop()

    async def main() -> None:
        async with SimOpenAIServer(batching=batching) as srv:
            box["url"], box["stop"] = srv.url, asyncio.Event()
            started.set()
            await box["stop"].wait()  # type: ignore[attr-defined]

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(10), "the simulated server did not start in 10 s"
    try:
        yield str(box["url"])
    finally:
        loop.call_soon_threadsafe(box["stop"].set)  # type: ignore[attr-defined]
        thread.join(10)
