"""The transition between Phase 1 and Phase 2 (the cleanup escalation: drain, graceful, process, device,
verify, reset) and the restart after Phase 3, each as a phase: its PhaseStart, the executor's steps (each
previewed and consented), its PhaseEnd with the verdict. The one code path for the cleanup CLI, the
dashboard's F and R, and the campaign.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from kimitui.campaign.phases import Publish, now
from kimitui.cleanup.audit import AuditLog
from kimitui.cleanup.consent import ConsentCallback
from kimitui.cleanup.executor import CleanupExecutor, CleanupReport
from kimitui.cleanup.plan import CleanupTarget
from kimitui.cleanup.sample_feed import ProcessView, SampleFeed, ViewTimeout
from kimitui.cleanup.services import ServiceNotFound
from kimitui.cleanup.steps import service_up
from kimitui.core.events import CleanupPlan, PhaseEnd, PhaseStart, StepResult
from kimitui.hosts.base import Host


@dataclass(slots=True)
class CleanupOutcome:
    clean: bool
    note: str
    """The phase end's note: "clean" or "not clean", and how (last consent -> clean, or what went wrong)."""
    executor: CleanupExecutor
    report: CleanupReport | None = None
    restart: StepResult | None = None
    interrupted: bool = False


async def cleanup_phase(host: Host, target: CleanupTarget, view: ProcessView, consent: ConsentCallback,
                        publish: Publish, title: str, audit: AuditLog | None = None, restart: bool = False,
                        note_prefix: Callable[[], str] = lambda: "") -> CleanupOutcome:
    """Free the GPUs (and, with ``restart``, start the service again once they are clean). Cancelling the
    task (Ctrl-C, the dashboard closing) closes the phase as interrupted and raises again."""
    ex = CleanupExecutor(host, target, view, consent, publish=publish, audit=audit)
    publish(PhaseStart(now(), phase="cleanup", title=title))
    out = CleanupOutcome(False, "", ex)
    note = ""
    try:
        out.report = await ex.run()
        out.clean = out.report.clean
        if out.clean and out.report.consent_to_clean_s is not None:
            note = f"last consent -> clean {out.report.consent_to_clean_s:.3f}s"
        if restart and out.clean:
            out.restart = res = await ex.restart()
            out.clean = res.status in ("done", "skipped")
            note = (f"{note}; " if note else "") + f"restart {res.status}: {res.reason}"
        elif restart:
            note = (f"{note}; " if note else "") + "restart not run: the GPUs are not clean"
    except ViewTimeout as exc:
        note = f"telemetry stalled: {exc}"
    except ServiceNotFound as exc:  # gone between the look-up and the plan
        note = str(exc)
    except asyncio.CancelledError:
        out.interrupted, out.clean = True, False
        note = "interrupted"
        raise
    except Exception as exc:  # the run file says what happened; the caller goes on
        note = f"error: {type(exc).__name__}: {exc}"
    finally:
        prefix = note_prefix()
        out.note = ("clean" if out.clean else "not clean") + (f"; {prefix}" if prefix else "") + (
            f"; {note}" if note else "")
        publish(PhaseEnd(now(), phase="cleanup", ok=out.clean, note=out.note))
    return out


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
