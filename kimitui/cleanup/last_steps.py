"""The escalation's last steps, after verify: the GPU reset (offered only when nothing holds a GPU that is still
not clean; each change it makes, persistence mode and the like, undone after) and the service's restart (skipped
while it is up; previewed with who still holds GPU memory; its health waited for)."""

from __future__ import annotations

import shlex
import time

from kimitui.cleanup.context import StepContext
from kimitui.cleanup.plan import cuda_holders
from kimitui.cleanup.reset_prep import Change, prepare
from kimitui.cleanup.services import ServiceManager
from kimitui.cleanup.steps import gpu_list, verify
from kimitui.cleanup.waits import poll_until
from kimitui.core.events import HostCommand, StepPreview, StepResult
from kimitui.core.procdisplay import command_gist
from kimitui.hosts.base import Host, HostError


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
