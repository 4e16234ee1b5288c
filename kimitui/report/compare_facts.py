"""What a run is, for ``kimitui compare``: its host, GPUs, model, dtypes, service and campaign settings, each
as one printable value, so that what differs between runs can be named first (an INT4 run against a bf16
one, 1 GPU against 8). All from the fold of the run (``kimitui.report.markdown.digest``) and its header."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from kimitui.core.events import LogLine
from kimitui.report.markdown import RunDigest

_DRIVER = re.compile(r", driver (?P<driver>[^,]+), \d+ GPUs")
"""The driver in the telemetry's first line of a stream (``hosts.telemetry``: agent pid, source, driver, GPUs)."""

UP_FRONT = ("host", "GPUs", "GPU model", "driver", "model", "dtypes", "service", "simulated", "interconnect",
            "all-reduce backend")
"""The facts a comparison is meaningless without: a difference in any is said before the tables."""


@dataclass(slots=True)
class RunFacts:
    label: str
    """A, B, C ... as the compare report's columns name the runs."""
    name: str
    """The run file's name."""
    facts: dict[str, str]
    """Fact -> its value (``UP_FRONT`` first, then the campaign's name and settings, ``settings.PHASE.KEY``)."""


def _gpus(d: RunDigest) -> tuple[str, str]:
    """(count, model) of the GPUs the run's last sample saw; the micro plan's or the cleanup plan's count
    when there is no sample."""
    last = d.sample_at_or_before(d.reader.end_time) if d.sample_idx else None
    if last is not None and last.gpus:
        names = Counter(g.name for g in last.gpus)
        return str(len(last.gpus)), ", ".join(f"{n} x {name}" if len(names) > 1 else name
                                              for name, n in names.most_common())
    for run in d.state.micro_runs:
        if run.plan.gpus:
            return str(len(run.plan.gpus)), "unknown"
    return "unknown", "unknown"


def _driver(d: RunDigest) -> str:
    for i in d.reader.indices_of("log"):
        ev = d.reader.decoded(i)
        if isinstance(ev, LogLine) and ev.source == "telemetry" and (m := _DRIVER.search(ev.message)):
            return m.group("driver")
    return "not recorded"


def _model(d: RunDigest) -> str:
    for run in reversed(d.state.micro_runs):
        if run.plan.model:
            return run.plan.model
    for sweep in reversed(d.state.sweeps):
        title = sweep.title.removeprefix("serving sweep ")
        if title != sweep.title and " at " in title:
            return title.split(" at ", 1)[0]
    c = d.state.campaign
    model = c.plan.settings.get("macro", {}).get("model") if c is not None else None
    return str(model) if model else "unknown"


def _dtypes(d: RunDigest) -> str:
    gemm = sorted({r.dtype for r in d.state.gemm})
    ar = sorted({r.dtype for r in d.state.allreduce})
    parts = ([f"GEMM {', '.join(gemm)}"] if gemm else []) + ([f"all-reduce {', '.join(ar)}"] if ar else [])
    return "; ".join(parts) or "no micro rows"


def _backend(d: RunDigest) -> str:
    for run in reversed(d.state.micro_runs):
        env = run.env.get("allreduce")
        if env is not None and env.backends:
            return "; ".join(f"{k}: {v}" for k, v in env.backends.items())
    return "not measured"


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def run_facts(label: str, d: RunDigest) -> RunFacts:
    h = d.reader.header
    count, model = _gpus(d)
    c = d.state.campaign
    topo = d.state.topology
    facts = {
        "host": h.host or d.state.host or "unknown",
        "GPUs": count,
        "GPU model": model,
        "driver": _driver(d),
        "model": _model(d),
        "dtypes": _dtypes(d),
        "service": (c.plan.service if c is not None and c.plan.service else _plain(h.meta.get("service", "none"))),
        "simulated": "yes" if h.meta.get("simulated") or (topo is not None and topo.simulated) else "no",
        "interconnect": topo.summary if topo is not None else "not read",
        "all-reduce backend": _backend(d),
        "command": _plain(h.meta.get("command", "unknown")),
    }
    if c is not None:
        facts["campaign"] = c.plan.name or "campaign"
        facts["consent policy"] = ", ".join(f"{k} {v}" for k, v in c.plan.consent.items()) or "none given"
        for phase, settings in c.plan.settings.items():
            if isinstance(settings, dict):
                facts.update({f"settings.{phase}.{k}": _plain(v) for k, v in settings.items()})
            else:
                facts[f"settings.{phase}"] = _plain(settings)
    return RunFacts(label, d.reader.path.name, facts)


def differing(runs: list[RunFacts]) -> list[str]:
    """The facts whose values are not the same in every run (a fact one run lacks differs), ``UP_FRONT``
    first, in the order the runs give them."""
    keys: list[str] = []
    for r in runs:
        keys += [k for k in r.facts if k not in keys]
    keys.sort(key=lambda k: (k not in UP_FRONT, UP_FRONT.index(k) if k in UP_FRONT else 0))
    return [k for k in keys if len({r.facts.get(k, "(none)") for r in runs}) > 1]
