"""The transition between Phase 1 and Phase 2 (the cleanup escalation: drain, graceful, process, device,
verify, reset) and the restart after Phase 3, each as a phase: its PhaseStart, the executor's steps (each
previewed and consented), its PhaseEnd with the verdict. The one code path for the cleanup CLI, the
dashboard's F and R, and the campaign.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from kimitui.cleanup.audit import AuditLog
from kimitui.cleanup.consent import ConsentCallback
from kimitui.cleanup.executor import CleanupExecutor, CleanupReport
from kimitui.cleanup.plan import CleanupTarget
from kimitui.cleanup.sample_feed import ProcessView, ViewTimeout
from kimitui.cleanup.services import ServiceNotFound
from kimitui.core.events import PhaseEnd, PhaseStart, StepResult
from kimitui.hosts.base import Host
from kimitui.phases.base import Publish, now


@dataclass(slots=True)
class CleanupOutcome:
    clean: bool
    note: str
    """The phase end's note: "clean" or "not clean", and how (last consent -> clean, or what went wrong)."""
    executor: CleanupExecutor
    report: CleanupReport | None = None
    restart: StepResult | None = None
    interrupted: bool = False


DRY_RUN_NOTE = "dry run: nothing signalled"


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
        dry = target.dry_run and not out.interrupted and not note  # previews only: no verdict, no failure
        out.note = DRY_RUN_NOTE if dry else ("clean" if out.clean else "not clean") + (
            f"; {prefix}" if prefix else "") + (f"; {note}" if note else "")
        publish(PhaseEnd(now(), phase="cleanup", ok=out.clean or dry, note=out.note))
    return out
