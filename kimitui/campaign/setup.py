"""What a campaign works with, apart from its phases: the host it runs on (``CampaignHost``), the service it
stops and restarts (``campaign_service``), and consent from its file's policy (``policy_consent``: also what
``kimitui bench micro`` answers with on a simulated host)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kimitui.campaign.config import CampaignConfig
from kimitui.cleanup.consent import ConsentCallback, ConsentDecision
from kimitui.cleanup.last_steps import GPUS_HELD
from kimitui.cleanup.services import ServiceManager
from kimitui.cleanup.setup import UsageError, parse_service
from kimitui.core.events import StepPreview
from kimitui.hosts.base import Host


@dataclass(slots=True)
class CampaignHost:
    """The host a campaign runs on, opened (``kimitui.live.targets.open_target``)."""

    host: Host
    label: str
    simulated: bool = False
    sim_dir: str | None = None
    api_url: str = ""
    """The simulated host's server (a real host's comes from the campaign file)."""
    nvidia_smi: str = "nvidia-smi"
    """The GPU reset's tool on the host (the simulated host's own stand-in there)."""


def campaign_service(cfg: CampaignConfig, simulated: bool, api_url: str) -> ServiceManager | None:
    """The service the campaign stops and restarts (the simulated host's own by default there)."""
    spec = cfg.service or ("sim:vllm" if simulated else "none")
    health = cfg.health_url or None
    if health is None and api_url and not spec.startswith("sim:"):
        health = f"{api_url}/health"
    try:
        return parse_service(spec, health)
    except UsageError as exc:
        raise UsageError(f"{cfg.file}: [service] spec: {exc}") from None


def policy_consent(policy: dict[str, str], ask: ConsentCallback | None, operator: str,
                   aborting: Callable[[], bool]) -> ConsentCallback:
    """Consent from the campaign's policy: ``yes`` and ``no`` answer at once (recorded as the file's),
    ``ask`` asks (the dashboard's modal). While aborting only the restart offer is answered (by
    ``abort_restart``); every other step is declined."""

    async def decide(preview: StepPreview) -> ConsentDecision:
        key = "abort_restart" if preview.step == "restart" and aborting() else preview.step
        if aborting() and key != "abort_restart":
            return ConsentDecision(False, None, operator, "campaign aborted: the remaining steps are declined")
        answer = policy.get(key, "ask")
        if answer == "yes" and preview.step == "restart" and preview.action.startswith(GPUS_HELD):
            answer = "ask"  # the file's yes was for a start on free GPUs: one beside the old processes is asked
            if ask is None:
                return ConsentDecision(False, None, operator, f"campaign policy: {key} = yes covers a start on "
                                       "free GPUs; they still hold memory: finish the cleanup first")
        if answer == "yes":
            return ConsentDecision(True, None, operator, f"campaign policy: {key} = yes")
        if answer == "no":
            return ConsentDecision(False, None, operator, f"campaign policy: {key} = no")
        if ask is None:
            return ConsentDecision(False, None, operator, f"campaign policy: {key} = ask, and no one to ask")
        return await ask(preview)

    return decide
