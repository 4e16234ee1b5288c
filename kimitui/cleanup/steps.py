"""The escalation's steps. Each one is skipped, with the reason, when what it exists for is done; else it
builds a preview, asks consent, acts only on what was confirmed, and reports a StepResult."""

from __future__ import annotations

import dataclasses
import shlex
import signal as signal_mod
import time
from collections.abc import Awaitable, Callable

from kimitui.cleanup import fate
from kimitui.cleanup.consent import OPTIONAL
from kimitui.cleanup.context import StepContext
from kimitui.cleanup.plan import (
    OTHERS,
    OTHERS_NOT_CONSENTED,
    cuda_holders,
    gpus_in_scope,
    holder_reason,
    out_of_scope_reason,
    proc_gpus,
)
from kimitui.cleanup.reset_prep import Change, prepare
from kimitui.cleanup.safety import Candidate
from kimitui.cleanup.services import PidService, ServiceManager
from kimitui.cleanup.waits import poll_until
from kimitui.core.events import GpuVerdict, HostCommand, HostSample, StepPreview, StepResult, Verification
from kimitui.core.procdisplay import command_gist
from kimitui.hosts.base import Host, HostError, OutcomeUnknown

NO_SERVICE_ACTION = ("no service (none chosen): nothing is stopped gracefully; the others step frees the GPUs "
                     "in scope of whatever holds them, previewed as not the service")


def gpu_list(gpus: list[int]) -> str:
    return ",".join(map(str, gpus)) if gpus else "none"


MONITOR_LEFT = "handle only (an NVML monitor): left alone (the others and device steps may tick it)"


def split_safe(ex: StepContext, cands: list[tuple[Candidate, str]]) -> tuple[list[tuple[Candidate, str]],
                                                                                   list[tuple[Candidate, str]]]:
    targets, spared = [], []
    for c, why in cands:
        refusal = ex.refusal(c)
        if refusal is not None:
            spared.append((c, f"protected: {refusal}"))
        elif (stuck := ex.stuck_state(c)) is not None:
            spared.append((c, f"stuck in state {stuck} after SIGKILL: not retried"))
        else:
            targets.append((c, why))
    return targets, spared


# --- a. graceful stop ---------------------------------------------------------------------------------

async def graceful(ex: StepContext) -> StepResult:
    started = ex.clock.monotonic()
    svc = ex.target.service
    if svc is None:  # chosen on purpose (service "none"): said in the preview, not assumed
        ex.emit(StepPreview(ex.now(), step="graceful", action=NO_SERVICE_ACTION))
        return ex.result("graceful", "skipped", "no service chosen (none): nothing to stop gracefully", started)
    sample = await ex.sample()
    scan = await ex.scan()
    left = await ex.service_left(scan, sample)
    if not left:
        now = ex.service_now
        why = f": {now.why}" if now is not None and not now.pids and now.why else ""
        return ex.result("graceful", "skipped", f"no {svc.label} processes left{why}", started)
    targets, spared = split_safe(ex, left)
    spared += ex.service_reused(scan, sample)
    spared += _monitors(ex, sample, [*left, *spared])
    spared += fate.companion_rows(ex, scan, sample, targets, spared)
    main = next((c for c, _ in left if (c.pid, c.start_time) == ex.main), None)
    if isinstance(svc, PidService):
        if main is None:
            return ex.result("graceful", "skipped", "the main pid identified when the cleanup began has exited: "
                             "nothing to stop gracefully (the process step previews what is left)", started)
        action = f"SIGTERM main pid {main.pid} of {svc.name}, then wait for its {len(left)} processes"
    else:
        action = " ".join(svc.stop_argv() or []) + f", then wait for its {len(left)} processes"
    confirmed = await ex.ask("graceful", action, targets, spared)
    if confirmed is None:
        return ex.declined("graceful", started)
    if not confirmed.procs:
        return ex.result("graceful", "skipped", "nothing confirmed", started)
    if isinstance(svc, PidService) and main is not None and (main.pid, main.start_time) not in confirmed.procs:
        # the stop is the main pid's SIGTERM: unticked, nothing is stopped and there is nothing to wait for
        return ex.result("graceful", "skipped", f"main pid {main.pid} unticked: not signalled, nothing waited "
                         "for (the process step previews what is left)", started)
    d = ex.target.deadlines
    failure = note = ""
    signalled = True
    ex.acted()
    if isinstance(svc, PidService):
        assert main is not None
        outcome = await ex.signal(confirmed, main, signal_mod.SIGTERM)
        if outcome == "unknown":
            note = f"; SIGTERM to main pid {main.pid}: {LOST_NOTE}"
        elif outcome not in ("sent", "gone"):
            said = next((s.detail for s in reversed(ex.signals("graceful")) if s.pid == main.pid), "")
            failure = f"main pid {main.pid} not signalled" + (f": {said}" if said else "")
            signalled = False
    elif blocked := [(c, why) for c in confirmed.procs.values()
                     if (why := fate.refusal(ex, c, confirmed)) is not None]:
        c, why = blocked[0]  # the manager's stop would end them all: nothing is stopped
        return ex.result("graceful", "failed", f"{' '.join(svc.stop_argv() or [])} not run: pid {c.pid} {why}",
                         started)
    else:
        ex.note_stop_issued()
        try:
            res = await svc.stop(ex.host, timeout=d.command_s)
            if not res.ok:
                failure = f"stop failed (rc {res.rc}): {(res.stderr or res.stdout).strip()[:200]}"
        except OutcomeUnknown:
            note = f"; the stop command: {LOST_NOTE}"
        except HostError as exc:
            failure = f"stop failed: {exc}"
    if not signalled:  # nothing was stopped: nothing to wait for
        return ex.result("graceful", "failed", failure, started)
    watched = list(confirmed.procs.values())
    survivors = await ex.wait_gone("graceful", watched, "stop", d.graceful_s, final=False)
    ex.acted()
    if failure:
        return ex.result("graceful", "failed", failure, started)
    unseen = unknown_outcomes(ex, "graceful")
    if unseen:
        return ex.result("graceful", "failed", f"outcome unknown for pid {unseen}: the connection was lost and the "
                         "host was not back in time to look again", started)
    reason = f"{len(survivors)} of {len(watched)} processes left" if survivors else "every service process exited"
    return ex.result("graceful", "done", reason + note, started)


# --- b. process kill ----------------------------------------------------------------------------------

async def process(ex: StepContext) -> StepResult:
    """What is left of the service's processes identified when the cleanup began (the others step asks for
    the rest of the GPUs' holders)."""
    started = ex.clock.monotonic()
    if ex.target.service is None:
        return ex.result("process", "skipped", "no service chosen (none): the others step asks for what holds "
                         "the GPUs", started)
    sample = await ex.sample()
    scan = await ex.scan()
    ex.protect_agent(scan, sample)
    by_pid = {p.pid: p for p in sample.procs}
    cands: list[tuple[Candidate, str]] = []
    elsewhere: list[tuple[Candidate, str]] = []
    for c, why in await ex.service_left(scan, sample):
        p = by_pid.get(c.pid)
        if p is not None and p.gpu_mem_mib and not gpus_in_scope(p, ex.scope):
            # scoped by its NVML memory: a service member whose memory is all outside the scope is spared
            mem = ", ".join(f"{m:.0f} MiB on GPU {i}" for i, m in sorted(p.gpu_mem_mib.items()))
            elsewhere.append((c, f"left of the service, but holds {mem}, outside the scope"))
        else:
            cands.append((c, f"left of the service: {why}"))
    reused = ex.service_reused(scan, sample)
    if not cands:
        return ex.result("process", "skipped", "nothing left of the service's processes identified when the "
                         "cleanup began" + (f" ({len(reused)} pid reused, left alone)" if reused else ""), started)
    targets, spared = split_safe(ex, cands)
    spared += elsewhere + reused
    spared += _monitors(ex, sample, [*cands, *spared])
    spared += fate.companion_rows(ex, scan, sample, targets, spared)
    return await _ask_and_terminate(ex, "process", targets, spared, "processes", started)


# --- b2. the others: on the GPUs, not the service ------------------------------------------------------

def _handle_only(ex: StepContext, sample: HostSample, held: set[int],
                 tickable: bool = True) -> list[tuple[Candidate, str]]:
    """The processes on the GPUs in scope that are no holder: handle-only monitors (tickable) and those whose
    memory is all outside the scope. Not ``tickable`` (the service's steps, which signal none of them): the
    monitors only, shown as left alone."""
    scope = set(ex.scope)
    spared: list[tuple[Candidate, str]] = []
    for p in sample.procs:
        if p.pid in held:
            continue
        outside = out_of_scope_reason(p, scope)
        if outside is not None:
            if tickable:
                spared.append((ex.from_sample(p), outside))
            continue
        if not (proc_gpus(p) & scope) or p.kind != "handle":
            continue
        c = ex.from_sample(p)
        refusal = ex.refusal(c)
        if refusal is not None:
            spared.append((c, f"protected: {refusal}"))
        elif tickable:
            spared.append((c, f"{OPTIONAL}handle only (an NVML monitor): left alone unless ticked"))
        else:
            spared.append((c, MONITOR_LEFT))
    return spared


def _monitors(ex: StepContext, sample: HostSample, listed: list[tuple[Candidate, str]]) -> list[tuple[Candidate, str]]:
    """The handle-only monitors on the GPUs in scope, for a service step's preview (left alone, as the
    cleanup's summary says)."""
    held = {c.pid for c, _ in listed} | {p.pid for p in cuda_holders(sample, ex.scope)}
    return _handle_only(ex, sample, held, tickable=False)


async def others(ex: StepContext) -> StepResult:
    """The processes holding the GPUs in scope that are not the service the operator named (its processes
    identified when the cleanup began): freeing the GPUs may need them stopped, so they are asked for apart,
    under their own consent (``others``)."""
    started = ex.clock.monotonic()
    sample = await ex.sample()
    scan = await ex.scan()
    ex.protect_agent(scan, sample)
    every = cuda_holders(sample, ex.scope)
    cands: list[tuple[Candidate, str]] = []
    dead: list[tuple[Candidate, str]] = []
    for p in every:
        c = ex.from_sample(p)
        if ex.is_member(c):
            continue
        gone = ex.not_live(scan, p)
        if gone is not None:
            dead.append((c, gone))
        else:
            cands.append((c, f"{OTHERS}: {holder_reason(p, ex.scope, sample)}"))
    if not cands:
        return ex.result("others", "skipped", f"no process other than the service holds GPUs {gpu_list(ex.scope)}"
                         + (f" ({len(dead)} exited, memory being released)" if dead else ""), started)
    targets, spared = split_safe(ex, cands)
    spared += dead + _handle_only(ex, sample, {p.pid for p in every})
    spared += fate.companion_rows(ex, scan, sample, targets, spared)
    return await _ask_and_terminate(ex, "others", targets, spared, "processes", started)


# --- c. device kill -----------------------------------------------------------------------------------

async def device(ex: StepContext) -> StepResult:
    """What still holds a CUDA context on the GPUs in scope: the service's processes, and the others only
    when the operator consented to ``others``."""
    started = ex.clock.monotonic()
    sample = await ex.sample()
    scan = await ex.scan()
    ex.protect_agent(scan, sample)
    scope = set(ex.scope)
    every = cuda_holders(sample, ex.scope)
    dead = [(ex.from_sample(p), why) for p in every if (why := ex.not_live(scan, p)) is not None]
    holders = [p for p in every if ex.not_live(scan, p) is None]
    if not holders:
        return ex.result("device", "skipped", f"no live CUDA-context holder left on GPUs {gpu_list(ex.scope)}"
                         + (f" ({len(dead)} exited, memory being released)" if dead else ""), started)
    cands: list[tuple[Candidate, str]] = []
    not_asked: list[tuple[Candidate, str]] = []
    for p in holders:
        c = ex.from_sample(p)
        if ex.is_member(c):
            cands.append((c, f"the service's: {holder_reason(p, scope, sample)}"))
        elif ex.consented("others"):
            given = "if others is consented" if ex.target.dry_run else "others consented"
            cands.append((c, f"{OTHERS} ({given}): {holder_reason(p, scope, sample)}"))
        else:
            not_asked.append((c, f"{OTHERS_NOT_CONSENTED}: {holder_reason(p, scope, sample)}"))
    if not cands:
        return ex.result("device", "skipped", f"no holder of the service left on GPUs {gpu_list(ex.scope)}; "
                         f"{len(not_asked)} {OTHERS}, left alone (others not consented)", started)
    targets, spared = split_safe(ex, cands)
    spared += not_asked + dead + _handle_only(ex, sample, {p.pid for p in every})
    spared += fate.companion_rows(ex, scan, sample, targets, spared)
    return await _ask_and_terminate(ex, "device", targets, spared, "holders", started)


async def _ask_and_terminate(ex: StepContext, step: str, targets: list[tuple[Candidate, str]],
                             spared: list[tuple[Candidate, str]], noun: str,
                             started: float) -> StepResult:
    """The end both kill steps share: preview and consent, SIGTERM then SIGKILL, and the step's result."""
    confirmed = await ex.ask(step, f"SIGTERM, SIGKILL after {ex.target.deadlines.term_grace_s:g}s", targets, spared)
    if confirmed is None:
        return ex.declined(step, started)
    if not confirmed.procs:
        return ex.result(step, "skipped", "nothing confirmed", started)
    stuck = [c for c in await ex.terminate(confirmed) if ex.stuck_state(c) is not None]
    unseen = unknown_outcomes(ex, step)
    if unseen:
        return ex.result(step, "failed", f"outcome unknown for pid {unseen}: the connection was lost and the host "
                         "was not back in time to look again", started)
    if stuck:
        return ex.result(step, "failed", "stuck after SIGKILL: " + ", ".join(
            f"{c.pid} (state {c.state})" for c in stuck), started)
    lost = sum(1 for s in ex.signals(step) if s.outcome == "unknown")
    note = f"; {lost} signal{'s' if lost > 1 else ''}: {LOST_NOTE}" if lost else ""
    refused = {s.pid: s.detail for s in ex.signals(step) if s.outcome == "refused" and s.signal != "-"}
    n = len(confirmed.procs) - len(refused)
    if refused:  # looked at again right before the signal: not signalled (a daemon now, or what dies with it)
        note += "; not signalled: " + "; ".join(f"pid {pid}: {why}" for pid, why in refused.items())
    one = noun[:-2] if noun.endswith("sses") else noun[:-1]  # processes -> process, holders -> holder
    return ex.result(step, "done", f"{n} {noun if n != 1 else one} ended{note}", started)


LOST_NOTE = "outcome unknown (the connection dropped with it in flight; not resent), looked again after the reconnect"


def unknown_outcomes(ex: StepContext, step: str) -> str:
    """The pids of this step whose outcome could not be seen, as a list for a reason ('' when none)."""
    return ", ".join(str(o.pid) for o in ex.outcomes(step) if o.outcome == "unknown")


# --- d. verify ----------------------------------------------------------------------------------------

def judge(ex: StepContext, sample: HostSample, elapsed: float) -> Verification:
    holders = cuda_holders(sample, ex.scope)
    verdicts = []
    by_index = {g.index: g for g in sample.gpus}
    for i in ex.scope:
        g = by_index.get(i)
        on = [p.pid for p in holders if i in proc_gpus(p)]
        if g is None:
            verdicts.append(GpuVerdict(i, None, 0.0, False, on))
            continue
        base = ex.target.clean.baseline(g)
        verdicts.append(GpuVerdict(i, g.mem_used_mib, base, ex.target.clean.gpu_clean(g) and not on, on))
    clean = all(v.clean for v in verdicts)
    dirty = [v.index for v in verdicts if not v.clean]
    left = [(ex.from_sample(p), p) for p in holders]
    detail = "" if clean else f"GPU {gpu_list(dirty)} not clean" + (
        f"; holders {', '.join(_holder_named(ex, c) for c, _ in left)}" if holders else "; no holder left")
    return Verification(ex.now(), clean=clean, gpus=verdicts,
                        holders_left=[ex.ref(c, _left_reason(ex, c)) for c, _ in left],
                        elapsed_s=round(elapsed, 4), detail=detail)


def _left_reason(ex: StepContext, c: Candidate) -> str:
    if ex.is_member(c) or ex.consented("others"):
        return "still holds the GPU"
    return f"still holds the GPU; {OTHERS_NOT_CONSENTED}"


def _holder_named(ex: StepContext, c: Candidate) -> str:
    """A holder left, as the verdict names it: its pid, and for one not the service what it is."""
    if ex.is_member(c) or ex.consented("others"):
        return str(c.pid)
    return f"{c.pid} ({command_gist(c.cmdline)[:60]}: {OTHERS}, others not consented)"


async def verify(ex: StepContext) -> Verification | None:
    started = ex.clock.monotonic()
    if ex.target.dry_run:  # nothing was done: no verdict to give
        ex.result("verify", "skipped", "dry run: nothing was signalled, so nothing to verify", started)
        return None
    last: list[Verification] = []
    after: list[float | None] = [ex.acted_at]

    async def check() -> bool:
        sample = await ex.sample(after=after[0])
        after[0] = ex.clock.monotonic()
        last.append(judge(ex, sample, ex.clock.monotonic() - started))
        return last[-1].clean

    waited = await poll_until(check, ex.target.deadlines.verify_s, ex.target.deadlines.poll_s, ex.clock)
    v = dataclasses.replace(last[-1], t=ex.now(), elapsed_s=round(waited.elapsed_s, 4))
    ex.record_verification(v)
    ex.emit(v)
    ex.result("verify", "done" if v.clean else "failed", v.detail or "every GPU in scope clean", started)
    return v


# --- e. GPU reset -------------------------------------------------------------------------------------

async def reset(ex: StepContext) -> StepResult:
    started = ex.clock.monotonic()
    v = ex.verification
    if ex.target.dry_run:
        return ex.result("reset", "skipped", "dry run: nothing was signalled, so no reset to offer", started)
    if v is None or v.clean:
        return ex.result("reset", "skipped", "GPUs clean: no reset needed", started)
    if v.holders_left:
        return ex.result("reset", "skipped", "not offered: holders left ("
                         + ", ".join(str(h.pid) for h in v.holders_left) + "); a reset would fail", started)
    dirty = [g for g in v.gpus if not g.clean]
    smi = ex.target.nvidia_smi
    prep = await prepare(ex.host, smi, ex.target.systemctl, [g.index for g in dirty], await ex.sample(),
                         ex.target.deadlines.command_s)
    needs = f"read on the host: {'; '.join(prep.read)}. "
    if prep.refusals:
        ex.emit(StepPreview(ex.now(), step="reset", action=f"not offered: {'; '.join(prep.refusals)}. {needs}"))
        return ex.result("reset", "skipped", "not offered: " + "; ".join(prep.refusals), started)
    before = "".join(f"{shlex.join(c.argv)} ({c.purpose}); " for c, _ in prep.before)
    after = ", ".join(shlex.join(r.argv) for _, r in reversed(prep.before))
    action = needs + (f"Before: {before}then " if before else "") + "; ".join(
        f"{smi} --gpu-reset -i {g.index} (GPU {g.index}: "
        + ("memory unreadable" if g.used_mib is None else f"{g.used_mib:.0f} MiB still used, idle {g.baseline_mib:.0f}")
        + ", no process holds it)" for g in dirty) + (
        f"; after, restored even if the reset fails: {after}" if after else "") + ", then verify again"
    confirmed = await ex.ask("reset", action, [], [])
    if confirmed is None:
        return ex.declined("reset", started)
    # the consent may have taken a while: a process that took one of these GPUs since makes a reset fail
    now_held = {p.pid for p in cuda_holders(await ex.sample(), [g.index for g in dirty])}
    if now_held:
        return ex.result("reset", "skipped", "not run: a process holds the GPU again ("
                         + ", ".join(map(str, sorted(now_held))) + ")", started)
    failures: list[str] = []
    ex.acted()
    undo: list[Change] = []
    try:
        for change, restore in prep.before:
            if (err := await run_change(ex, change)):
                failures.append(f"{change.purpose}: {err}; the reset was not run")
                break
            undo.append(restore)
        if not failures:
            failures += await _reset_each(ex, smi, [g.index for g in dirty])
    finally:  # what was changed for the reset is put back, whatever became of it
        for restore in reversed(undo):
            if (err := await run_change(ex, restore)):
                failures.append(f"NOT RESTORED: {restore.purpose}: {err}")
    ex.acted()
    again = await verify(ex)
    if failures or again is None or not again.clean:
        return ex.result("reset", "failed", "; ".join(failures) or (again.detail if again else "not verified"),
                         started)
    return ex.result("reset", "done", f"GPU {gpu_list([g.index for g in dirty])} reset and clean", started)


async def _reset_each(ex: StepContext, smi: str, gpus: list[int]) -> list[str]:
    failures = []
    for i in gpus:
        try:
            res = await ex.host.run([smi, "--gpu-reset", "-i", str(i)], timeout=ex.target.deadlines.command_s)
            if not res.ok:
                failures.append(f"GPU {i}: rc {res.rc}: {one_line(res.stderr or res.stdout)[:120]}")
        except HostError as exc:
            failures.append(f"GPU {i}: {exc}")
    return failures


def one_line(text: str) -> str:
    return " ".join(text.split())


async def run_change(ex: StepContext, change: Change) -> str:
    """Run one of the reset's changes (or restorations) on the host, recorded; '' or why it failed."""
    try:
        res = await ex.host.run(change.argv, timeout=ex.target.deadlines.command_s)
        err = "" if res.ok else f"rc {res.rc}: {one_line(res.stderr or res.stdout)[:120]}"
    except HostError as exc:
        err = str(exc)
    ex.emit(HostCommand(ex.now(), step="reset", argv=list(change.argv), purpose=change.purpose, ok=not err,
                        detail=err))
    return err


# --- f. restart ---------------------------------------------------------------------------------------

async def health_ok(ex: StepContext, url: str) -> bool:
    """GET the health endpoint from the host itself (through its agent): 2xx is up."""
    try:
        status = await ex.host.http_get(url, timeout=2.0)
    except HostError:
        return False
    return status is not None and 200 <= status < 300


ALREADY_RUNNING = "already running"
"""How a restart preview starts when the service is up: starting it again would fail."""
GPUS_HELD = "GPU memory still held"
"""How a restart preview starts when the GPUs in scope still hold memory (a cleanup cut short): a service
started beside the old processes would not get its memory; finish the cleanup first."""


async def service_up(host: Host, svc: ServiceManager) -> tuple[bool, str]:
    """(up, how it was judged). Up is the health endpoint answering 2xx, when the service has one: a main
    process alive whose workers died answers 503 and is not up. Without one, live processes are."""
    url = svc.health_url_on(host)
    if url:
        try:
            status = await host.http_get(url, timeout=2.0)
        except HostError as exc:
            return False, f"{url} cannot be reached ({exc})"
        if status is not None and 200 <= status < 300:
            return True, f"{url} answers {status}"
        return False, f"{url} answers {status}" if status is not None else f"{url} does not answer"
    try:
        active = await svc.is_active(host)
    except HostError as exc:
        return False, f"its processes cannot be looked up ({exc})"
    return active, "it has live processes" if active else "it has no live process"


async def memory_held(ex: StepContext) -> str | None:
    """What still holds memory on the GPUs in scope, from a sample taken now (None: nothing, or no
    telemetry to tell)."""
    try:
        sample = await ex.sample(after=time.monotonic())
    except TimeoutError:  # ViewTimeout: no telemetry (a restart on its own, no view given)
        return None
    scope = ex.target.scope(sample)
    holders = [f"pid {p.pid} {command_gist(p.cmdline)[:40]} ({sum(p.gpu_mem_mib.get(i, 0.0) for i in scope):,.0f} "
               f"MiB)" for p in sample.procs if any(p.gpu_mem_mib.get(i, 0.0) > 0 for i in scope)]
    busy = [g.index for g in sample.gpus if g.index in scope and not ex.target.clean.gpu_clean(g)]
    if not holders and not busy:
        return None
    where = f"GPUs {gpu_list(busy)} are not clean" if busy else "the GPUs in scope"
    return f"{where}" + (f"; held by {', '.join(holders[:3])}" + (f" and {len(holders) - 3} more"
                                                                  if len(holders) > 3 else "") if holders else "")


async def restart(ex: StepContext) -> StepResult:
    started = ex.clock.monotonic()
    svc = ex.target.service
    if svc is None:
        return ex.result("restart", "skipped", "no service in the plan", started)
    start = svc.start_action()
    if start is None:
        return ex.result("restart", "skipped", f"{svc.label}: no start command", started)
    url = svc.health_url_on(ex.host)
    running, how = await service_up(ex.host, svc)
    held = None if running else await memory_held(ex)
    wait = f"then poll {url} until it answers 200" if url else "then wait until it is active"
    if running:
        action = (f"{ALREADY_RUNNING}: {svc.label} is up ({how}), so a start would fail; decline, or free "
                  f"the GPUs first. Confirming tries anyway: {start}, {wait}")
    elif held:
        action = (f"{GPUS_HELD}: {held}: finish the cleanup first (decline, then free the GPUs); a start beside "
                  f"them would not get its memory. Confirming tries anyway: {start}, {wait}")
    else:
        action = f"{svc.label}: {start}, {wait}"
    confirmed = await ex.ask("restart", action, [], [])
    if confirmed is None:
        return ex.declined("restart", started)
    try:
        res = await svc.start(ex.host, timeout=ex.target.deadlines.command_s)
    except HostError as exc:
        return ex.result("restart", "failed", f"start failed: {exc}", started)
    if not res.ok:
        return ex.result("restart", "failed", f"start failed (rc {res.rc}): {(res.stderr or res.stdout).strip()[:200]}",
                         started)

    async def up() -> bool:
        return await health_ok(ex, url) if url else await svc.is_active(ex.host)

    waited = await poll_until(up, ex.target.deadlines.health_s, max(ex.target.deadlines.poll_s, 0.1), ex.clock)
    if not waited.ok:
        return ex.result("restart", "failed", f"not up within the {ex.target.deadlines.health_s:g} s health "
                         "deadline", started)
    # the step's duration is the result's (one figure everywhere): the reason says what, not how long
    return ex.result("restart", "done", f"{url} answered 200" if url else "service active", started)


STEP_FUNCS: dict[str, Callable[[StepContext], Awaitable[object]]] = {
    "graceful": graceful, "process": process, "others": others, "device": device, "verify": verify,
    "reset": reset,
}
