"""Before a campaign records anything: what a typo in its file would otherwise show an hour in (the service on
the host, the GPUs in scope, the API's host name), and the model it measures (``served_model``)."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from kimitui.campaign.config import CampaignConfig
from kimitui.campaign.setup import CampaignHost, campaign_service
from kimitui.cleanup.setup import UsageError, parse_gpus
from kimitui.core.campaign_state import PHASE_TITLES
from kimitui.core.campaign_words import served_words

if TYPE_CHECKING:
    from kimitui.core.events import ServedModel
    from kimitui.core.state import SessionState


async def preflight(cfg: CampaignConfig, target: CampaignHost, todo: list[str], gpus_on_host: Callable[
        [], Awaitable[list[int]]], resumed: SessionState | None = None) -> ServedModel | None:
    """Before anything is recorded, what a typo in the file would otherwise show an hour in: the service
    is on the host (looked up as the cleanup does), every GPU in scope exists; and the model the campaign
    measures (``served_model.identify``; a resumed campaign's is the one it recorded: None). Raises
    UsageError (one line)."""
    from kimitui.cleanup.services import ServiceNotFound
    from kimitui.cleanup.setup import check_gpus

    service = campaign_service(cfg, target.simulated, (cfg.api_url or target.api_url).rstrip("/"))
    located: list[int] | None = None
    if service is not None and "cleanup" in todo:  # a resumed restart may find a pid service gone: it was stopped
        try:
            located = (await service.locate(target.host)).pids
        except ServiceNotFound as exc:
            raise UsageError(f"{cfg.file}: [service] spec {cfg.service or service.label!r}: {exc}") from None
    wanted = parse_gpus(cfg.cleanup.gpus)
    if wanted is not None:
        check_gpus(wanted, await gpus_on_host(), target.label, f"{cfg.file}: [cleanup] gpus")
    warning = await reach_api(cfg, target, todo)
    if warning:
        print(f"kimitui campaign: {warning}", file=sys.stderr)
    if resumed is not None and resumed.served_model is not None:
        return None
    from kimitui.campaign.served_model import ModelUnknown, identify_served

    try:  # the service's pids as located above, not looked up a second time
        served = await identify_served(cfg, target.host, (cfg.api_url or target.api_url).rstrip("/"), service,
                                       needed=bool({"micro", "analysis"} & set(todo)), pids=located)
    except ModelUnknown as exc:
        raise UsageError(str(exc)) from None
    print(f"kimitui campaign: the model measured: {served_words(served)}", file=sys.stderr)
    return served


API_PHASES = ("macro", "check")
"""The phases that talk to the service's OpenAI-compatible API."""


async def reach_api(cfg: CampaignConfig, target: CampaignHost, todo: list[str], timeout_s: float = 10.0) -> str:
    """The API the campaign will use, reached once (``GET /v1/models``; any HTTP answer will do) before
    Phase 1: a host name that does not resolve is a usage error (UsageError: a typo or the --init example's
    host left in), not a Phase 1 that fails an hour in. Any other failure to connect is returned as a warning
    when the first phase to run needs the server (a later one may follow the restart); "" when all is well."""
    import httpx

    from kimitui.bench.macro.transport import ssl_context
    from kimitui.core.error_words import exc_words, resolver_words, unresolved

    api_url = (cfg.api_url or target.api_url).rstrip("/")
    if not api_url or not any(p in API_PHASES for p in todo):
        return ""
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), verify=ssl_context()) as client:
            await client.get(f"{api_url}/v1/models")
    except (httpx.HTTPError, OSError) as exc:
        gai = unresolved(exc)
        if gai is not None:
            name = httpx.URL(api_url).host or api_url
            hint = ("leave api_url out with host = \"demo\": the simulated host's own server is used"
                    if target.simulated and cfg.api_url else "is the host name right?")
            raise UsageError(f"{cfg.file}: [service] api_url {api_url}: cannot resolve {name} "
                             f"({resolver_words(gai)}): {hint}") from None
        if todo[0] in API_PHASES:
            return (f"[service] api_url {api_url} does not answer ({exc_words(exc)}): "
                    f"{PHASE_TITLES.get(todo[0], todo[0])} will fail unless the server is up by then")
    return ""
