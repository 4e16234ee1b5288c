"""What changed, said by the fold once (issue 36 item 2) rather than found again by every table and view.

Every event the fold takes gets a revision number (``next_revision``). The fold keeps the one of its latest
event that is no host sample (``SessionState.events_rev``): a view that reads no sample is drawn again only
when that moved, not at every sample. A GPU (by index) or a process (by its identity, pid and start time)
whose reading differs from the sample before keeps its sample's number, one that reads the same keeps the
number it had (``SampleChanges``). A table that remembers the revision it drew each row at redraws exactly
the rows whose number moved, with no compare of its own. Revision numbers come from one counter for the
whole process, so a state folded afresh (a replay's seek) never hands out a number a table drew at before.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kimitui.core.events import GpuSample, ProcSample

_REVISIONS = itertools.count(1)


def next_revision() -> int:
    return next(_REVISIONS)

ProcId = tuple[int, "int | None"]
"""A process as the tables key it: (pid, start time)."""


def proc_id(p: ProcSample) -> ProcId:
    return (p.pid, p.start_time)


@dataclass(frozen=True, slots=True)
class SampleChanges:
    """The revision at which each GPU's and each process's reading last changed (0: no sample yet)."""

    rev: int = 0
    """The latest sample's revision."""
    gpu: Mapping[int, int] = field(default_factory=dict)
    proc: Mapping[ProcId, int] = field(default_factory=dict)
    procs: int = 0
    """The revision at which the process list last changed: a process came, went or reads differently."""


def sample_changes(before: SampleChanges, old_gpus: Mapping[int, GpuSample], gpus: Sequence[GpuSample],
                   old_procs: Sequence[ProcSample], procs: Sequence[ProcSample]) -> SampleChanges:
    """The changes of a sample (GPUS, PROCS) folded over the one before it (OLD_GPUS, OLD_PROCS)."""
    rev = next_revision()
    gpu = {}
    for g in gpus:
        last = before.gpu.get(g.index)
        gpu[g.index] = last if last is not None and old_gpus.get(g.index) == g else rev
    old = {proc_id(p): p for p in old_procs}
    proc = {}
    moved = len(old_procs) != len(procs)
    for p in procs:
        key = proc_id(p)
        last = before.proc.get(key)
        if last is not None and old.get(key) == p:
            proc[key] = last
        else:
            proc[key] = rev
            moved = True
    return SampleChanges(rev, gpu, proc, rev if moved or not before.procs else before.procs)
