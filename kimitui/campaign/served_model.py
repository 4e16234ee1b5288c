"""The model the campaign measures, known before Phase 1 and recorded (``ServedModel``).

In order: the campaign file's ``[model] config`` (a path on the host); else the server's own word: the names
``/v1/models`` gives (``root``, then ``id``, of the model Phase 1 sends its requests to) and the name in
``[macro] model``, each looked for on the host as the server sees its files (the agent's ``model_config``: a
folder, or the HF cache its processes use); else ``[model] preset``. A model found nowhere is said before
Phase 1: a campaign with a Phase 2 refuses to start (one line naming what was tried and what to write),
never measuring another model's shapes in its place.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from typing import TYPE_CHECKING, Any

from kimitui.core.events import ServedModel

if TYPE_CHECKING:
    from kimitui.campaign.config import CampaignConfig
    from kimitui.cleanup.services import ServiceManager
    from kimitui.hosts.base import Host

MODELS_TIMEOUT_S = 10.0
NAME_IT = 'name it in [model] (preset = "kimi-k2.5", or config = PATH of its config.json on the host)'


class ModelUnknown(Exception):
    """The served model could not be identified and a phase needs it (one line)."""


class NoAnswer(str):
    """Why there are no names: the server did not answer (it may be up later), not that it named nothing."""


async def server_names(api_url: str, wanted: str = "") -> tuple[list[str], str]:
    """The names the server gives its model (``root`` then ``id``; of ``wanted`` when it lists that one, else
    of the first listed), and "" or why there are none (a NoAnswer when nothing answered)."""
    import httpx

    from kimitui.bench.macro.transport import ssl_context
    from kimitui.core.error_words import exc_words

    if not api_url:
        return [], NoAnswer("no API URL")
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(MODELS_TIMEOUT_S), verify=ssl_context()) as client:
            resp = await client.get(f"{api_url.rstrip('/')}/v1/models")
    except (httpx.HTTPError, OSError) as exc:
        return [], NoAnswer(f"{api_url}/v1/models: {exc_words(exc)}")
    if resp.status_code != 200:
        return [], f"{api_url}/v1/models: HTTP {resp.status_code}"
    try:
        listed = resp.json().get("data")
    except (ValueError, AttributeError):
        return [], f"{api_url}/v1/models: not the OpenAI models list"
    entries = [e for e in listed if isinstance(e, dict)] if isinstance(listed, list) else []
    if not entries:
        return [], f"{api_url}/v1/models lists no model"
    entry = next((e for e in entries if wanted and wanted in (e.get("id"), e.get("root"))), entries[0])
    names = [str(entry[k]) for k in ("root", "id") if isinstance(entry.get(k), str) and entry[k]]
    return list(dict.fromkeys(names)), ""


async def find_on_host(host: Host, names: list[str], pids: list[int]) -> tuple[dict[str, Any] | None, str, str]:
    """(config, where it was read, "") for the first name found on the host, else (None, "", what was tried)."""
    from kimitui.bench.micro.shape_families import family_of
    from kimitui.bench.micro.shapes import ShapeError

    res = await host.request("model_config", {"names": names, "pids": pids})
    found = res.get("found")
    tried = "; ".join(f"{path}: {why}" for path, why in res.get("tried") or [])
    if not found:
        return None, "", tried or "nothing to look at"
    path = f"{found['path']} ({found['where']})"
    try:
        data = json.loads(base64.b64decode(found["data"]))
    except ValueError as exc:
        return None, "", f"{path}: not JSON ({exc})"
    if not isinstance(data, dict):
        return None, "", f"{path}: not a JSON object"
    try:
        family_of(data)
    except ShapeError as exc:
        return None, "", f"{path}: {exc}"
    return data, path, ""


def described(data: dict[str, Any], name: str, source: str, tp: int, expert_parallel: bool,
              names: list[str], note: str, needed: bool = True) -> ServedModel:
    """The event for a config (its shapes at ``tp`` checked now: a TP the model does not split over is a
    ModelUnknown where a phase needs the shapes, else said in the note)."""
    from kimitui.bench.micro.shapes import ShapeError, shapes_for

    data = dict(data, _name=name)
    try:
        plan = shapes_for(data, tp, expert_parallel)
    except ShapeError as exc:
        if needed:
            raise ModelUnknown(f"{source}: at TP={tp}: {exc}") from None
        return ServedModel(time.time(), name=name, source=source, tp=tp, expert_parallel=expert_parallel,
                           config=data, server_names=names, note="; ".join(filter(None, [note, f"at TP={tp}: {exc}"])))
    return ServedModel(time.time(), name=plan.model, source=source, family=plan.family, tp=tp,
                       expert_parallel=expert_parallel, config=data, params_total=plan.params_total,
                       params_active=plan.params_active, server_names=names, note=note)


async def identify(cfg: CampaignConfig, host: Host, api_url: str, pids: list[int], needed: bool) -> ServedModel:
    """The campaign's model (see the module's docstring). ``needed``: a phase measures or divides its shapes,
    so a model found nowhere raises ModelUnknown; otherwise it is recorded unidentified, with why."""
    from kimitui.bench.micro.presets import preset

    mo, tp = cfg.model, cfg.tp()
    if mo.config:
        data, where, why = await find_on_host(host, [mo.config], [])
        if data is None:
            raise ModelUnknown(f"{cfg.file}: [model] config {mo.config}: {why}")
        return described(data, _short(mo.config), f"[model] config {where}", tp, mo.expert_parallel, [], "", needed)
    names, why_none = await server_names(api_url, cfg.macro.model)
    looked = list(dict.fromkeys(names + ([cfg.macro.model] if cfg.macro.model else [])))
    tried = why_none
    if looked:
        data, where, tried = await find_on_host(host, looked, pids)
        if data is not None:
            name = _short(names[-1] if names else cfg.macro.model)
            source = f"the server's {' / '.join(names) or cfg.macro.model}: {where}"
            note = ""
            if mo.preset and preset(mo.preset).get("_name") != name:
                note = f"[model] preset {mo.preset} is not measured: the server serves {name}"
            return described(data, name, source, tp, mo.expert_parallel, names, note, needed)
    said = f"the served model ({' / '.join(looked) or 'unnamed'}) was not found on the host ({tried})"
    if mo.preset:
        return described(preset(mo.preset), str(preset(mo.preset)["_name"]), f"[model] preset {mo.preset}", tp,
                         mo.expert_parallel, names, said, needed)
    if isinstance(why_none, NoAnswer):  # a server down now: asked again once Phase 1 has reached it
        return ServedModel(time.time(), source="not identified", tp=tp, note=f"{said}: looked for again once the "
                           "server answers")
    if needed:
        raise ModelUnknown(f"{cfg.file}: {said}: {NAME_IT}")
    return ServedModel(time.time(), source="not identified", tp=tp, server_names=names, note=said)


def _short(path: str) -> str:
    """A model's name from its path: the folder that holds its config (an HF id is left as it is)."""
    if not path.startswith(("/", ".", "~")) and not path.endswith(".json"):
        return path
    parts = [p for p in path.rstrip("/").split("/") if p]
    if parts and parts[-1].endswith(".json"):
        parts = parts[:-1]
    return parts[-1] if parts else path


async def identify_served(cfg: CampaignConfig, host: Host, api_url: str, service: ServiceManager | None,
                          needed: bool, pids: list[int] | None = None) -> ServedModel:
    """``identify``, looking as the service's processes see their files (``pids``: as its manager named them
    already; None: asked here)."""
    from kimitui.cleanup.services import ServiceNotFound

    if pids is None and service is not None:
        pids = []
        with contextlib.suppress(ServiceNotFound):
            pids = (await service.locate(host)).pids
    return await identify(cfg, host, api_url, pids or [], needed)
