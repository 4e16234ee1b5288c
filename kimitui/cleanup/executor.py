"""The cleanup executor: runs the escalation for one target, step by step, each through preview and
consent, every signal guarded, every wait a poll with a deadline, every event published and audited.

    ex = CleanupExecutor(host, target, view, consent, publish=session.publish, audit=AuditLog())
    report = await ex.run()          # graceful, process, others, device, verify (and reset when it applies)
    await ex.restart()               # after the micro phase
"""

from __future__ import annotations

import asyncio
import contextlib
import signal as signal_mod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kimitui.cleanup import drain, fate, last_steps, steps
from kimitui.cleanup.audit import AuditLog
from kimitui.cleanup.consent import ConsentCallback, ConsentDecision, current_operator, is_optional
from kimitui.cleanup.context import Confirmed, Key, StepContext, key
from kimitui.cleanup.hostprocs import HostProcs, ProcScan
from kimitui.cleanup.identity import ProcessIdentity
from kimitui.cleanup.plan import STEPS, CleanupTarget
from kimitui.cleanup.safety import Candidate, SafetyPolicy
from kimitui.cleanup.sample_feed import ProcessView
from kimitui.cleanup.services import ServiceProcs
from kimitui.cleanup.waits import Clock, SystemClock
from kimitui.core.events import (
    CleanupPlan,
    Consent,
    Event,
    HostSample,
    ProcRef,
    SignalLate,
    SignalOutcome,
    SignalSent,
    StepPreview,
    StepResult,
    Verification,
)
from kimitui.hosts.base import Host, HostError, OutcomeUnknown, ProcId, late_signal_result

Publish = Callable[[Event], None]

DRY_RUN = "dry run: previewed only, nothing signalled"
"""A dry run's step result (each step declined: its preview is what it would do were the earlier ones consented)."""



STEP_FUNCS: dict[str, Callable[[StepContext], Awaitable[object]]] = {
    "graceful": steps.graceful, "process": steps.process, "others": steps.others, "device": steps.device,
    "verify": steps.verify, "reset": last_steps.reset,
}
"""The steps the executor runs by name (the drain, the restart and the dry run's previews apart)."""


@dataclass(slots=True)
class CleanupReport:
    clean: bool
    verification: Verification | None
    results: dict[str, StepResult] = field(default_factory=dict)
    consent_to_clean_s: float | None = None
    """From the last accepted consent to the verification that found every GPU clean."""
    signal_to_clean_s: float | None = None
    """From the last signal delivered (or stop command) to the verification that found every GPU clean."""
    signals: list[SignalSent] = field(default_factory=list)
    outcomes: list[SignalOutcome] = field(default_factory=list)


class CleanupExecutor(ProcessIdentity):
    """Runs the escalation; the steps see it as a StepContext (kimitui.cleanup.context)."""

    def __init__(self, host: Host, target: CleanupTarget, view: ProcessView, consent: ConsentCallback,
                 publish: Publish | None = None, audit: AuditLog | None = None, clock: Clock | None = None,
                 procs: HostProcs | None = None) -> None:
        self.host, self.target, self.view, self.consent = host, target, view, consent
        self.publish_sink = publish
        self.audit = audit
        self.clock = clock or SystemClock()
        self.procs = procs or HostProcs(host)
        self.operator = target.operator or current_operator()
        self.host_name = target.host or host.name
        self.safety = SafetyPolicy(allow_other_users=target.allow_other_users)
        self.last_scan: ProcScan | None = None
        """The latest process scan (every step scans before it builds its candidates)."""
        self.tree: dict[int, Candidate] = {}
        """The service's processes, identified once (pid -> identity) when the cleanup began, plus the
        children they forked since; a later incarnation of one of these pids is never one of them."""
        self.tree_why: dict[int, str] = {}
        """Why each member of ``tree`` belongs to the service (as said when it was first seen)."""
        self.main: Key | None = None
        """The service's main process as identified when the cleanup began (None: none, or not running)."""
        self.identified = False
        self.accepted_steps: set[str] = set()
        """The steps the operator consented to so far (the device step reaches the others only after
        ``others``)."""
        self.stuck: dict[Key, str] = {}
        self.scope: list[int] = []
        self.report = CleanupReport(False, None)
        self.last_consent_mono: float | None = None
        self.acted_at: float | None = None
        self.last_signal_mono: float | None = None
        """When the cleanup last changed something (a stop, a signal): later samples must be taken after."""
        self._protected_loaded = False
        self.service_now: ServiceProcs | None = None
        """What the service's manager said last (its processes, or why there are none)."""
        self.ended = False
        """Every step has reported: what is learnt from now on is learnt after the cleanup ended."""
        self.previewed: set[str] = set()
        """The steps whose preview was shown (a dry run's later previews take them as consented)."""

    # --- events -------------------------------------------------------------------------------------

    def emit(self, event: Event) -> None:
        if self.publish_sink is not None:
            self.publish_sink(event)
        if self.audit is not None:
            self.audit.record(event, self.host_name, self.operator)
        if isinstance(event, SignalSent):
            self.report.signals.append(event)
            if event.outcome in ("sent", "unknown"):
                self.last_signal_mono = self.clock.monotonic()
        elif isinstance(event, SignalOutcome):
            self.report.outcomes.append(event)
        elif isinstance(event, StepResult):
            self.report.results[event.step] = event

    def now(self) -> float:
        return self.clock.time()

    def result(self, step: str, status: str, reason: str, started: float) -> StepResult:
        res = StepResult(self.now(), step=step, status=status, reason=reason,  # type: ignore[arg-type]
                         elapsed_s=round(self.clock.monotonic() - started, 4))
        self.emit(res)
        return res

    def signals(self, step: str) -> list[SignalSent]:
        return [s for s in self.report.signals if s.step == step]

    def outcomes(self, step: str) -> list[SignalOutcome]:
        return [o for o in self.report.outcomes if o.step == step]

    @property
    def verification(self) -> Verification | None:
        return self.report.verification

    def record_verification(self, v: Verification) -> None:
        self.report.verification = v
        if not v.clean:
            return
        now = self.clock.monotonic()
        if self.last_consent_mono is not None:
            self.report.consent_to_clean_s = round(now - self.last_consent_mono, 4)
        if self.last_signal_mono is not None:
            self.report.signal_to_clean_s = round(now - self.last_signal_mono, 4)

    # --- what is there ------------------------------------------------------------------------------

    def acted(self) -> None:
        self.acted_at = self.clock.monotonic()

    def note_stop_issued(self) -> None:
        self.last_signal_mono = self.clock.monotonic()

    def refusal(self, c: Candidate) -> str | None:
        return self.safety.refusal(c)

    def stuck_state(self, c: Candidate) -> str | None:
        return self.stuck.get(key(c))

    async def sample(self, after: float | None = None) -> HostSample:
        """The latest sample; one taken after the cleanup's last action (or after ``after``)."""
        if after is None:
            after = self.acted_at
        sample = await self.view.latest(after=after, timeout=self.target.deadlines.sample_s)
        self.safety.agent_pid = sample.agent_pid
        return sample

    def consented(self, step: str) -> bool:
        """Consented earlier in this cleanup; in a dry run, previewed (what later steps would do if it were)."""
        return step in self.accepted_steps or (self.target.dry_run and step in self.previewed)

    def declined(self, step: str, started: float) -> StepResult:
        return self.result(step, "declined", DRY_RUN if self.target.dry_run else "operator declined", started)

    # --- preview and consent ------------------------------------------------------------------------

    def ref(self, c: Candidate, reason: str) -> ProcRef:
        return ProcRef(pid=c.pid, start_time=c.start_time, user=c.user, gpus=list(c.gpus),
                       mem_mib=round(c.mem_mib, 1), unit=c.unit, cmdline=c.cmdline, reason=reason,
                       kind=c.kind, exe=c.exe, dies_with=c.dies_with)  # type: ignore[arg-type]

    async def ask(self, step: str, action: str, targets: list[tuple[Candidate, str]],
                  spared: list[tuple[Candidate, str]]) -> Confirmed | None:
        """Publish the preview, ask the operator, publish the consent. None when declined."""
        preview = StepPreview(self.now(), step=step, action=action,
                              targets=[self.ref(c, why) for c, why in targets],
                              spared=[self.ref(c, why) for c, why in spared])
        self.emit(preview)
        self.previewed.add(step)
        try:
            decision = await self.consent(preview)
        except asyncio.CancelledError:  # interrupted while asking (Ctrl-C): on record as declined
            self.emit(Consent(self.now(), step=step, accepted=False, operator=self.operator,
                              note="interrupted while asking"))
            raise
        except Exception as exc:
            decision = ConsentDecision(False, None, self.operator, f"consent failed: {exc}")
        by_pid: dict[int, Candidate] = {c.pid: c for c, _ in targets}
        optional = {c.pid: c for c, why in spared if is_optional(self.ref(c, why))}
        refused: list[tuple[int, str]] = []
        chosen: dict[Key, Candidate] = {}
        if decision.accepted:
            wanted = list(by_pid) if decision.pids is None else list(decision.pids)
            for pid in wanted:
                c = by_pid.get(pid) or optional.get(pid)
                if c is None:
                    why = next((w for s, w in spared if s.pid == pid), "not in the preview")
                    refused.append((pid, why))
                    continue
                why_not = self.safety.refusal(c)
                if why_not is not None:
                    refused.append((pid, why_not))
                    continue
                chosen[key(c)] = c
        note = decision.note
        if refused:
            note = (note + "; " if note else "") + "ticked but refused: " + ", ".join(
                f"{pid} ({why})" for pid, why in refused)
        self.emit(Consent(self.now(), step=step, accepted=decision.accepted,
                          operator=decision.operator or self.operator,
                          pids=[c.pid for c in chosen.values()], note=note))
        for pid, why in refused:
            c = by_pid.get(pid) or next((s for s, _ in spared if s.pid == pid), None)
            self.emit(SignalSent(self.now(), step=step, pid=pid, start_time=c.start_time if c else None,
                                 signal="-", outcome="refused", detail=why, cmdline=c.cmdline if c else ""))
        if not decision.accepted:
            return None
        self.last_consent_mono = self.clock.monotonic()
        self.accepted_steps.add(step)
        return Confirmed(step, chosen)

    # --- signals and waits --------------------------------------------------------------------------

    async def signal(self, confirmed: Confirmed, c: Candidate, sig: signal_mod.Signals) -> str:
        """Send only to a confirmed, still-allowed process whose (pid, start time) still match."""
        name = sig.name
        if key(c) not in confirmed.procs:
            outcome, detail = "refused", "not in the confirmed preview"
        elif (why := self.safety.refusal(c)) is not None or (why := fate.refusal(self, c, confirmed)) is not None:
            outcome, detail = "refused", why
        else:
            assert c.start_time is not None
            self.acted()
            asked = self.clock.monotonic()
            with_it = [ProcId(pid, start) for pid, start in fate.allowed(self, c, confirmed)]
            try:
                res = await self.host.signal(ProcId(c.pid, c.start_time), int(sig), with_it)
                outcome, detail = res.outcome, res.detail
            except OutcomeUnknown as exc:  # never resent: the waits that follow look again instead
                outcome, detail = "unknown", str(exc)
                if exc.late is not None:
                    self._report_late_reply(confirmed.step, c, name, exc.late, asked)
            except HostError as exc:
                outcome, detail = "error", str(exc)
        self.emit(SignalSent(self.now(), step=confirmed.step, pid=c.pid, start_time=c.start_time, signal=name,
                             outcome=outcome, detail=detail, cmdline=c.cmdline))  # type: ignore[arg-type]
        return outcome

    def _report_late_reply(self, step: str, c: Candidate, signame: str, late: asyncio.Future[Any],
                           asked: float) -> None:
        """The agent's reply to a signal request given up as unknown, should it come: recorded as late."""

        def arrived(fut: asyncio.Future[Any]) -> None:
            if fut.cancelled() or fut.exception() is not None:  # the channel dropped: no reply can come
                return
            res = late_signal_result(fut.result())
            if res.outcome == "sent":
                self.last_signal_mono = self.clock.monotonic()
            self.emit(SignalLate(self.now(), step=step, pid=c.pid, start_time=c.start_time, signal=signame,
                                 how="reply", outcome=res.outcome, detail=res.detail,
                                 after_s=round(self.clock.monotonic() - asked, 4), after_end=self.ended))

        late.add_done_callback(arrived)

    async def signal_all(self, confirmed: Confirmed, cands: list[Candidate],
                         sig: signal_mod.Signals) -> list[Candidate]:
        """Signal each concurrently; returns those the signal reached or may have reached (outcome unknown:
        the channel dropped with the request in flight), which the wait then looks at again."""
        outcomes = await asyncio.gather(*(self.signal(confirmed, c, sig) for c in cands))
        self.acted()
        return [c for c, o in zip(cands, outcomes, strict=True) if o in ("sent", "unknown")]

    async def wait_gone(self, step: str, cands: list[Candidate], signame: str, timeout: float,
                        final: bool) -> list[Candidate]:
        """Poll until each has exited (publishing its exit time) or the deadline; returns the rest, reported
        as survived, or as stuck (with their /proc state) when ``final``. When the host could not be asked
        (the channel dropped), it waits for the host to be back and looks again; those it still cannot see
        are reported as unknown, never guessed, and not returned (no SIGKILL follows a SIGTERM unseen)."""
        start = self.clock.monotonic()
        left = {key(c): c for c in cands}
        poll = self.target.deadlines.poll_s
        blind = False  # the last look failed: the host is out of reach
        while left:
            blind = not await self._look(step, left, signame, start)
            now = self.clock.monotonic()
            if not left or now - start >= timeout:
                break
            await asyncio.sleep(min(poll, timeout - (now - start)))
        if left and blind:  # once more, after the reconnect: an outcome is seen, not assumed
            with contextlib.suppress(TimeoutError):
                blind = not await asyncio.wait_for(self._look(step, left, signame, start),
                                                   self.target.deadlines.reconnect_s)
        elapsed = round(self.clock.monotonic() - start, 4)
        for k, c in left.items():
            outcome = "unknown" if blind else "stuck" if final else "survived"
            if outcome == "stuck":
                self.stuck[k] = c.state or "?"
            self.emit(SignalOutcome(self.now(), step=step, pid=c.pid, start_time=c.start_time, signal=signame,
                                    outcome=outcome, elapsed_s=elapsed, state=c.state))  # type: ignore[arg-type]
        # unseen is not survived: nothing escalates blind on a process the host could not show alive
        return [] if blind else list(left.values())

    async def _look(self, step: str, left: dict[Key, Candidate], signame: str, start: float) -> bool:
        """Stat what is left; those gone are published as exited and removed. False when the host could
        not be asked."""
        try:
            stats = await self.procs.stat([c.pid for c in left.values()])
        except HostError:
            return False
        elapsed = round(self.clock.monotonic() - start, 4)
        for k, c in list(left.items()):
            st = stats.get(c.pid)
            if st is None or st[0] != c.start_time or st[1] in ("Z", "X"):
                del left[k]
                self.emit(SignalOutcome(self.now(), step=step, pid=c.pid, start_time=c.start_time,
                                        signal=signame, outcome="exited", elapsed_s=elapsed))
            else:
                c.state = st[1]
        return True

    async def terminate(self, confirmed: Confirmed) -> list[Candidate]:
        """SIGTERM, poll for the grace period, SIGKILL the survivors, poll; returns the stuck."""
        d = self.target.deadlines
        cands = list(confirmed.procs.values())
        sent = await self.signal_all(confirmed, cands, signal_mod.SIGTERM)
        survivors = await self.wait_gone(confirmed.step, sent, "SIGTERM", d.term_grace_s, final=False)
        if not survivors:
            return []
        killed = await self.signal_all(confirmed, survivors, signal_mod.SIGKILL)
        return await self.wait_gone(confirmed.step, killed, "SIGKILL", d.kill_s, final=True)

    # --- the escalation -----------------------------------------------------------------------------

    async def run(self, steps_wanted: tuple[str, ...] = STEPS) -> CleanupReport:
        """The escalation. Raises ServiceNotFound, before any event, when the target names a service the
        host does not have (a cleanup never frees the GPUs of everything by a typo)."""
        svc = self.target.service
        if svc is not None:
            self.service_now = await svc.locate(self.host)
        sample = await self.sample()
        self.scope = self.target.scope(sample)
        self.emit(CleanupPlan(self.now(), host=self.host_name, service=svc.name if svc else "",
                              manager=svc.kind if svc else "none", gpus=list(self.scope),
                              steps=[s for s in STEPS if s in steps_wanted
                                     and (s != "drain" or self.target.metrics_url)],
                              clean_threshold_mib=self.target.clean.threshold_mib))
        scan = await self.scan()
        self.protect_agent(scan, sample)
        await self.identify(scan, sample)  # the service's identities, fixed for every later step
        if "drain" in steps_wanted and self.target.metrics_url:
            await drain.drain(self)
        for name in ("graceful", "process", "others", "device"):
            if name in steps_wanted:
                await STEP_FUNCS[name](self)
        if "verify" in steps_wanted:
            await steps.verify(self)
            if "reset" in steps_wanted:
                await last_steps.reset(self)
        v = self.report.verification
        self.report.clean = bool(v and v.clean)
        self.ended = True
        await self.follow_up()
        return self.report

    async def follow_up(self) -> None:
        """The signals whose outcome stayed unknown (the host was not back in time): one more look, now the
        cleanup has ended (within the reconnect deadline), each reported as learnt late."""
        sent_at = {(s.pid, s.start_time, s.signal): s.t for s in self.report.signals}
        unknown: dict[tuple[int, int | None], SignalOutcome] = {}
        for o in self.report.outcomes:
            unknown.pop((o.pid, o.start_time), None)
            if o.outcome == "unknown":
                unknown[(o.pid, o.start_time)] = o
        if not unknown:
            return
        try:
            stats = await asyncio.wait_for(self.procs.stat([pid for pid, _ in unknown]),
                                           self.target.deadlines.reconnect_s)
        except (HostError, TimeoutError):
            return  # still out of reach: the run says unknown, and that stands
        for (pid, start), o in unknown.items():
            st = stats.get(pid)
            gone = st is None or st[0] != start or st[1] in ("Z", "X")
            asked = sent_at.get((pid, start, o.signal), o.t)
            self.emit(SignalLate(self.now(), step=o.step, pid=pid, start_time=start, signal=o.signal, how="look",
                                 outcome="exited" if gone else "alive", after_s=round(self.now() - asked, 4),
                                 after_end=True))

    async def restart(self) -> StepResult:
        return await last_steps.restart(self)


_IMPLEMENTS: type[StepContext] = CleanupExecutor
"""The executor is what the steps take (checked by a type checker; tests/test_import_contracts.py checks it at run
time)."""
