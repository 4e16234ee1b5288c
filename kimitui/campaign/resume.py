"""Resuming a campaign that kimitui stopped in (a crash, a kill -9): ``kimitui campaign FILE --resume RUN``.

The run file is the record of truth. It is read and folded as a replay would; per phase of the campaign:

- over (ended, ok or not, or skipped): not run again;
- cut off (started, never ended): closed now with a PhaseEnd whose note starts with "cut off" (and its
  sweep or micro run marked cancelled, so no view shows it running), then run again for what is missing
  only: the macro levels with no point, the micro rows not measured (the workers skip the others);
  a cleanup is run again whole (it looks at the host afresh: what the first run stopped is not there);
- not started: run.

The campaign goes on in the same run file (``RunWriter.reopen``: its header checked, a torn last line cut
off), so a replay and the report read one whole campaign, resume included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kimitui.core.campaign_state import PHASE_TITLES
from kimitui.core.events import (
    CUT_OFF,
    AllReduceRow,
    CampaignPlan,
    CampaignResume,
    Event,
    MacroProgress,
    MicroEnd,
    PhaseEnd,
    level_failed,
)
from kimitui.core.replay import state_at
from kimitui.core.runfile import RunFileError, RunReader
from kimitui.core.state import SessionState


class ResumeError(Exception):
    """A run that cannot be resumed (one line)."""


def gemm_key(name: str, m: int, backend: str) -> str:
    return f"{name}|{m}|{backend}"


def allreduce_key(row: AllReduceRow) -> str:
    return f"burst|{row.tokens}" if row.burst > 1 else f"{row.mode}|{row.size_bytes}"


@dataclass(slots=True)
class ResumePlan:
    path: Path
    state: SessionState
    """The fold of the whole run: the resumed session starts from it."""
    plan: CampaignPlan
    done: list[str] = field(default_factory=list)
    cut_off: list[str] = field(default_factory=list)
    todo: list[str] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)
    macro_done: set[float] = field(default_factory=set)
    """Levels with a point in this campaign, by the plan's key (``MacroSettings.levels``: rates or
    concurrencies); none where Phase 1 searches (its probes depend on each other: it runs again whole)."""
    micro_done: dict[str, list[str]] = field(default_factory=dict)
    """Part -> rows measured in this campaign (``gemm_key`` / ``allreduce_key``)."""
    micro_parts_done: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)

    def closing(self, t: float, dropped: int, operator: str) -> list[Event]:
        """What is published at the resume: the cut-off phases closed (their sweep or micro run marked
        cancelled first), then the resume itself."""
        out: list[Event] = []
        state = self.state
        sweep = state.sweep
        if sweep is not None and sweep.active and sweep.progress is not None and "macro" in self.cut_off:
            out.append(MacroProgress(t, status="cancelled", levels=list(sweep.progress.levels),
                                     level_index=sweep.progress.level_index, concurrency=sweep.progress.concurrency,
                                     elapsed_s=sweep.progress.elapsed_s, error=f"{CUT_OFF}: kimitui stopped"))
        run = state.micro
        if run is not None and run.active and "micro" in self.cut_off:
            for part in run.plan.parts:
                if part not in run.ends:
                    out.append(MicroEnd(t, run_id=run.plan.run_id, part=part, status="cancelled",
                                        detail=f"{CUT_OFF}: kimitui stopped"))
        for name in self.cut_off:
            out.append(PhaseEnd(t, phase=name, ok=False, note=f"{CUT_OFF}: kimitui stopped during this phase "
                                                             "(a crash or a kill); resumed"))
        out.append(CampaignResume(t, done=list(self.done), cut_off=list(self.cut_off), todo=list(self.todo),
                                  notes=dict(self.notes), dropped_bytes=dropped, operator=operator))
        return out


def _level(key: float) -> str:
    return f"{key:g}"


def planned_levels(plan: CampaignPlan) -> tuple[list[float], bool, bool]:
    """The macro levels the plan recorded (its rates, else its concurrencies), whether they are rates, and
    whether Phase 1 searches; a run whose settings are not of that shape (edited, written by something else)
    has none to keep, and the sweep runs whole."""
    macro = plan.settings.get("macro") if isinstance(plan.settings, dict) else None
    if not isinstance(macro, dict):
        return [], False, False
    rates = macro.get("rates")
    rated = isinstance(rates, list) and bool(rates)
    levels = rates if rated else macro.get("concurrency")
    if not isinstance(levels, list):
        return [], rated, macro.get("search") is True
    return ([float(x) for x in levels if isinstance(x, int | float) and not isinstance(x, bool)], rated,
            macro.get("search") is True)


def plan_resume(path: Path, phases: list[str]) -> ResumePlan:
    """Read the run and decide per phase; ``phases`` are the campaign file's (they must be the run's)."""
    try:
        reader = RunReader(path)
    except RunFileError as exc:
        raise ResumeError(str(exc)) from None
    if str(path).endswith(".gz"):
        raise ResumeError(f"{path}: a compressed run cannot be resumed in place (resume from its plain .jsonl)")
    state = state_at(reader, len(reader))
    c = state.campaign
    if c is None:
        raise ResumeError(f"{path}: not a campaign run (no campaign plan in it)")
    if c.end is not None:
        raise ResumeError(f"{path}: the campaign already ended ({c.end.status}"
                          + (f": {c.end.note}" if c.end.note else "") + "): nothing to resume")
    if list(c.plan.phases) != list(phases):
        raise ResumeError(f"{path}: the run's campaign has phases {', '.join(c.plan.phases)}; the campaign file "
                          f"has {', '.join(phases)} (resume with the file it was started with)")
    out = ResumePlan(path, state, c.plan, warnings=list(reader.warnings))
    since = c.plan.t
    levels, rated, searched = planned_levels(c.plan)
    points = [p for sweep in state.sweeps for p in sweep.points.values() if p.t >= since and not level_failed(p)]
    if not searched:
        out.macro_done = {float(p.key) for p in points if (p.rate is not None) == rated}
    for r in state.gemm:
        if r.t >= since:
            out.micro_done.setdefault("gemm", []).append(gemm_key(r.name, r.m, r.backend))
    for a in state.allreduce:
        if a.t >= since:
            out.micro_done.setdefault("allreduce", []).append(allreduce_key(a))
    for run in state.micro_runs:
        if run.plan.t >= since:
            out.micro_parts_done |= {p for p, e in run.ends.items() if e.status in ("done", "skipped")}
    started = [p for p in c.phases.values() if p.start is not None]
    last = max(started, key=lambda p: p.start or 0.0).name if started else None
    for name in c.plan.phases:
        status = c.phases[name].status
        if status == "failed" and name == last:  # stopped (kimitui quit, Ctrl-C twice) after it ended not ok
            out.notes[name] = "ended not ok when kimitui stopped: run again for what is missing"
        elif status in ("done", "failed", "skipped"):
            out.done.append(name)
            continue
        if status == "running":
            out.cut_off.append(name)
        if name == "macro" and searched:
            if points:
                out.notes[name] = "the search runs again whole (its probes depend on each other)"
        elif name == "macro":
            left = [lv for lv in levels if lv not in out.macro_done]
            kept = sorted(out.macro_done & set(levels))
            if not left and status in ("running", "failed"):
                out.notes[name] = f"every level had finished ({', '.join(map(_level, kept))})"
                out.done.append(name)
                continue
            if kept:
                out.notes[name] = (f"levels {', '.join(map(_level, kept))} kept; {', '.join(map(_level, left))} to run")
        elif name == "micro":
            rows = sum(len(v) for v in out.micro_done.values())
            if rows or out.micro_parts_done:
                out.notes[name] = (f"{rows} rows kept" + (f", {' and '.join(sorted(out.micro_parts_done))} done"
                                                         if out.micro_parts_done else "") + "; the rest to run")
        elif name == "cleanup" and status == "running":
            out.notes[name] = "run again whole: it looks at the host afresh"
        out.todo.append(name)
    if not out.todo:
        raise ResumeError(f"{path}: every phase of the campaign is over ("
                          + ", ".join(PHASE_TITLES.get(p, p) for p in out.done) + "): nothing to resume")
    return out
