"""The escalation's steps. Each one is skipped, with the reason, when what it exists for is done; else it
builds a preview, asks consent, acts only on what was confirmed, and reports a StepResult."""

from __future__ import annotations

import dataclasses
import signal as signal_mod

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
from kimitui.cleanup.safety import Candidate
from kimitui.cleanup.services import PidService
from kimitui.cleanup.waits import poll_until
from kimitui.core.events import GpuVerdict, HostSample, StepPreview, StepResult, Verification
from kimitui.core.procdisplay import command_gist
from kimitui.hosts.base import HostError, OutcomeUnknown

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
