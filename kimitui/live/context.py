"""What a live dashboard knows about the host it watches, beyond the event stream: the host itself (to
run a cleanup or restart on it), the default service to free the GPUs from, and the serving endpoint to
benchmark. Replays have none of it: the views render state only, actions need this."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kimitui.hosts.base import Host

if TYPE_CHECKING:
    from kimitui.live.targets import OpenedTarget


@dataclass(slots=True)
class LiveContext:
    host: Host
    label: str
    default_service: str | None = None
    """A service spec as `kimitui cleanup --service` takes it (systemd:UNIT, pidfile:PATH, sim:NAME, ...), if known."""
    api_url: str | None = None
    """The OpenAI-compatible server to benchmark (http://host:port), if known."""
    simulated: bool = False
    sim_dir: str | None = None
    """The simulated driver's folder (a simulated host's micro workers hold their modelled memory there)."""
    nvidia_smi: str = "nvidia-smi"
    """The GPU reset's tool on the host (the simulated host's own stand-in there)."""

    @classmethod
    def of(cls, opened: OpenedTarget, default_service: str | None = None, api_url: str | None = None) -> LiveContext:
        """What an opened target says of itself; ``default_service`` and ``api_url`` override its own (a
        campaign file names them)."""
        facts = opened.facts
        return cls(opened.host, opened.label, default_service=default_service or facts.service,
                   api_url=api_url or facts.api_url, simulated=facts.simulated, sim_dir=opened.sim_dir,
                   nvidia_smi=facts.nvidia_smi or "nvidia-smi")
