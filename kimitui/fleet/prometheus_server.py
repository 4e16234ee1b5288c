"""A real Prometheus of our own (``kimitui fleet --prometheus auto``, the tests): Debian's ``prometheus`` binary
scraping given hosts' DCGM-exporter metrics (job ``dcgm``) and their vLLM's (job ``vllm``), every second, on a
free loopback port, its storage in a temporary folder. ``stop()`` ends that one process and removes the folder.

The binary is PATH's ``prometheus``, else the one ``scripts/ci_prometheus_deps.sh`` unpacks into
``$KIMITUI_PROMETHEUS_DIR`` (default ``~/.cache/kimitui/prometheus``) at ``usr/bin/prometheus``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

DIR_ENV = "KIMITUI_PROMETHEUS_DIR"


class PrometheusMissing(RuntimeError):
    """No prometheus binary on PATH nor in the cache folder; the message is one line that says how to install it."""


class PrometheusFailed(RuntimeError):
    """The prometheus binary is there but did not come up (its last log line says why)."""


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    """One host to scrape: its NAME (the targets' ``Hostname`` label; "": none, the exporter's text says it) and
    ``host:port`` ADDRESS, serving DCGM-exporter text at ``/metrics`` and, with VLLM, its vLLM's metrics at
    ``/vllm/metrics`` (as the demo's hosts do)."""

    name: str
    address: str
    vllm: bool = True


def cache_dir() -> Path:
    return Path(os.environ.get(DIR_ENV) or Path.home() / ".cache" / "kimitui" / "prometheus")


def install_hint() -> str:
    return (f"prometheus not found on PATH nor in {cache_dir()}: apt-get install prometheus (Debian's; kimitui starts "
            "one of its own, its service can stay off), or in a clone of kimitui sh scripts/ci_prometheus_deps.sh")


def find_prometheus() -> Path:
    """The prometheus binary: PATH's, else the cache folder's; ``PrometheusMissing`` with the install hint."""
    on_path = shutil.which("prometheus")
    if on_path:
        return Path(on_path)
    cached = cache_dir() / "usr" / "bin" / "prometheus"
    if cached.is_file() and os.access(cached, os.X_OK):
        return cached
    raise PrometheusMissing(install_hint())


def _duration(value: float) -> str:
    return f"{round(value * 1000)}ms"


def config_text(targets: Sequence[ScrapeTarget], interval_s: float = 1.0, timeout_s: float = 0.8) -> str:
    """Prometheus' configuration (JSON, which its YAML reader takes) for TARGETS. Both jobs label each target with
    its ``Hostname``: the exporter's text carries it too, but a target that never answered has only the target's
    labels, and the demo's hosts share one address (127.0.0.1)."""
    def job(name: str, path: str, chosen: Sequence[ScrapeTarget]) -> dict[str, object]:
        # honor_labels: the exporter's own Hostname stays (not renamed exported_Hostname beside the target's).
        return {"job_name": name, "metrics_path": path, "honor_labels": True,
                "static_configs": [{"targets": [t.address], "labels": {"Hostname": t.name} if t.name else {}}
                                   for t in chosen]}

    jobs = [job("dcgm", "/metrics", targets), job("vllm", "/vllm/metrics", [t for t in targets if t.vllm])]
    cfg = {"global": {"scrape_interval": _duration(interval_s), "scrape_timeout": _duration(timeout_s),
                      "evaluation_interval": _duration(interval_s)},
           "scrape_configs": [j for j in jobs if j["static_configs"]]}
    return json.dumps(cfg, indent=1) + "\n"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


WATCH = """exec 3<&0 </dev/null
"$@" 3<&- & child=$!
echo "$child" >prometheus.pid
(read -r _ <&3; kill -TERM "$child" 2>/dev/null) &
exec 3<&-
wait "$child"
"""
"""How prometheus runs: under a shell that ends it when our end of its stdin closes (``stop()``, or this process
gone, killed included): prometheus has no parent to watch, and in a session of its own it gets no hangup either."""


class PrometheusServer:
    """A running prometheus of ours: ``url``, ``pid`` (prometheus'), ``folder`` (its config, log and storage);
    ``stop()`` (or ``await aclose()``) ends it."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, folder: Path, log: Path) -> None:
        self.proc, self.url, self.folder, self.log = proc, url, folder, log
        self.pid: int | None = None

    def last_log_line(self) -> str:
        try:
            lines = [ln for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        errs = [ln for ln in lines if "level=error" in ln or "err=" in ln]
        return " ".join((errs or lines or [""])[-1].split())[:300]

    def stop(self, timeout_s: float = 10.0) -> None:
        """End prometheus (SIGTERM from its watch, then SIGKILL to the watch's group after TIMEOUT_S: ours alone)
        and remove its folder. Idempotent."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout_s)
        shutil.rmtree(self.folder, ignore_errors=True)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.stop)

    def __enter__(self) -> PrometheusServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def _wait_ready(server: PrometheusServer, targets: int, deadline: float) -> None:
    """Until /-/ready answers and every target has been scraped once (Prometheus hands its targets to the scrape
    loop only some seconds after it is ready)."""
    with httpx.Client(timeout=2.0, trust_env=False) as http:
        while time.monotonic() < deadline:
            if server.pid is None:
                with contextlib.suppress(OSError, ValueError):
                    server.pid = int((server.folder / "prometheus.pid").read_text())
            if server.proc.poll() is not None:
                raise PrometheusFailed(f"prometheus exited ({server.proc.returncode}): {server.last_log_line()}")
            try:
                if http.get(f"{server.url}/-/ready").status_code == 200:
                    active = http.get(f"{server.url}/api/v1/targets", params={"state": "active"}).json()
                    seen = [t for t in active["data"]["activeTargets"]
                            if not str(t.get("lastScrape", "")).startswith("0001-")]
                    if len(seen) >= targets:
                        return
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                pass
            time.sleep(0.1)
    raise PrometheusFailed(f"prometheus at {server.url} not ready in time: {server.last_log_line()}")


def start_prometheus(targets: Sequence[ScrapeTarget], interval_s: float = 1.0, timeout_s: float = 0.8,
                     ready_s: float = 30.0, binary: Path | None = None) -> PrometheusServer:
    """Start a prometheus scraping TARGETS every INTERVAL_S (each scrape given TIMEOUT_S) on a free loopback port
    and return it once every target has been scraped once (READY_S at most). ``PrometheusMissing`` without the
    binary, ``PrometheusFailed`` when it does not come up (nothing is left running then)."""
    exe = binary or find_prometheus()
    for attempt in range(3):  # the free port can be taken between our probe and its bind: try another
        folder = Path(tempfile.mkdtemp(prefix="kimitui-prometheus-"))
        (folder / "prometheus.yml").write_text(config_text(targets, interval_s, timeout_s))
        port = _free_port()
        log = folder / "prometheus.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", WATCH, "kimitui-prometheus", str(exe), f"--config.file={folder / 'prometheus.yml'}",
                 f"--storage.tsdb.path={folder / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                 "--storage.tsdb.retention.time=1h"],
                stdin=subprocess.PIPE, stdout=out, stderr=out, start_new_session=True, cwd=folder)
        server = PrometheusServer(proc, f"http://127.0.0.1:{port}", folder, log)
        try:
            _wait_ready(server, len(targets) + sum(1 for t in targets if t.vllm), time.monotonic() + ready_s)
            return server
        except PrometheusFailed:
            busy = "address already in use" in server.last_log_line()
            server.stop()
            if not busy or attempt == 2:
                raise
        except BaseException:
            server.stop()
            raise
    raise AssertionError("unreachable")


async def start_prometheus_async(targets: Sequence[ScrapeTarget], interval_s: float = 1.0,
                                 timeout_s: float = 0.8, ready_s: float = 30.0) -> PrometheusServer:
    return await asyncio.to_thread(start_prometheus, targets, interval_s, timeout_s, ready_s)
