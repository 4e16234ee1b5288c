"""The fleet through Prometheus' HTTP API (``kimitui fleet --prometheus URL``): NVIDIA DCGM exporter gauges and
vLLM's request gauges, read-only, one instant query a round (docs/fleet.md says which).

A host is the DCGM series' ``Hostname`` label, else the host part of their ``instance``; vLLM's series join it by
their ``Hostname`` label, else by their ``instance``'s host part matched against the DCGM targets'. A host whose
DCGM target Prometheus could not scrape (``up == 0``) is ``down`` with Prometheus' scrape error; one whose newest
DCGM sample is older than three scrape intervals (15 s when the interval is unknown) is ``stale``; one that was
read once and is missing from a later answer stays, ``stale``, with its last rows. Prometheus itself not answering
is ``SourceDown``.
"""

from __future__ import annotations

import asyncio
import functools
import math
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from kimitui.core.events.fleet import FleetGpu, FleetHost, FleetSource
from kimitui.core.gpu_words import busy_link_words
from kimitui.fleet.reader import SourceDown
from kimitui.hostside.clocks import reasons_words

DCGM_FIELDS = ("FB_USED", "FB_FREE", "FB_RESERVED", "GPU_UTIL", "GPU_TEMP", "POWER_USAGE", "SM_CLOCK", "XID_ERRORS",
               "CLOCK_THROTTLE_REASONS", "CLOCKS_EVENT_REASONS", "PCIE_LINK_GEN", "PCIE_MAX_LINK_GEN",
               "PCIE_LINK_WIDTH", "PCIE_MAX_LINK_WIDTH")
"""The DCGM exporter's fields read (CLOCKS_EVENT_REASONS: DCGM 3.3's name for CLOCK_THROTTLE_REASONS)."""
DCGM_RE = "DCGM_FI_DEV_(" + "|".join(DCGM_FIELDS) + ")"
VLLM_RUNNING, VLLM_WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"
TIME_LABEL = "kimitui_sample_time"
"""Marks the query's second half: each DCGM target's newest sample time (an instant query's values carry the
evaluation time, not the sample's)."""
QUERY = (f'max by (__name__, job, instance, Hostname, gpu) ({{__name__=~"{DCGM_RE}"}}) or '
         f'{{__name__=~"{VLLM_RUNNING}|{VLLM_WAITING}|up"}} or '
         f'label_replace(timestamp(up), "{TIME_LABEL}", "1", "", "")')
"""The whole round: the gauges, every target's ``up``, and when each target was last scraped, in one evaluation.
A scrape writes ``up`` and every series the exporter served at the same time, and a failed one marks those series
stale (they leave the answer), so ``up``'s time is the DCGM samples' time: one series a target where timing the
samples themselves took one a GPU and field (the round's query was a third slower at 32 hosts). The gauges keep
only the labels a row needs: a GPU's model and UUID, which do not change, come from ``INFO_QUERY`` (the answer was
half the size without them)."""
INFO_QUERY = f'max by (job, instance, Hostname, gpu, UUID, modelName) ({{__name__=~"{DCGM_RE}"}})'
"""Each GPU's model name and UUID: asked on the first round, every ``INFO_EVERY`` rounds and after a round that met
a GPU it had not named."""
INFO_EVERY = 60
STALE_INTERVALS = 3
STALE_DEFAULT_S = 15.0
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _num(raw: object) -> float | None:
    """A sample's value; None for NaN, infinities and anything that is not a number."""
    if not isinstance(raw, str | int | float) or isinstance(raw, bool):
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _label(raw: object, limit: int = 256) -> str:
    """A label value as we use it; "" (absent) for one that is not a short printable string."""
    if not isinstance(raw, str) or len(raw) > limit or not raw.isprintable():
        return ""
    return raw.strip()


def host_part(instance: str) -> str:
    """``node7:9400`` -> ``node7``, ``[fd00::7]:9400`` -> ``fd00::7``; a bare host is itself."""
    if instance.startswith("["):
        end = instance.find("]")
        return instance[1:end] if end > 0 else ""
    if instance.count(":") == 1:
        return instance.rsplit(":", 1)[0]
    return instance


def duration_s(text: object) -> float | None:
    """A Prometheus duration (``15s``, ``1m30s``, ``800ms``) in seconds; None when it is not one."""
    if not isinstance(text, str) or not text or _DURATION.sub("", text):
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in _DURATION.findall(text)) or None


def _one_line(text: str, limit: int = 200) -> str:
    return " ".join(text.split())[:limit]


@dataclass(slots=True)
class Series:
    name: str
    labels: dict[str, str]
    value: float | None


@dataclass(slots=True)
class Answer:
    """One query's answer, checked: the series, each DCGM target's newest sample time, the evaluation time."""

    series: list[Series] = field(default_factory=list)
    sample_times: list[tuple[dict[str, str], float]] = field(default_factory=list)
    at: float | None = None
    series_any: list[Series] = field(default_factory=list)
    """Series with no metric name (an aggregation's: ``INFO_QUERY``)."""


def parse_answer(payload: object) -> Answer:
    """The instant query's JSON as an ``Answer``; a series that is not what Prometheus sends is left out.
    ``ValueError`` when the payload as a whole is not a successful vector answer."""
    if not isinstance(payload, dict):
        raise ValueError("the answer is not a JSON object")
    if payload.get("status") != "success":
        raise ValueError(_one_line(f"{payload.get('errorType', 'error')}: {payload.get('error', 'no status')}"))
    data = payload.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise ValueError("the answer is not an instant vector")
    out = Answer()
    for item in data["result"]:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            continue
        pair = item.get("value")
        if not isinstance(pair, list) or len(pair) != 2:
            continue
        at = _num(pair[0])
        if at is None:
            continue
        out.at = at if out.at is None else max(out.at, at)
        labels = item["metric"]
        if not all(type(v) is str for v in labels.values()):  # JSON keys are strings; a value may not be
            labels = {k: v for k, v in labels.items() if isinstance(v, str)}
        value = _num(pair[1])
        if labels.get(TIME_LABEL) == "1":
            if value is not None:
                out.sample_times.append((labels, value))
            continue
        name = labels.get("__name__", "")
        if name:
            out.series.append(Series(name, labels, value))
        else:
            out.series_any.append(Series("", labels, value))
    return out


@dataclass(frozen=True, slots=True)
class TargetInfo:
    health: str
    last_error: str
    interval_s: float | None


def parse_targets(payload: object) -> dict[tuple[str, str], TargetInfo]:
    """``/api/v1/targets``' active targets by (job, instance); {} for anything else."""
    out: dict[tuple[str, str], TargetInfo] = {}
    data = payload.get("data") if isinstance(payload, dict) else None
    active = data.get("activeTargets") if isinstance(data, dict) else None
    if not isinstance(active, list):
        return out
    for t in active:
        labels = t.get("labels") if isinstance(t, dict) else None
        if not isinstance(labels, dict):
            continue
        job, instance = labels.get("job"), labels.get("instance")
        if not isinstance(job, str) or not isinstance(instance, str):
            continue
        err = t.get("lastError")
        out[(job, instance)] = TargetInfo(str(t.get("health", "")), _one_line(err) if isinstance(err, str) else "",
                                          duration_s(t.get("scrapeInterval")))
    return out


@dataclass(slots=True)
class _Gpu:
    index: int
    name: str = ""
    uuid: str = ""
    values: dict[str, float | None] = field(default_factory=dict)

    def row(self) -> FleetGpu:
        v = self.values
        used, free = v.get("FB_USED"), v.get("FB_FREE")
        total = used + free + (v.get("FB_RESERVED") or 0.0) if used is not None and free is not None else None
        xid = v.get("XID_ERRORS")
        mask = v.get("CLOCK_THROTTLE_REASONS", v.get("CLOCKS_EVENT_REASONS"))
        throttle = reasons_words(int(mask)) if mask is not None and 0 <= mask < 2**64 else []
        return FleetGpu(index=self.index, name=self.name, uuid=self.uuid, mem_used_mib=used, mem_total_mib=total,
                        util_pct=v.get("GPU_UTIL"), temp_c=v.get("GPU_TEMP"), power_w=v.get("POWER_USAGE"),
                        sm_clock_mhz=v.get("SM_CLOCK"), holders=None, service_holders=None,
                        xid=int(xid) if xid is not None and 0 <= xid < 2**31 else None, throttle=throttle,
                        link=_link_words(v))


def _link_words(v: dict[str, float | None]) -> str:
    return busy_link_words(v.get("GPU_UTIL"), [v.get(k) for k in ("PCIE_LINK_GEN", "PCIE_LINK_WIDTH",
                                                                  "PCIE_MAX_LINK_GEN", "PCIE_MAX_LINK_WIDTH")])


Target = tuple[str, str]
"""A scrape target: (job, instance)."""


class PrometheusReader:
    """``FleetReader`` over Prometheus at URL (``http://prom:9090``; a path prefix is kept). CLIENT: an
    ``httpx.AsyncClient`` to use (closed by its owner), else one of its own."""

    source: FleetSource = "prometheus"

    def __init__(self, url: str, client: httpx.AsyncClient | None = None) -> None:
        self.url = url.rstrip("/")
        self.where = self.url
        self._client = client
        self._own_client = client is None
        self._dcgm_host: dict[Target, str] = {}
        """Each DCGM target's host, once its series named it (a target that is down has only its ``up``)."""
        self._vllm_targets: set[Target] = set()
        self._dcgm_jobs: set[str] = set()
        self._vllm_jobs: set[str] = set()
        self._intervals: dict[Target, float | None] = {}
        self._last: dict[str, FleetHost] = {}
        self._seen_at: dict[str, float] = {}
        """Each host's newest DCGM sample time (Prometheus' clock)."""
        self._prefetch_targets = True
        self._targets_failed = 0
        self._info: dict[tuple[str, int], tuple[str, str]] = {}
        """(host, gpu index) -> (model name, UUID), from ``INFO_QUERY``."""
        self._info_due = True
        self._rounds = 0

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=30.0)
        return self._client

    async def close(self) -> None:
        if self._own_client and self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    def _down(self, why: str) -> SourceDown:
        return SourceDown(_one_line(f"prometheus at {self.url}: {why}", 300))

    async def _get(self, path: str, params: dict[str, str], method: str = "GET") -> Any:
        try:
            if method == "POST":
                resp = await self.client.post(self.url + path, data=params)
            else:
                resp = await self.client.get(self.url + path, params=params)
        except httpx.ConnectError as exc:
            raise self._down(f"cannot connect ({_one_line(str(exc)) or 'refused'})") from None
        except httpx.HTTPError as exc:
            raise self._down(f"{type(exc).__name__}: {exc}") from None
        try:
            payload = resp.json()
        except ValueError:
            payload = None
        if resp.status_code >= 400:
            said = payload.get("error") if isinstance(payload, dict) else None
            raise self._down(f"HTTP {resp.status_code}: {said or resp.text[:120] or resp.reason_phrase}")
        if payload is None:
            raise self._down(f"{path} did not answer JSON")
        return payload

    async def _targets(self) -> dict[Target, TargetInfo] | None:
        """The targets' word, or None; a Prometheus-alike that keeps failing to say it (Thanos' querier has no
        /api/v1/targets) is not asked again: its down hosts say "target down", its staleness limit is the default."""
        if self._targets_failed >= 3:
            return None
        try:
            found = parse_targets(await self._get("/api/v1/targets", {"state": "active"}))
        except SourceDown:
            self._targets_failed += 1
            return None
        self._targets_failed = 0
        return found

    async def read(self, deadline_s: float) -> list[FleetHost]:
        """One round within DEADLINE_S: the query, and ``/api/v1/targets`` (the scrape errors, the intervals) beside
        it when the last round had a DCGM target down, after it when this one has and it was not asked."""
        end = time.monotonic() + deadline_s
        early = asyncio.ensure_future(self._targets()) if self._prefetch_targets else None
        self._rounds += 1
        info = asyncio.ensure_future(self._names(deadline_s)) if self._info_due or \
            self._rounds % INFO_EVERY == 0 else None
        try:
            answer = await self._answer(deadline_s)
            if info is not None:
                await info
        except BaseException:
            for task in (early, info):
                if task is not None:
                    task.cancel()
            raise
        need = self._learn(answer)
        self._prefetch_targets = need
        targets = None
        if early is not None or need:
            try:
                targets = await asyncio.wait_for(early or self._targets(), max(0.0, end - time.monotonic()))
            except TimeoutError:
                targets = None  # the rows say "target down" this round
        return self.fold(answer, targets)

    async def _names(self, deadline_s: float) -> None:
        """Each GPU's model and UUID (``INFO_QUERY``) into ``_info``; a failure leaves them to the next round."""
        try:
            async with asyncio.timeout(deadline_s):
                answer = parse_answer(await self._get("/api/v1/query", {"query": INFO_QUERY}, "POST"))
        except (TimeoutError, ValueError, SourceDown):
            return
        self._info_due = False
        for s in answer.series_any:
            host, gpu = self._host_of(s.labels), s.labels.get("gpu", "")
            if host and gpu.isascii() and gpu.isdigit() and len(gpu) <= 4:
                self._info[(host, int(gpu))] = (_label(s.labels.get("modelName")), _label(s.labels.get("UUID")))

    async def _answer(self, deadline_s: float) -> Answer:
        try:
            async with asyncio.timeout(deadline_s):
                payload = await self._get("/api/v1/query", {"query": QUERY}, "POST")
            return parse_answer(payload)
        except TimeoutError:
            raise self._down(f"no answer within {deadline_s:g} s") from None
        except ValueError as exc:
            raise self._down(str(exc)) from None

    def _learn(self, answer: Answer) -> bool:
        """Note which targets and jobs are DCGM's and vLLM's; True when ``/api/v1/targets`` has something to say
        (a DCGM target down, or one whose scrape interval is not known yet)."""
        for s in answer.series:
            target = (s.labels.get("job", ""), s.labels.get("instance", ""))
            if s.name.startswith("DCGM_FI_DEV_"):
                host = self._host_of(s.labels)
                if host:
                    self._dcgm_host[target] = host
                    self._dcgm_jobs.add(target[0])
            elif s.name in (VLLM_RUNNING, VLLM_WAITING):
                self._vllm_targets.add(target)
                self._vllm_jobs.add(target[0])
        need = False
        for s in answer.series:
            if s.name == "up" and self._kind_of(s.labels) == "dcgm":
                target = (s.labels.get("job", ""), s.labels.get("instance", ""))
                need = need or s.value != 1 or target not in self._intervals
        return need

    @staticmethod
    @functools.lru_cache(maxsize=65536)
    def _host_named(hostname: str | None, instance: str) -> str:
        return _label(hostname) or _label(host_part(instance))

    @classmethod
    def _host_of(cls, labels: dict[str, str]) -> str:
        """The host a series is of (its ``Hostname``, else its instance's host part), each pair worked out once."""
        return cls._host_named(labels.get("Hostname"), labels.get("instance", ""))

    def _kind_of(self, labels: dict[str, str]) -> str:
        """Whose ``up`` this is: ``dcgm``, ``vllm`` or "" (another job's: node exporters, Prometheus itself)."""
        target = (labels.get("job", ""), labels.get("instance", ""))
        if target in self._dcgm_host:
            return "dcgm"
        if target in self._vllm_targets:
            return "vllm"
        job = target[0]
        if job in self._dcgm_jobs or (job not in self._vllm_jobs and "dcgm" in job.lower()):
            return "dcgm"
        if job in self._vllm_jobs or "vllm" in job.lower():
            return "vllm"
        return ""

    def fold(self, answer: Answer | object, targets: dict[Target, TargetInfo] | None = None) -> list[FleetHost]:
        """The hosts this ANSWER (an ``Answer``, or the query's JSON) says, with the last round's memory; TARGETS:
        ``/api/v1/targets``' word on each target, where fetched. One row per host ever seen, sorted by name."""
        if not isinstance(answer, Answer):
            answer = parse_answer(answer)
            self._learn(answer)
        if targets is not None or self._targets_failed >= 3:
            for key, info in (targets or {}).items():
                self._intervals[key] = info.interval_s
            for s in answer.series:  # asked: a target it did not list has no interval to learn
                if s.name == "up":
                    self._intervals.setdefault((s.labels.get("job", ""), s.labels.get("instance", "")), None)
        now = answer.at if answer.at is not None else time.time()
        gpus: dict[str, dict[int, _Gpu]] = {}
        dcgm_up: dict[str, list[tuple[Target, float | None]]] = {}
        vllm_up: dict[Target, float | None] = {}
        vllm_series: list[Series] = []
        by_address: dict[str, str] = {}
        interval: dict[str, float] = {}
        for s in answer.series:
            target = (s.labels.get("job", ""), s.labels.get("instance", ""))
            if s.name == "up":
                kind = self._kind_of(s.labels)
                if kind == "dcgm":
                    host = self._dcgm_host.get(target) or self._host_of(s.labels)
                    if host:
                        dcgm_up.setdefault(host, []).append((target, s.value))
                elif kind == "vllm":
                    vllm_up[target] = s.value
            elif s.name in (VLLM_RUNNING, VLLM_WAITING):
                vllm_series.append(s)
            elif s.name.startswith("DCGM_FI_DEV_"):
                host = self._host_of(s.labels)
                gpu_label = s.labels.get("gpu", "")
                if not host or not (gpu_label.isascii() and gpu_label.isdigit()) or len(gpu_label) > 4:
                    continue
                index = int(gpu_label)
                gpu = gpus.setdefault(host, {}).setdefault(index, _Gpu(index))
                if not gpu.name:
                    named = self._info.get((host, index))
                    if named is None and "modelName" not in s.labels:
                        self._info_due = True  # a GPU not named yet: the next round asks
                    gpu.name = _label(s.labels.get("modelName")) or (named[0] if named else "")
                    gpu.uuid = _label(s.labels.get("UUID")) or (named[1] if named else "")
                gpu.values[s.name.removeprefix("DCGM_FI_DEV_")] = s.value
                address = host_part(target[1])
                if address:
                    by_address.setdefault(address, host)
                known = self._intervals.get(target)
                if known:
                    interval[host] = known
        newest: dict[str, float] = {}
        for labels, at in answer.sample_times:
            host = self._dcgm_host.get((labels.get("job", ""), labels.get("instance", "")), "")
            if host:
                newest[host] = max(at, newest.get(host, at))
        running: dict[str, float] = {}
        waiting: dict[str, float] = {}
        service: dict[str, bool] = {}
        for s in vllm_series:
            host = _label(s.labels.get("Hostname")) or by_address.get(host_part(s.labels.get("instance", "")), "")
            if not host:
                continue  # a vLLM on no DCGM host we know of
            target = (s.labels.get("job", ""), s.labels.get("instance", ""))
            service[host] = service.get(host, False) or vllm_up.get(target) == 1
            if s.value is not None:
                sums = running if s.name == VLLM_RUNNING else waiting
                sums[host] = sums.get(host, 0.0) + s.value

        rows: dict[str, FleetHost] = {}
        for host in sorted(set(gpus) | set(dcgm_up) | set(self._last)):
            if host in newest:
                self._seen_at[host] = max(newest[host], self._seen_at.get(host, newest[host]))
            seen = self._seen_at.get(host)
            age = round(max(0.0, now - seen), 3) if seen is not None else None
            ups = dcgm_up.get(host, [])
            down = [t for t, v in ups if v != 1]
            rows_now = [g.row() for _, g in sorted(gpus.get(host, {}).items())]
            last = self._last.get(host)
            kept = rows_now or (last.gpus if last is not None else [])
            row = FleetHost(host, "up", "", kept, requests_running=running.get(host),
                            requests_waiting=waiting.get(host), service="vllm" if service.get(host) else "", age_s=age)
            if down and (not rows_now or len(down) == len(ups)):
                info = (targets or {}).get(down[0])
                row = replace(row, state="down", detail=_one_line(
                    f"scrape failed: {info.last_error}" if info is not None and info.last_error else "target down"))
            elif rows_now:
                limit = STALE_INTERVALS * interval[host] if host in interval else STALE_DEFAULT_S
                if age is not None and age > limit:
                    row = replace(row, state="stale", detail=f"newest sample {age:.0f} s old (over {limit:g} s)")
            elif ups:
                row = replace(row, state="stale", detail="its target answers without DCGM series")
            elif last is not None:  # gone from the answer: its last row, as it was
                said = f"{age:.0f} s ago" if age is not None else "before"
                row = replace(last, state="stale", detail=f"not in Prometheus' answer; last read {said}", age_s=age)
            rows[host] = row
            if rows_now or last is None:
                self._last[host] = row
        return list(rows.values())


__all__ = ["QUERY", "Answer", "PrometheusReader", "TargetInfo", "duration_s", "host_part", "parse_answer",
           "parse_targets"]
