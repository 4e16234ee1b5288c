"""The campaign as one state machine of async workers: Phase 1 macro -> the transition (the cleanup
escalation, each step previewed and consented) -> Phase 2 micro -> Phase 3 analysis -> the restart (health
waited for) -> the post-restart check.

Between phases the operator can pause (the campaign waits before the next phase), skip the next phase, or
abort (the phase in hand stops the graceful way: a sweep keeps its finished levels, a cleanup declines its
remaining steps, a micro run ends its ranks; then the service's restart is offered). Every control is an
event before it acts, so a replay shows the same campaign.

When a phase fails: a macro or micro phase that fails leaves the rest to run (the analysis says what is
missing); a transition that does not free the GPUs ends the campaign (Phase 2 would measure beside another
process), as does a restart that does not come back (nothing to probe); both offer the restart, as an
abort does.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from kimitui.campaign.config import CampaignConfig
from kimitui.campaign.resume import ResumePlan
from kimitui.campaign.setup import CampaignHost, campaign_service, policy_consent
from kimitui.cleanup.audit import AuditLog
from kimitui.cleanup.consent import ConsentCallback
from kimitui.cleanup.last_steps import service_up
from kimitui.cleanup.plan import CleanupTarget, Deadlines
from kimitui.cleanup.sample_feed import SampleFeed, ViewTimeout
from kimitui.cleanup.services import ServiceManager
from kimitui.cleanup.setup import build_target, parse_gpus
from kimitui.core.campaign_state import PHASE_TITLES
from kimitui.core.events import (
    CampaignControl,
    CampaignEnd,
    CampaignPlan,
    Event,
    LogLine,
    PhaseEnd,
    PhaseStart,
    ServedModel,
)
from kimitui.core.session import Session
from kimitui.hosts.base import HostError
from kimitui.phases import analysis, check, macro, micro, restart, transition

FIRST_SAMPLE_S = 30.0
"""How long a campaign waits for the host's first sample before it gives up."""


class Campaign:
    def __init__(self, cfg: CampaignConfig, session: Session, target: CampaignHost, feed: SampleFeed,
                 ask: ConsentCallback | None = None, operator: str = "", headless: bool = False,
                 audit_factory: Callable[[], AuditLog] = AuditLog, resume: ResumePlan | None = None,
                 dropped_bytes: int = 0, continue_after_failure: bool = False,
                 served: ServedModel | None = None) -> None:
        self.cfg = cfg
        self.served = served
        """The model measured (``preflight``), published after the plan; None: a resumed run's, recorded."""
        self.session = session
        self.target = target
        self.feed = feed
        self.operator = operator or cfg.operator
        self.headless = headless
        self.audit_factory = audit_factory
        self.resume = resume
        self.dropped_bytes = dropped_bytes
        self.continue_after_failure = continue_after_failure
        """A failed Phase 1 goes on to the transition (else: headless ends failed, the dashboard holds)."""
        self.consent = policy_consent(cfg.consent, ask, self.operator, lambda: self.aborting or self._offering)
        self.aborting = False
        self._offering = False
        self.paused = False
        self.held_before: str | None = None
        """The phase the campaign waits before while paused (None: not held at a gate)."""
        self.current: str | None = None
        self._last = ""
        """The phase last started (said when kimitui stops in it)."""
        self.finished = False
        self._cancel = asyncio.Event()
        """Set on abort: the phase in hand stops the graceful way."""
        self._wake = asyncio.Event()
        self._cleanup_target: CleanupTarget | None = None
        self.api_url = (cfg.api_url or target.api_url).rstrip("/")
        self.service = self._service()

    def set_ask(self, ask: ConsentCallback | None) -> None:
        """Who answers a consent left at "ask" (the dashboard's modal)."""
        self.consent = policy_consent(self.cfg.consent, ask, self.operator, lambda: self.aborting or self._offering)

    # --- what the campaign works with -------------------------------------------------------------------

    def _service(self) -> ServiceManager | None:
        return campaign_service(self.cfg, self.target.simulated, self.api_url)

    def publish(self, event: Event) -> None:
        self.session.publish(event)

    @property
    def state(self):  # type: ignore[no-untyped-def]
        return self.session.state

    def _log(self, message: str, level: str = "info") -> None:
        self.publish(LogLine(time.time(), level=level, source="campaign", message=message))  # type: ignore[arg-type]

    def cleanup_target(self) -> CleanupTarget:
        c = self.cfg.cleanup
        deadlines = Deadlines(graceful_s=c.graceful_s, term_grace_s=c.term_grace_s, verify_s=c.verify_s,
                              drain_s=c.drain_s, health_s=self.cfg.restart.health_s)
        target = build_target(self.target.host.name, self.service, parse_gpus(c.gpus), c.threshold_mib, deadlines,
                              c.allow_other_users, self.operator)
        target.nvidia_smi = self.target.nvidia_smi
        if self.service is not None and self.api_url:
            target.metrics_url = self.cfg.metrics_url or f"{self.api_url}/metrics"
        self._cleanup_target = target
        return target

    # --- the operator's controls (the dashboard's keys; Ctrl-C headless) --------------------------------

    def _next(self) -> str | None:
        c = self.state.campaign
        nxt = c.next_phase if c is not None else None
        return nxt.name if nxt is not None and nxt.name != self.current else None

    def toggle_pause(self) -> bool:
        """Pause before the next phase, or go on; returns whether the campaign is now paused."""
        if self.finished or self.aborting:
            return self.paused
        if self.paused:
            self.paused = False
            self.publish(CampaignControl(time.time(), action="resume", operator=self.operator))
        else:
            self.paused = True
            self.publish(CampaignControl(time.time(), action="pause", phase=self._next() or "",
                                         operator=self.operator))
        self._wake.set()
        return self.paused

    def skip_next(self) -> str | None:
        """Skip the next phase not started yet; returns its name (None: nothing left to skip)."""
        if self.finished or self.aborting:
            return None
        name = self._next()
        if name is not None:
            self.publish(CampaignControl(time.time(), action="skip", phase=name, operator=self.operator))
            self._wake.set()
        return name

    def abort(self, note: str = "") -> None:
        """Stop the phase in hand the graceful way, then offer the restart and end the campaign."""
        if self.finished or self.aborting:
            return
        self.aborting = True
        self.publish(CampaignControl(time.time(), action="abort", phase=self.current or self._next() or "",
                                     operator=self.operator, note=note))
        self._cancel.set()
        t = self._cleanup_target
        if t is not None:  # a drain stops waiting at its next look; verify takes one look
            t.deadlines.drain_s = 0.0
            t.deadlines.verify_s = 0.0
        self._wake.set()

    async def _gate(self, name: str) -> str:
        """Before a phase: run, skip or abort (waits while paused)."""
        while True:
            c = self.state.campaign
            if self.aborting:
                return "abort"
            if c is not None and name in c.skips:
                return "skip"
            if not self.paused:
                return "run"
            self._wake.clear()
            self.held_before = name
            try:
                await self._wake.wait()
            finally:
                self.held_before = None

    # --- the run ------------------------------------------------------------------------------------------

    async def first_sample(self, timeout: float | None = None) -> None:
        """Wait for the host's first sample, which the first phase reads; without one by ``timeout``
        (``FIRST_SAMPLE_S``) the campaign is over before it began (finished, nothing published) and ViewTimeout
        says why."""
        try:
            await self.feed.latest(timeout=FIRST_SAMPLE_S if timeout is None else timeout)
        except ViewTimeout:
            self.finished = True
            raise

    async def run(self) -> CampaignEnd:
        cfg = self.cfg
        if self.resume is not None:
            for ev in self.resume.closing(time.time(), self.dropped_bytes, self.operator):
                self.publish(ev)
            todo = list(self.resume.todo)
            if self.served is not None:  # a run recorded before the model was
                self.publish(self.served)
        else:
            self.publish(CampaignPlan(time.time(), name=cfg.name, file=cfg.file, host=self.target.label,
                                      service=self.service.label if self.service else "none", api_url=self.api_url,
                                      health_url=cfg.health_url, phases=list(cfg.phases), consent=dict(cfg.consent),
                                      settings=cfg.settings(), headless=self.headless, operator=self.operator))
            if self.served is not None:
                self.publish(self.served)
            todo = list(cfg.phases)
            await self._preflight()
        status, note = "done", ""
        try:
            for name in todo:
                action = await self._gate(name)
                if action == "abort":
                    break
                if action == "skip":
                    continue
                self.current = self._last = name
                try:
                    ok = await self._run_phase(name)
                finally:
                    self.current = None
                if self.aborting:
                    break
                if name == "macro" and not ok and self._transition_ahead(todo) and \
                        not self._go_on_after_failure(name):
                    status, note = "failed", self._failed_precondition(name)
                    break
                if name == "cleanup" and not ok:
                    status, note = "failed", "the transition did not free the GPUs: Phase 2 would measure beside " \
                                             "another process"
                    break
                if name == "restart" and not ok:
                    status, note = "failed", "the service did not come back"
                    break
            if self.aborting:
                status, note = "aborted", "aborted by the operator"
            if status != "done":
                await self._offer_restart()
            if status == "done":
                probe_ = self.state.probe
                c = self.state.campaign
                failed = [PHASE_TITLES.get(n, n) for n, p in (c.phases.items() if c else ()) if p.status == "failed"]
                note = ("drift after the restart" if probe_ is not None and probe_.drift else
                        f"every phase over; not ok: {', '.join(failed)}" if failed else "every phase over")
        except asyncio.CancelledError:  # kimitui stopped at once: no end, the campaign can be resumed
            self.finished = True
            with contextlib.suppress(ValueError):  # the run file may be closed already (the app exiting)
                self._log(f"kimitui stopped during {PHASE_TITLES.get(self._last, 'the campaign')}: the "
                          "campaign can be resumed (kimitui campaign FILE --resume RUN)", "warning")
            raise
        end = CampaignEnd(time.time(), status=status, note=note)  # type: ignore[arg-type]
        self.publish(end)
        self.finished = True
        return end

    @property
    def last_started(self) -> str:
        """The phase last started ("" before the first): the one kimitui stopped in, when it stops."""
        return self._last

    def _transition_ahead(self, todo: list[str]) -> bool:
        c = self.state.campaign
        return "cleanup" in todo and c is not None and "cleanup" not in c.skips

    def _failed_precondition(self, name: str) -> str:
        c = self.state.campaign
        why = c.phases[name].note if c is not None and name in c.phases else ""
        return (f"{PHASE_TITLES.get(name, name)} failed ({why or 'not ok'}): the transition would stop the service "
                "all the same, so it was not started (--continue-after-failure goes on)")

    def _go_on_after_failure(self, name: str) -> bool:
        """After a failed Phase 1, before the transition (the first destructive step): go on only when told
        to (--continue-after-failure); in the dashboard the campaign holds (a pause, its reason recorded)
        and the operator chooses: P goes on, S skips the transition, A aborts. Headless: it ends failed."""
        if self.continue_after_failure:
            self._log(f"{PHASE_TITLES.get(name, name)} failed: going on to the transition "
                      "(--continue-after-failure)", "warning")
            return True
        if self.headless:
            return False
        c = self.state.campaign
        why = c.phases[name].note if c is not None and name in c.phases else ""
        self.paused = True
        self.publish(CampaignControl(time.time(), action="pause", phase=self._next() or "", operator="kimitui",
                                     note=f"{PHASE_TITLES.get(name, name)} failed ({why or 'not ok'}): P goes on "
                                          "to stop the service all the same, S skips the transition, A aborts"))
        return True

    async def _preflight(self) -> None:
        """Say at the start what the campaign will not give, rather than when it comes to it: a check with no
        Phase 1 single-stream figure to judge by, an all-reduce on one GPU."""
        cfg = self.cfg
        if {"macro", "check"} <= set(cfg.phases) and min(cfg.macro.concurrency, default=0) != 1:
            self._log("Phase 1 has no concurrency 1 level: the post-restart check will measure the service but "
                      "have no single-stream figure to judge it by (add 1 to [macro] concurrency)", "warning")
        if not {"micro", "analysis"} <= set(cfg.phases) or "allreduce" not in cfg.micro.parts:
            return
        try:
            sample = await self.feed.latest(timeout=10.0)
        except ViewTimeout:
            return
        scope = parse_gpus(cfg.cleanup.gpus) or [g.index for g in sample.gpus]
        if len(scope) < 2:
            self._log(f"{self.target.label} has {len(scope)} GPU in scope: Phase 2's all-reduce needs 2 or more, "
                      "so Phase 3 will give the GEMM shares but no verdict", "warning")

    async def _run_phase(self, name: str) -> bool:
        run = {"macro": self._macro, "cleanup": self._cleanup, "micro": self._micro, "analysis": self._analysis,
               "restart": self._restart, "check": self._check}[name]
        return await run()

    def _phase_ok(self, name: str) -> bool:
        c = self.state.campaign
        return c is not None and name in c.phases and c.phases[name].status == "done"

    async def _macro(self) -> bool:
        from kimitui.bench.macro import ConfigError, MacroError

        m = self.cfg.macro
        done = self.resume.macro_done if self.resume is not None else set()
        levels = [lv for lv in m.levels if lv not in done]
        if not levels:
            self._log("Phase 1: every level has a point already")
            return True
        cfg = m.macro_config(self.api_url, levels)
        cfg.metrics_url = self.cfg.metrics_url or None  # the sweep reads the metrics the drain reads
        try:
            await macro.macro_phase(self.publish, cfg, self._cancel)
        except (ConfigError, MacroError) as exc:
            self._log(f"Phase 1 could not run: {exc}", "error")
        await self._identify_again()
        return self._phase_ok("macro")

    async def _identify_again(self) -> None:
        """The model, where the server did not answer before Phase 1: asked again while it still runs."""
        from kimitui.campaign.served_model import ModelUnknown, identify_served

        served = self.state.served_model
        if served is None or served.identified or "micro" not in self.cfg.phases:
            return
        try:
            self.publish(await identify_served(self.cfg, self.target.host, self.api_url, self.service, needed=True))
        except (ModelUnknown, HostError) as exc:
            self._log(f"the served model: {exc}", "error")

    async def _cleanup(self) -> bool:
        target = self.cleanup_target()
        svc = self.service
        title = f"transition: free the GPUs of {svc.label if svc else 'whatever holds them (no service)'} on " \
                f"{self.target.host.name}"
        audit = self.audit_factory()
        try:
            out = await transition.cleanup_phase(self.target.host, target, self.feed, self.consent, self.publish,
                                                 title, audit=audit)
        finally:
            audit.close()
        return out.clean

    async def _micro(self) -> bool:
        from kimitui.bench.micro.runner import MicroConfig, MicroError

        mi = self.cfg.micro
        try:
            sample = await self.feed.latest(timeout=30.0)
        except ViewTimeout as exc:
            sample = None
            self._log(f"no telemetry before Phase 2: {exc}", "warning")
        scope = parse_gpus(self.cfg.cleanup.gpus) or (sorted(g.index for g in sample.gpus) if sample else [])
        if sample is not None and not mi.force and "cleanup" in self.cfg.phases:
            free, sample = await micro.free_before_micro(
                sample, scope, self.feed, self._cleanup,
                lambda why: self._log(f"the GPUs hold memory again before Phase 2 ({why}): the transition runs again",
                                      "warning"))
            if not free:
                return False
        parts = [p for p in mi.parts if self.resume is None or p not in self.resume.micro_parts_done]
        served = self.state.served_model
        if served is None or not served.identified:
            from kimitui.campaign.served_model import NAME_IT

            why = served.note if served is not None else "none was recorded"
            self.publish(PhaseStart(time.time(), phase="micro", title="GEMM and all-reduce micro benchmarks"))
            self.publish(PhaseEnd(time.time(), phase="micro", ok=False,
                                  note=f"the served model was not identified ({why}): {NAME_IT}"))
            return False
        cfg = MicroConfig(parts=parts, tp=served.tp, ms=self.cfg.micro_ms(), backends=list(mi.backends),
                          gpus=parse_gpus(self.cfg.cleanup.gpus), sweep_max=mi.sweep_max_bytes, force=mi.force,
                          skip={k: list(v) for k, v in (self.resume.micro_done if self.resume else {}).items()})
        cfg.model_config, cfg.expert_parallel = served.config, served.expert_parallel
        cfg.burst_tokens = list(cfg.ms)  # the step's all-reduce burst at every M the budget divides
        if self.target.simulated:
            cfg.modelled, cfg.sim_dir, cfg.pace_s = "rtx-pro-6000", self.target.sim_dir, mi.pace_s
        try:
            await micro.micro_phase(self.publish, self.target.host, self.target.label, cfg, sample, self._cancel)
        except MicroError as exc:
            self._log(f"Phase 2 could not run: {exc}", "error")
        return self._phase_ok("micro")

    async def _analysis(self) -> bool:
        await analysis.analysis_phase(self.publish, self.state)
        return self._phase_ok("analysis")

    async def _restart(self, offered: bool = False) -> bool:
        target = self._cleanup_target or self.cleanup_target()
        svc = self.service
        what = svc.label if svc else "no service"
        title = (f"restart {what} on {self.target.host.name}" + (" (offered after the campaign stopped)"
                                                                  if offered else ""))
        audit = self.audit_factory()
        try:
            await restart.restart_phase(self.target.host, target, self.consent, self.publish, title, audit=audit,
                                           skip_if_running=True, view=self.feed)
        finally:
            audit.close()
        return self._phase_ok("restart")

    async def _offer_restart(self) -> None:
        """After an abort or a failed transition: the service's restart, offered (``abort_restart``) when this
        campaign's transition ran and the service has not been started since. An abort before the transition
        looks at the service: one that is down (Phase 1 may have failed for that) is offered its restart, one
        that is up is said to need none."""
        c = self.state.campaign
        if c is None or self.service is None:
            return
        ran = "cleanup" in c.phases and c.phases["cleanup"].runs > 0
        restarted = "restart" in c.phases and c.phases["restart"].status == "done"
        if not ran and self.aborting and not restarted:
            try:
                up, how = await service_up(self.target.host, self.service)
            except HostError as exc:
                up, how = False, f"not looked up: {exc}"
            if up:
                self._log(f"aborted before the transition: {self.service.label} was not stopped and is running "
                          f"({how}): no restart is needed")
                return
            ran = True
        if ran and not restarted:
            self._offering = True
            try:
                await self._restart(offered=True)
            finally:
                self._offering = False

    async def _check(self) -> bool:
        m, k = self.cfg.macro, self.cfg.check
        baseline = self.state.macro_by_level.get(1)
        await check.check_phase(self.publish, self.api_url, baseline, requests=k.requests,
                                max_tokens=k.max_tokens or m.max_tokens, input_len=m.input_len, endpoint=m.endpoint,
                                model=m.model or None, margin_pct=k.margin_pct, ttft_margin_pct=k.ttft_margin_pct,
                                cancel=self._cancel, ignore_eos=m.ignore_eos, warmup=self.cfg.check_warmup(),
                                base=self.state.macro_requests.get(1))
        return self._phase_ok("check")
