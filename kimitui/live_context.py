"""What a live dashboard knows about the host it watches, beyond the event stream: the host itself (to
run a cleanup or restart on it), the default service to free the GPUs from, and the serving endpoint to
benchmark. Replays have none of it: the views render state only, actions need this."""

from __future__ import annotations

from dataclasses import dataclass

from kimitui.hosts.base import Host


@dataclass(slots=True)
class LiveContext:
    host: Host
    label: str
    default_service: str | None = None
    """A service spec as `kimitui cleanup --service` takes it (systemd:UNIT, pidfile:PATH, sim:NAME, ...), if known."""
    api_url: str | None = None
    """The OpenAI-compatible server to benchmark (http://host:port), if known."""
    simulated: bool = False
