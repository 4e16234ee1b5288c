"""Setting a cleanup up from an operator's words: service specs, GPU lists, the demo's deadlines, the
target. Shared by the headless ``kimitui cleanup`` and the dashboard's "Free the GPUs" dialog (no UI here).
"""

from __future__ import annotations

from kimitui.cleanup.plan import CleanCriteria, CleanupTarget, Deadlines
from kimitui.cleanup.services import (
    DockerService,
    PidService,
    ServiceManager,
    SimService,
    SupervisorService,
    SystemdService,
)

DEMO_DEADLINES = {"graceful_s": 3.0, "term_grace_s": 2.0}
"""The simulated host's service stops in milliseconds; its stuck workers never do."""

SERVICE_FORMS = "systemd:UNIT, docker:NAME, supervisor:PROGRAM[@CONF], pidfile:PATH, pid:N, sim:NAME or none"
NO_SERVICE = "none"
"""The service spec that chooses no service: free the GPUs of whatever holds them (previewed as such)."""
CHOOSE_SERVICE = (f"choose the service to stop: {SERVICE_FORMS} (none: no service, free the GPUs of whatever "
                  "holds them)")


class UsageError(Exception):
    """A bad option value: one line (exit status 2 on the command line, a message in the dialog)."""


def parse_service(spec: str, health_url: str | None = None) -> ServiceManager | None:
    """``systemd:UNIT``, ``docker:NAME``, ``supervisor:PROGRAM[@CONF]``, ``pidfile:PATH``, ``pid:N``,
    ``sim:NAME`` (the simulated host's own service: ``kimitui demo``), or ``none`` (None: no service, the
    GPUs are freed of whatever holds them). Only the form is checked here: whether the host has that
    service is ``ServiceManager.locate``'s answer."""
    if spec.strip().lower() == NO_SERVICE:
        return None
    if not spec.strip():
        raise UsageError(CHOOSE_SERVICE)
    kind, sep, name = spec.partition(":")
    if not sep or not name:
        raise UsageError(f"--service {spec!r}: expected {SERVICE_FORMS}")
    if kind == "systemd":
        return SystemdService(name, health_url=health_url)
    if kind == "docker":
        return DockerService(name, health_url=health_url)
    if kind == "supervisor":
        program, at, conf = name.partition("@")
        if not program or (at and not conf):
            raise UsageError(f"--service {spec!r}: expected supervisor:PROGRAM or supervisor:PROGRAM@CONF")
        return SupervisorService(program, conf or None, health_url=health_url)
    if kind == "pidfile":
        return PidService(pidfile=name, health_url=health_url)
    if kind == "pid":
        if not name.isdigit() or int(name) <= 1:
            raise UsageError(f"--service {spec!r}: pid must be a number above 1")
        return PidService(pid=int(name), health_url=health_url)
    if kind == "sim":
        return SimService(name, health_url=health_url)
    raise UsageError(f"--service {spec!r}: unknown manager {kind!r} (systemd, docker, supervisor, pidfile, pid, "
                     "sim, or none)")


def parse_gpus(text: str | None) -> list[int] | None:
    """``0,1`` -> [0, 1]; empty or ``all`` -> None (every GPU)."""
    if text is None or text.strip().lower() in ("", "all"):
        return None
    try:
        gpus = sorted({int(x) for x in text.replace(" ", "").split(",") if x})
    except ValueError:
        raise UsageError(f"--gpus {text!r}: expected GPU indexes such as 0,1 (or all)") from None
    if not gpus or min(gpus) < 0:
        raise UsageError(f"--gpus {text!r}: expected GPU indexes such as 0,1 (or all)")
    return gpus


def check_gpus(gpus: list[int] | None, on_host: list[int], host: str, what: str = "--gpus") -> None:
    """GPUs asked for that the host does not have are a usage error (a typo found before anything runs)."""
    from kimitui.core.procdisplay import gpu_list

    missing = sorted(set(gpus or []) - set(on_host))
    if missing:
        has = f"GPUs {gpu_list(on_host)}" if on_host else "no GPU"
        raise UsageError(f"{what} {','.join(map(str, gpus or []))}: {host} has no GPU {gpu_list(missing)} "
                         f"(it has {has})")


def default_deadlines(demo: bool) -> Deadlines:
    """The core's deadlines; on the simulated host, the demo's shorter graceful stop and SIGTERM grace."""
    return Deadlines(**(DEMO_DEADLINES if demo else {}))


def build_target(host: str, service: ServiceManager | None, gpus: list[int] | None, threshold_mib: float,
                 deadlines: Deadlines, allow_other_users: bool, operator: str) -> CleanupTarget:
    return CleanupTarget(host=host, service=service, gpus=gpus, clean=CleanCriteria(threshold_mib=threshold_mib),
                         deadlines=deadlines, allow_other_users=allow_other_users, operator=operator)
