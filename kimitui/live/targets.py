"""Targets: ``local``, ``demo`` or ``ssh://[user@]host[:port]`` (or an ~/.ssh/config alias) turned into an
opened host for any command, and the recorded session every live command writes.

No UI here, and no knowledge of the simulated host beyond starting it for ``demo``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kimitui.core.printable import printable
from kimitui.core.session import Session, recorded_session
from kimitui.hosts.base import Host, HostError
from kimitui.live.process_clock import mark

if TYPE_CHECKING:
    from kimitui.hosts.sim.layout import GpuFaults


class TargetError(Exception):
    """A target that cannot be used: printed as one line."""


class ProbeFailed(TargetError):
    """The host answered, but cannot run the agent or has no NVIDIA driver (the probe's one-line reason)."""


DEMO_STRAY_ENV = "KIMITUI_DEMO_STRAY_GPU"
"""Set to a GPU index, the demo also runs a stray CUDA context there that is not the service's (a forgotten
notebook): the cleanup's others group, asked for apart (``--yes ...,others``)."""


DEMO_ORPHANS_ENV = "KIMITUI_DEMO_ORPHANS"
"""Set to a GPU index, the demo also runs there a holder of 4,096 MiB that forks two children (they inherit its
device files, as DataLoader workers do) and is then SIGKILLed: the driver keeps its memory under its dead pid
while they live (what the others step frees)."""


def _demo_gpu(env: str, gpus: int) -> int | None:
    text = os.environ.get(env, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) >= gpus:
        raise TargetError(f"{env}={text!r}: a GPU index of the demo, 0 to {gpus - 1}")
    return int(text)


def demo_stray(gpus: int) -> int | bool:
    """The GPU of the demo's stray holder (``DEMO_STRAY_ENV``), False when there is none."""
    gpu = _demo_gpu(DEMO_STRAY_ENV, gpus)
    return False if gpu is None else gpu


def demo_orphans(gpus: int) -> int | None:
    """The GPU of the demo's exited holder kept by its children (``DEMO_ORPHANS_ENV``), None when there is none."""
    return _demo_gpu(DEMO_ORPHANS_ENV, gpus)


@dataclass(frozen=True, slots=True)
class TargetFacts:
    """What a target says of itself: from its name alone before it is opened (``target_facts``: the demo is
    simulated and names its own service), completed once it is (the simulated host's server and tools).
    Commands check their arguments against it, then read the opened target's."""

    target: str
    simulated: bool = False
    service: str | None = None
    """A service spec (``sim:vllm``) the target names for itself; None: the operator names it."""
    api_url: str | None = None
    """The simulated host's OpenAI-compatible server."""
    nvidia_smi: str | None = None
    """The host's nvidia-smi where it is not the one on PATH (the simulated host's stand-in)."""
    systemctl: str | None = None

    def recorded(self) -> dict[str, Any]:
        """The run header's ``meta`` keys, those set only (as runs have always recorded them)."""
        keys = ("target", "simulated", "service", "api_url", "nvidia_smi", "systemctl")
        return {k: getattr(self, k) for k in keys if getattr(self, k) not in (None, False)}


@dataclass(frozen=True, slots=True)
class OpenedTarget:
    """A target opened for a command: its host, how it is named on screen, what it says of itself, and where
    the simulated driver keeps its files (the telemetry and the micro workers read them there)."""

    host: Host
    label: str
    facts: TargetFacts
    sim_dir: str | None = None
    dev_prefix: str | None = None

    @property
    def telemetry_args(self) -> dict[str, Any]:
        """``TelemetrySource``'s keyword arguments for this target (a simulated host's folder and devices)."""
        return {k: v for k, v in (("sim_dir", self.sim_dir), ("dev_prefix", self.dev_prefix)) if v is not None}


def target_facts(target: str) -> TargetFacts:
    """What a target's name alone tells of it: the demo is simulated and names its own service."""
    if target == "demo":
        return TargetFacts("demo", simulated=True, service="sim:vllm")
    return TargetFacts(target)


def check_interval(value: float) -> float:
    if not 0.1 <= value <= 10:
        raise TargetError(f"--interval {value} is out of range (0.1 to 10 seconds)")
    return value


@contextlib.asynccontextmanager
async def open_target(target: str, *, accept_new_host_key: bool = False, gpus: int = 8,
                      check: bool = True, remote_python: str | None = None, engine: str = "sim",
                      engine_python: str | None = None, reasoning_tokens: int | None = None,
                      gpu_faults: GpuFaults | None = None) -> AsyncIterator[OpenedTarget]:
    """A host for ``local``, ``demo`` or an SSH target; ``check`` makes sure it has a driver first.
    ``remote_python`` is the interpreter that runs the agent on an SSH host (default python3). The demo's
    ``engine``: its own simulated vLLM (``sim``, thinking ``reasoning_tokens`` before each chat answer) or a
    real one (``vllm``, run by ``engine_python``); ``gpu_faults``: what its driver reports wrong from the start."""
    from kimitui.hosts.telemetry import probe_host

    if target == "demo":
        from kimitui.hosts.sim.host import SimHost
        from kimitui.hosts.sim.quirks import DEMO_REASONING_TOKENS, EngineQuirks

        stray, orphans = demo_stray(gpus), demo_orphans(gpus)
        real = engine != "sim"
        print(f"starting the simulated {gpus}-GPU host{' with a real vLLM' if real else ''} ...", file=sys.stderr)
        extra: dict[str, Any] = ({"engine": engine, "engine_python": engine_python, "stuck_workers": 0} if real
                                 else {"quirks": EngineQuirks(reasoning_tokens=DEMO_REASONING_TOKENS
                                                              if reasoning_tokens is None else reasoning_tokens)})
        sim = SimHost(gpus=gpus, name="demo", stray_holder=stray, orphans_gpu=orphans, gpu_faults=gpu_faults, **extra)
        try:
            try:
                await sim.start()
            except (HostError, RuntimeError) as exc:
                if not real:
                    raise
                raise TargetError(f"the demo's vLLM did not start: {exc}") from None
            print(f"simulated host ready: {sim.sim_dir}, OpenAI API at {sim.api_url}", file=sys.stderr)
            facts = dataclasses.replace(target_facts("demo"), api_url=sim.api_url, nvidia_smi=sim.nvidia_smi,
                                        systemctl=sim.systemctl)
            label = f"demo ({gpus} simulated GPUs{', a real vLLM' if real else ''})"
            yield OpenedTarget(sim, label, facts, sim_dir=sim.sim_dir, dev_prefix=sim.dev_prefix)
        finally:
            await sim.close()
        return
    host: Host
    if target == "local":
        from kimitui.hosts.local import LocalHost

        host = LocalHost(name=socket.gethostname())
    else:
        from kimitui.hosts.ssh import SshHost

        try:
            host = SshHost(target, accept_new_host_key=accept_new_host_key, python=remote_python or "python3")
        except ValueError as exc:
            raise TargetError(str(exc)) from None
    try:
        if check:
            mark("probing")
            problem = await probe_host(host)
            mark("probed")
            if problem is not None:
                raise ProbeFailed(problem)
        yield OpenedTarget(host, host.name, target_facts(target))
    except HostError as exc:
        raise TargetError(str(exc)) from None
    finally:
        await host.close()


async def host_gpus(opened: OpenedTarget, interval: float = 0.5, timeout: float = 30.0) -> list[int]:
    """The GPU indexes of the host's first telemetry sample, taken before anything is recorded (a command
    checks its ``--gpus`` against them). The stream is stopped after it; the command's own starts afresh."""
    from kimitui.core.events import ConnectionState, HostSample
    from kimitui.hosts.telemetry import TelemetrySource

    source = TelemetrySource(opened.host, interval, **opened.telemetry_args)
    events = source.events()
    found: list[int] | None = None

    async def first() -> None:
        nonlocal found
        async for ev in events:
            if isinstance(ev, HostSample) and found is None:
                found = sorted(g.index for g in ev.gpus)
                source.stop()  # the stream ends at its next line: the agent is told to stop sampling
            elif isinstance(ev, ConnectionState) and ev.state == "failed":
                raise TargetError(ev.detail or f"{opened.host.name}: no telemetry")

    try:
        await asyncio.wait_for(first(), timeout)
    except TimeoutError:
        if found is None:
            raise TargetError(f"{opened.host.name}: no telemetry sample within {timeout:g}s") from None
    finally:
        source.stop()
        await events.aclose()
    assert found is not None
    return found


def record_session(host: str, meta: dict[str, Any]) -> Session:
    """A session recorded to a new run file, its path said on stderr."""
    session = recorded_session(host, meta=meta)
    assert session.recorder is not None
    print(f"recording this session to {session.recorder.path}", file=sys.stderr)
    return session


def new_session(opened: OpenedTarget, command: str) -> Session:
    return record_session(opened.host.name, {"command": command, **opened.facts.recorded()})


def run_command(coro_factory: Callable[[], Any]) -> int:
    """Run a command's coroutine; SIGTERM ends it like Ctrl-C, tearing down what it started."""

    async def main() -> int:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        if task is not None:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signal.SIGTERM, task.cancel)
        try:
            return await coro_factory()
        except TargetError as exc:
            print(f"kimitui: {printable(str(exc))}", file=sys.stderr)
            return 2
        except asyncio.CancelledError:
            return 130

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        return 130


