"""Issue 39, the Prometheus source: a REAL Prometheus (Debian's, ``scripts/ci_prometheus_deps.sh``) started once for
the module, scraping the demo's simulated hosts (``python -m kimitui.fleet.demo_hosts``: DCGM exporter text and
vLLM's gauges) every second, and ``PrometheusReader`` reading the fleet through its HTTP API. Beside them a small
odd exporter of our own serves what a real one should not (a NaN, a series without ``gpu``, one whose
``Hostname`` is not a name), so that the real answer carries it. A host told ``down`` or ``slow`` shows as
Prometheus recorded its scrape; Prometheus stopped is ``SourceDown``. The parser is also tested on a captured
answer (tests/fixtures/prometheus/, made by running this file: ``.venv/bin/python tests/test_fleet_prometheus.py``).
Without the binary the tests fail with the install hint, never skip.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import select
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kimitui.core.events.fleet import FleetHost  # noqa: E402 (the clone's root first, when run as a script)
from kimitui.fleet.demo_model import GPU_NAME, ORPHAN_MIB, SERVICE_MIB, TOTAL_MIB, demo_hosts  # noqa: E402
from kimitui.fleet.prometheus import INFO_QUERY, QUERY, PrometheusReader, parse_answer, parse_targets  # noqa: E402
from kimitui.fleet.prometheus_server import (  # noqa: E402
    PrometheusMissing,
    PrometheusServer,
    ScrapeTarget,
    find_prometheus,
    start_prometheus,
)
from kimitui.fleet.reader import SourceDown, rounds  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "prometheus"
COUNT = 8
WAIT_S = 30.0

ODD_TEXT = """\
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-odd-0",modelName="Odd GPU",Hostname="odd-01"} NaN
DCGM_FI_DEV_GPU_TEMP{gpu="2",UUID="GPU-odd-2",Hostname="bad\\nhost"} 40
DCGM_FI_DEV_GPU_TEMP{gpu="x",UUID="GPU-odd-x",Hostname="odd-01"} 41
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-odd-0",modelName="Odd GPU",Hostname="odd-01"} 1024
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-odd-0",modelName="Odd GPU",Hostname="odd-01"} 3072
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-odd-0",modelName="Odd GPU",Hostname="odd-01"} +Inf
DCGM_FI_DEV_GPU_UTIL{gpu="1"} 50
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{UUID="GPU-odd-0",Hostname="odd-01"} 300
"""
"""An exporter that says odd things: GPU 0's temperature NaN and its utilization +Inf (both None), a series with
no ``gpu`` label and one whose ``gpu`` is not a number (left out), a GPU whose ``Hostname`` holds a newline and
one with no labels but ``gpu`` (both keyed by the target's address, 127.0.0.1)."""


class OddExporter:
    """ODD_TEXT on a loopback port, in a thread of the test process."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = ODD_TEXT.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class DemoHosts:
    """``python -m kimitui.fleet.demo_hosts --count N``, told ``down``/``up``/``slow`` through its stdin."""

    def __init__(self, count: int) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "kimitui.fleet.demo_hosts", "--count", str(count)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
                                     start_new_session=True)
        try:
            self.ports = {str(h["name"]): int(h["port"]) for h in json.loads(self._line())["hosts"]}
        except BaseException:
            self.close()
            raise

    def _line(self) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], WAIT_S)
        assert ready, "the demo hosts did not answer"
        return self.proc.stdout.readline()

    def tell(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        assert json.loads(self._line()) == {"done": line}

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Fleet:
    def __init__(self, hosts: DemoHosts, odd: OddExporter, prom: PrometheusServer) -> None:
        self.hosts, self.odd, self.prom = hosts, odd, prom


@contextlib.contextmanager
def running_fleet(count: int) -> Iterator[Fleet]:
    """The demo hosts, the odd exporter and a Prometheus scraping them all; everything ended on exit."""
    find_prometheus_or_fail()
    with contextlib.ExitStack() as stack:
        hosts = DemoHosts(count)
        stack.callback(hosts.close)
        odd = OddExporter()
        stack.callback(odd.close)
        targets = [ScrapeTarget(name, f"127.0.0.1:{port}") for name, port in hosts.ports.items()]
        prom = start_prometheus([*targets, ScrapeTarget("", odd.address, vllm=False)])
        stack.callback(prom.stop)
        yield Fleet(hosts, odd, prom)


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    with running_fleet(COUNT) as f:
        yield f


def by_name(hosts: list[FleetHost]) -> dict[str, FleetHost]:
    return {h.name: h for h in hosts}


def summary(hosts: list[FleetHost]) -> str:
    return "; ".join(f"{h.name} {h.state} {h.detail} gpus={len(h.gpus)}" for h in hosts)


ROUND_POLL_S = 0.2
"""Between two rounds read while waiting for a condition (a second's scrape interval: a few polls a scrape)."""


async def until(reader: PrometheusReader, cond: Callable[[dict[str, FleetHost]], bool], what: str,
                timeout: float = WAIT_S) -> dict[str, FleetHost]:
    """Read rounds until COND holds of one (polling, never a fixed wait)."""
    end = time.monotonic() + timeout
    while True:
        hosts = by_name(await reader.read(5.0))
        if cond(hosts):
            return hosts
        assert time.monotonic() < end, f"{what}: not within {timeout:g} s; last round: {summary(list(hosts.values()))}"
        await asyncio.sleep(ROUND_POLL_S)


DEMO = [f"demo-{i:02d}" for i in range(1, COUNT + 1)]


def all_up(hosts: dict[str, FleetHost], names: list[str] = DEMO) -> bool:
    return all(n in hosts and hosts[n].state == "up" and len(hosts[n].gpus) == 8 for n in names)


def check_demo_figures(hosts: dict[str, FleetHost], names: list[str]) -> None:
    """Each host's GPUs as the demo's model has them: the fixed figures equal, the moving ones (a function of the
    scrape's time) in the model's relation to each other, which holds within one scrape."""
    model = {h.name: h for h in demo_hosts(COUNT)}
    for name in names:
        got, want = hosts[name], model[name]
        assert [g.index for g in got.gpus] == list(range(8)), name
        if want.service:
            assert got.service == "vllm", name
            assert got.requests_running is not None and 0 <= got.requests_running <= 64, name
            assert got.requests_waiting is not None and got.requests_waiting >= 0, name
        else:
            assert (got.service, got.requests_running, got.requests_waiting) == ("", None, None), name
        assert got.age_s is not None and 0 <= got.age_s < 5, (name, got.age_s)
        for g, w in zip(got.gpus, want.gpus, strict=True):
            where = (name, g.index)
            assert (g.name, g.uuid, g.xid) == (GPU_NAME, w.uuid, w.xid), where
            assert g.mem_total_mib == TOTAL_MIB, where
            assert g.mem_used_mib == (SERVICE_MIB if want.service else 0.0) + w.orphans * ORPHAN_MIB, where
            assert (g.holders, g.service_holders) == (None, None), where
            assert g.util_pct is not None and 0 <= g.util_pct <= 100, where
            util = g.util_pct
            on = w.capped and want.service
            assert g.power_w == pytest.approx(round(95.0 + 5.05 * util * (0.92 if on else 1.0), 1)), where
            assert g.temp_c == pytest.approx(round(34.0 + 0.42 * util + (6.0 if on else 0.0), 1)), where
            capped = w.capped and want.service
            assert g.sm_clock_mhz == (2235.0 if capped else 2617.0), where
            assert g.throttle == (["power cap"] if capped else []), where
            assert g.link == ("" if w.link == (5, 16) else f"PCIe Gen{w.link[0]} x{w.link[1]} of Gen5 x16"), where


def check_odd(hosts: dict[str, FleetHost]) -> None:
    odd = hosts["odd-01"]
    assert odd.state == "up" and odd.service == "" and odd.requests_running is None
    assert [g.index for g in odd.gpus] == [0]
    g = odd.gpus[0]
    assert (g.name, g.uuid, g.mem_used_mib, g.mem_total_mib) == ("Odd GPU", "GPU-odd-0", 1024.0, 4096.0)
    assert (g.temp_c, g.util_pct, g.power_w, g.throttle, g.link, g.xid) == (None, None, None, [], "", None)
    by_address = hosts["127.0.0.1"]
    assert [(g.index, g.uuid, g.util_pct, g.temp_c) for g in by_address.gpus] == [
        (1, "", 50.0, None), (2, "GPU-odd-2", None, 40.0)]


async def test_eight_hosts_read_with_their_figures(fleet: Fleet) -> None:
    reader = PrometheusReader(fleet.prom.url)
    try:
        assert (reader.source, reader.where) == ("prometheus", fleet.prom.url)
        hosts = await until(reader, lambda h: all_up(h) and "odd-01" in h, "8 demo hosts up")
        assert sorted(hosts) == sorted([*DEMO, "odd-01", "127.0.0.1"])
        check_demo_figures(hosts, DEMO)
        check_odd(hosts)
        assert sum(len(h.gpus) for n, h in hosts.items() if n in DEMO) == 64
    finally:
        await reader.close()


async def test_host_down_then_up(fleet: Fleet) -> None:
    reader = PrometheusReader(fleet.prom.url)
    try:
        await until(reader, all_up, "all up")
        fleet.hosts.tell("down demo-05")
        try:
            # Its two targets (DCGM, vLLM) are scraped apart: wait for both to have failed.
            hosts = await until(reader, lambda h: h["demo-05"].state == "down" and h["demo-05"].service == "",
                                "demo-05 down")
            down = hosts["demo-05"]
            # Prometheus' own scrape error, from /api/v1/targets.
            assert "connection refused" in down.detail and down.detail.startswith("scrape failed: "), down.detail
            assert len(down.gpus) == 8 and down.age_s is not None  # its last rows kept, with their age
            assert all_up(hosts, [n for n in DEMO if n != "demo-05"]), summary(list(hosts.values()))
        finally:
            fleet.hosts.tell("up demo-05")
        hosts = await until(reader, lambda h: all_up(h) and h["demo-05"].service == "vllm", "demo-05 back up")
        assert hosts["demo-05"].detail == ""
    finally:
        await reader.close()


async def test_slow_host_is_down_as_prometheus_records_it(fleet: Fleet) -> None:
    """A host that answers after the scrape timeout (0.8 s): Prometheus records the scrape as failed (``up`` 0,
    ``context deadline exceeded``) and drops its series, so it is ``down`` with that error, not ``stale``; the
    others stay up in the same round."""
    reader = PrometheusReader(fleet.prom.url)
    try:
        await until(reader, all_up, "all up")
        fleet.hosts.tell("slow demo-06 2")
        try:
            hosts = await until(reader, lambda h: h["demo-06"].state == "down", "demo-06 down")
            assert "context deadline exceeded" in hosts["demo-06"].detail, hosts["demo-06"].detail
            assert all_up(hosts, [n for n in DEMO if n != "demo-06"]), summary(list(hosts.values()))
        finally:
            fleet.hosts.tell("slow demo-06 0")
        await until(reader, all_up, "demo-06 back up")
    finally:
        await reader.close()


async def test_prometheus_stopped_is_source_down() -> None:
    find_prometheus_or_fail()
    prom = start_prometheus([])
    reader = PrometheusReader(prom.url)
    try:
        seen = []
        async for sample in rounds(reader, interval=0.2, count=2):
            seen.append(sample)
            if sample.seq == 0:
                assert sample.error == "" and sample.hosts == []
                await prom.aclose()
        assert seen[1].error.startswith(f"prometheus at {prom.url}: cannot connect"), seen[1].error
        with pytest.raises(SourceDown) as info:
            await reader.read(1.0)
        assert "\n" not in str(info.value)
        assert prom.pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(prom.pid, 0)  # ended and reaped
        assert not prom.folder.exists()
    finally:
        prom.stop()
        await reader.close()


def test_prometheus_ends_with_the_process_that_started_it(tmp_path: Path) -> None:
    """Killed outright, the starter cannot stop its prometheus: the watch around it does, as the pipe closes."""
    find_prometheus_or_fail()
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from kimitui.fleet.prometheus_server import "
            "start_prometheus; p = start_prometheus([]); print(p.pid, p.folder, flush=True); sys.stdin.read()")
    starter = subprocess.Popen([sys.executable, "-c", code, str(ROOT)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert starter.stdout is not None
        ready, _, _ = select.select([starter.stdout], [], [], WAIT_S)
        assert ready, "the starter did not start prometheus"
        pid_text, folder = starter.stdout.readline().split()
        pid = int(pid_text)
        os.kill(pid, 0)  # running
        starter.kill()
        starter.wait()
        def gone() -> bool:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            return False

        wait_until(gone, f"prometheus {pid} to end after its starter was killed", WAIT_S)
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait()
    shutil.rmtree(folder, ignore_errors=True)  # the starter, killed, could not remove it


def find_prometheus_or_fail() -> None:
    try:
        find_prometheus()
        return
    except PrometheusMissing as exc:
        hint = str(exc)
    pytest.fail(hint, pytrace=False)  # not a skip: the suite's machine is to have it (scripts/ci_prometheus_deps.sh)


def test_missing_binary_fails_with_the_install_hint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("KIMITUI_PROMETHEUS_DIR", str(tmp_path / "none"))
    with pytest.raises(PrometheusMissing) as info:
        find_prometheus()
    said = str(info.value)
    assert "\n" not in said and "apt-get install prometheus" in said and "ci_prometheus_deps.sh" in said


# The captured answer: 4 demo hosts (so that the troubled ones are there) with demo-01 down, and the odd exporter.


def load(name: str) -> object:
    return json.loads((FIXTURES / name).read_text())


def test_parser_on_a_captured_answer() -> None:
    answer, targets = load("query.json"), parse_targets(load("targets.json"))
    reader = PrometheusReader("http://prometheus.invalid:9090")
    hosts = by_name(reader.fold(answer, targets))
    assert sorted(hosts) == ["127.0.0.1", "demo-01", "demo-02", "demo-03", "demo-04", "odd-01"]
    down = hosts["demo-01"]
    assert down.state == "down" and "connection refused" in down.detail and down.gpus == []
    check_demo_four({name: h for name, h in hosts.items() if name in ("demo-02", "demo-03", "demo-04")})
    check_odd(hosts)
    assert {h.state for n, h in hosts.items() if n != "demo-01"} == {"up"}


def check_demo_four(hosts: dict[str, FleetHost]) -> None:
    model = {h.name: h for h in demo_hosts(4)}
    for name, got in hosts.items():
        want = model[name]
        assert got.service == ("vllm" if want.service else ""), name
        for g, w in zip(got.gpus, want.gpus, strict=True):
            assert (g.uuid, g.xid, g.mem_total_mib) == (w.uuid, w.xid, TOTAL_MIB)
            assert g.mem_used_mib == (SERVICE_MIB if want.service else 0.0) + w.orphans * ORPHAN_MIB
            capped = w.capped and (g.util_pct or 0) > 20
            assert g.throttle == (["power cap"] if capped else [])
    assert hosts["demo-04"].gpus[6].xid == 79 and hosts["demo-04"].gpus[7].link == "PCIe Gen4 x16 of Gen5 x16"
    assert hosts["demo-03"].gpus[5].sm_clock_mhz in (2235.0, 2617.0)


def shifted(answer: object, seconds: float) -> dict[str, object]:
    """The captured answer evaluated SECONDS later with no newer samples (the samples' own times unchanged)."""
    out = copy.deepcopy(answer)
    assert isinstance(out, dict)
    for item in out["data"]["result"]:
        item["value"][0] += seconds
    return out


def test_old_samples_are_stale_and_a_missing_host_keeps_its_rows() -> None:
    answer = load("query.json")
    reader = PrometheusReader("http://prometheus.invalid:9090")
    first = by_name(reader.fold(answer, parse_targets(load("targets.json"))))
    # Scraped every second: three intervals is the limit.
    later = by_name(reader.fold(shifted(answer, 60.0)))
    stale = later["demo-03"]
    assert stale.state == "stale" and stale.age_s is not None and 60 <= stale.age_s < 65, stale
    assert "over 3 s" in stale.detail and stale.gpus == first["demo-03"].gpus
    assert later["demo-01"].state == "down"
    # demo-03 gone from the answer (its target no longer listed): its last rows stay, stale.
    gone = shifted(answer, 1.0)
    gone["data"]["result"] = [s for s in gone["data"]["result"] if s["metric"].get("Hostname") != "demo-03"]
    after = by_name(reader.fold(gone))
    assert after["demo-03"].state == "stale" and after["demo-03"].gpus == first["demo-03"].gpus
    assert "not in Prometheus' answer" in after["demo-03"].detail
    assert after["demo-02"].state == "up"


def test_hostile_answers_never_crash() -> None:
    reader = PrometheusReader("http://prometheus.invalid:9090")
    for bad in (None, [], "x", {"status": "error", "errorType": "bad_data", "error": "parse error\nat 1"},
                {"status": "success", "data": {"resultType": "matrix", "result": []}},
                {"status": "success", "data": None}):
        with pytest.raises(ValueError) as info:
            parse_answer(bad)
        assert "\n" not in str(info.value)
    junk = {"status": "success", "data": {"resultType": "vector", "result": [
        None, 1, "s", {"metric": None}, {"metric": {}, "value": None}, {"metric": {"__name__": "up"}, "value": [1]},
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "h"}, "value": ["t", "1"]},
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "-1", "Hostname": "h"}, "value": [1, "1"]},
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "99999999", "Hostname": "h"}, "value": [1, "1"]},
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "²", "Hostname": "h"}, "value": [1, "1"]},
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": 3, "Hostname": "h"}, "value": [1, "1"]},
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "1", "Hostname": "h" * 1000}, "value": [1, "1"]},
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "1", "Hostname": "h"}, "value": [1, "1e999"]},
        {"metric": {"__name__": "DCGM_FI_DEV_XID_ERRORS", "gpu": "1", "Hostname": "h"}, "value": [1, "-5"]},
        {"metric": {"__name__": "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gpu": "1", "Hostname": "h"},
         "value": [1, "1e30"]},
        {"metric": {"__name__": "DCGM_FI_DEV_PCIE_LINK_GEN", "gpu": "1", "Hostname": "h"}, "value": [1, "NaN"]},
        {"metric": {"__name__": "vllm:num_requests_running", "Hostname": "h"}, "value": [1, {"x": 1}]},
        {"metric": {"__name__": "vllm:num_requests_running", "instance": "nowhere:8000"}, "value": [1, "3"]},
        {"metric": {"__name__": "up", "job": "dcgm", "instance": "[::1"}, "value": [1, "0"]},
        {"metric": {"__name__": "DCGM_FI_DEV_FB_USED", "gpu": "1", "Hostname": "h", "kimitui_sample_time": "1"},
         "value": [1, "zz"]},
    ]}}
    hosts = reader.fold(junk)
    h = by_name(hosts)["h"]
    assert [g.index for g in h.gpus] == [1]
    g = h.gpus[0]
    assert (g.temp_c, g.xid, g.throttle, g.link) == (None, None, [], "")
    assert h.requests_running is None and h.service == ""
    assert all(isinstance(x.name, str) and x.name.isprintable() for x in hosts)


def test_the_query_is_one_expression() -> None:
    """A round is one query (the gauges with the labels a row needs, every target's up and scrape time); the GPUs'
    names and UUIDs are another, asked now and then."""
    assert QUERY.count("{__name__=~") == 2 and "timestamp(up)" in QUERY and "vllm:num_requests_waiting" in QUERY
    assert "UUID" not in QUERY and "UUID" in INFO_QUERY and "modelName" in INFO_QUERY


def capture() -> None:
    """Write tests/fixtures/prometheus/{query,targets}.json from a real Prometheus scraping 4 demo hosts (demo-01
    down) and the odd exporter."""
    import httpx

    with running_fleet(4) as f:
        async def settle() -> None:
            reader = PrometheusReader(f.prom.url)
            names = ["demo-02", "demo-03", "demo-04"]
            await until(reader, lambda h: all_up(h, ["demo-01", *names]) and "odd-01" in h, "up")
            f.hosts.tell("down demo-01")
            await until(reader, lambda h: h["demo-01"].state == "down" and all_up(h, names), "demo-01 down")
            await reader.close()

        asyncio.run(settle())
        FIXTURES.mkdir(parents=True, exist_ok=True)
        with httpx.Client(trust_env=False) as http:
            answer = http.post(f"{f.prom.url}/api/v1/query", data={"query": QUERY}).json()
            targets = http.get(f"{f.prom.url}/api/v1/targets", params={"state": "active"}).json()
        for name, payload in (("query.json", answer), ("targets.json", targets)):  # as Prometheus sent it, a line each
            text = json.dumps(payload, separators=(",", ":"))
            (FIXTURES / name).write_text(text.replace('},{"metric"', '},\n{"metric"').replace(
                '},{"discoveredLabels"', '},\n{"discoveredLabels"') + "\n")
        print(f"wrote {FIXTURES}: {len(answer['data']['result'])} series")


if __name__ == "__main__":
    capture()


def test_an_idle_gpus_trained_down_link_is_not_flagged_a_busy_ones_is() -> None:
    """An idle GPU runs its PCIe link at Gen1 to save power (an H200's does): only a GPU at work (10 % or more) is
    flagged for a link below its maximum."""
    def gpu(index: int, util: str, gen: str) -> list[dict[str, object]]:
        fields = {"GPU_UTIL": util, "PCIE_LINK_GEN": gen, "PCIE_MAX_LINK_GEN": "5", "PCIE_LINK_WIDTH": "16",
                  "PCIE_MAX_LINK_WIDTH": "16", "FB_USED": "10", "FB_FREE": "90"}
        return [{"metric": {"__name__": f"DCGM_FI_DEV_{k}", "gpu": str(index), "Hostname": "h", "job": "dcgm",
                            "instance": "h:9400"}, "value": [1.0, v]} for k, v in fields.items()]

    answer = {"status": "success", "data": {"resultType": "vector", "result": [
        *gpu(0, "0", "1"), *gpu(1, "85", "4"), *gpu(2, "85", "5"), *gpu(3, "9", "3")]}}
    (host,) = PrometheusReader("http://prom:9090").fold(answer)
    assert [g.link for g in host.gpus] == ["", "PCIe Gen4 x16 of Gen5 x16", "", ""]
