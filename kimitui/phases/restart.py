"""After Phase 3: the service started again (the cleanup's step f on its own), its health endpoint polled."""

from __future__ import annotations

import asyncio

from kimitui.cleanup.audit import AuditLog
from kimitui.cleanup.consent import ConsentCallback
from kimitui.cleanup.executor import CleanupExecutor
from kimitui.cleanup.last_steps import service_up
from kimitui.cleanup.plan import CleanupTarget
from kimitui.cleanup.sample_feed import ProcessView, SampleFeed
from kimitui.core.events import CleanupPlan, PhaseEnd, PhaseStart, StepResult
from kimitui.hosts.base import Host
from kimitui.phases.base import Publish, now


async def restart_phase(host: Host, target: CleanupTarget, consent: ConsentCallback, publish: Publish, title: str,
                        audit: AuditLog | None = None, plan_first: bool = False, gpus: list[int] | None = None,
                        skip_if_running: bool = False, view: ProcessView | None = None
                        ) -> tuple[StepResult | None, str]:
    """Step f on its own: preview (service, start command, health URL), consent, start, poll the health
    endpoint. ``plan_first``: publish a plan of its own first (the cleanup panel follows the latest plan).
    ``skip_if_running``: a service already up (its health endpoint answers 2xx) is not started again (the
    phase ends ok, skipped). ``view``: the host's telemetry, so the preview can say what still holds GPU
    memory. Returns the step's result and the phase's note."""
    svc = target.service
    ex = CleanupExecutor(host, target, view or SampleFeed(), consent, publish=publish, audit=audit)
    if plan_first and svc is not None:
        publish(CleanupPlan(now(), host=target.host or host.name, service=svc.name, manager=svc.kind,
                            gpus=list(gpus or []), steps=["restart"], clean_threshold_mib=target.clean.threshold_mib))
    publish(PhaseStart(now(), phase="restart", title=title))
    result: StepResult | None = None
    note = ""
    running = False
    try:
        how = ""
        if skip_if_running and svc is not None:
            running, how = await service_up(host, svc)
        if running and svc is not None:
            result = ex.result("restart", "skipped", f"{svc.label} is already running ({how}): not started again",
                               ex.clock.monotonic())
        else:
            result = await ex.restart()
        note = f"{result.status}: {result.reason}"
    except asyncio.CancelledError:
        note = "interrupted"
        raise
    except Exception as exc:
        note = f"error: {type(exc).__name__}: {exc}"
    finally:
        ok = result is not None and (result.status == "done" or running)
        publish(PhaseEnd(now(), phase="restart", ok=ok, note=note))
    return result, note
