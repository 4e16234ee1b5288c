"""A campaign on a real simulated host, in the test's own event loop: SimHost (real processes, a real
OpenAI-compatible server on loopback), the real agent's telemetry, a recorded session, the machine."""

from __future__ import annotations

import contextlib
import tomllib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimitui.campaign.config import CampaignConfig, parse_config
from kimitui.campaign.machine import Campaign
from kimitui.campaign.preflight import preflight
from kimitui.campaign.resume import ResumePlan
from kimitui.campaign.setup import CampaignHost
from kimitui.cleanup.audit import AuditLog
from kimitui.cleanup.sample_feed import SampleFeed
from kimitui.core.events import Event
from kimitui.core.runfile import RunWriter
from kimitui.core.session import Session
from kimitui.hosts.sim.batching import BatchingModel
from kimitui.hosts.sim.host import SimHost
from kimitui.hosts.sim.quirks import EngineQuirks
from kimitui.hosts.telemetry import TelemetrySource

POLL_S = 0.05

SMALL = """
[campaign]
name = "test campaign"
host = "demo"
sample_interval_s = 0.2
operator = "tester"
[service]
spec = "sim:vllm"
[consent]
drain = "yes"
graceful = "yes"
process = "yes"
others = "yes"
device = "yes"
reset = "no"
restart = "yes"
abort_restart = "yes"
[macro]
concurrency = [1, 4]
requests = "1x"
max_tokens = 12
input_len = 16
warmup = 0
[cleanup]
graceful_s = 1
term_grace_s = 0.5
verify_s = 5
drain_s = 5
[micro]
ms = [1, 4]
sweep_max_bytes = 16384
[restart]
health_s = 30
[check]
requests = 2
# Wide margins: the probe and Phase 1 each measure a 20 ms TTFT and 50 tok/s on a machine whose load
# changes between them (a busy 2-core machine adds tens of ms to a TTFT). The drift tests set their own.
margin_pct = 40
ttft_margin_pct = 300
"""


def small_config(phases: list[str] | None = None, **sections: dict[str, Any]) -> CampaignConfig:
    """The small test campaign; ``sections`` override keys of a section, e.g. consent={"process": "no"}."""
    data = tomllib.loads(SMALL)
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    if phases is not None:
        data["campaign"]["phases"] = phases
    return parse_config(data, "test.toml")


@dataclass
class Rig:
    host: SimHost
    session: Session
    machine: Campaign
    path: Path
    source: TelemetrySource
    events: list[Event] = field(default_factory=list)

    def of(self, cls: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]


@contextlib.asynccontextmanager
async def campaign_rig(cfg: CampaignConfig, tmp_path: Path, *, gpus: int = 2, stuck: int = 1,
                       batching: BatchingModel | None = None, app_pumps: bool = False,
                       quirks: str = "", resume: ResumePlan | None = None) -> AsyncIterator[Rig]:
    """``app_pumps``: the telemetry is left for a dashboard to pump (``rig.source`` in its sources), as
    ``kimitui campaign`` does; the feed then reads the session. ``quirks``: the simulated server's
    (kimitui/hosts/sim/quirks.py), e.g. ``cold=4``. ``resume``: the machine resumes that plan (its events go
    to this rig's own run)."""
    async with SimHost(gpus=gpus, stuck_workers=stuck, nvml_monitor=True, load_time=0.05, name="demo",
                       batching=batching, quirks=EngineQuirks.parse(quirks)) as host:
        path = tmp_path / "run.jsonl"
        session = Session(RunWriter(path, host="demo", meta={"command": "campaign"}))
        source = TelemetrySource(host, 0.2, sim_dir=host.sim_dir, dev_prefix=host.dev_prefix, scan_interval=0.2)
        feed = SampleFeed()
        if app_pumps:
            session.subscribe(feed.push)
        else:
            feed.follow(source.events(), publish=session.publish)
        try:
            if not app_pumps:
                await feed.latest(timeout=15)
            target = CampaignHost(host, "demo", simulated=True, sim_dir=host.sim_dir, api_url=host.api_url)

            async def gpus_on_host() -> list[int]:
                return [g.index for g in host.gpus]

            served = await preflight(cfg, target, list(cfg.phases), gpus_on_host)  # as kimitui campaign does
            machine = Campaign(cfg, session, target, feed, operator="tester", headless=True,
                               audit_factory=lambda: AuditLog(tmp_path / "audit.log"), served=served,
                               resume=resume)
            rig = Rig(host, session, machine, path, source)
            session.subscribe(rig.events.append)
            yield rig
        finally:
            source.stop()
            await feed.stop()
            session.close()
