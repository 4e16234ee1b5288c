"""GPU cleanup between benchmark phases: plan, preview, consent, guarded signals, verification, audit.

Headless and UI-free (no textual here): the TUI and the CLI drive ``CleanupExecutor`` with a consent
callback. Stdlib only at import, so it also runs from a bare checkout with ``PYTHONPATH=.``.
"""

from kimitui.cleanup.audit import AuditLog, default_audit_path
from kimitui.cleanup.consent import ConsentCallback, ConsentDecision, auto_consent, decline_all, is_optional
from kimitui.cleanup.executor import CleanupExecutor, CleanupReport
from kimitui.cleanup.plan import STEPS, CleanCriteria, CleanupTarget, Deadlines
from kimitui.cleanup.sample_feed import ProcessView, SampleFeed, ViewTimeout
from kimitui.cleanup.services import DockerService, PidService, ServiceManager, SupervisorService, SystemdService

__all__ = [
    "STEPS",
    "AuditLog",
    "CleanCriteria",
    "CleanupExecutor",
    "CleanupReport",
    "CleanupTarget",
    "ConsentCallback",
    "ConsentDecision",
    "Deadlines",
    "DockerService",
    "PidService",
    "ProcessView",
    "SampleFeed",
    "ServiceManager",
    "SupervisorService",
    "SystemdService",
    "ViewTimeout",
    "auto_consent",
    "decline_all",
    "default_audit_path",
    "is_optional",
]
