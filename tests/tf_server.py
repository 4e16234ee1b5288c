"""A real third-party OpenAI-compatible server for tests: ``transformers serve`` on CPU.

``make_tiny_model(folder)`` (kimitui/hosts/sim/tiny_llama.py: the demo's real engine serves it too) writes a
model made on the spot (nothing is downloaded): a word-level tokenizer trained on a generated corpus, wrapped as
a ``PreTrainedTokenizerFast`` with a chat template, and a 2-layer ``LlamaConfig`` model with random weights,
both saved with ``save_pretrained``. ``start_tf_server(folder)``
runs ``transformers serve FOLDER`` (the model pinned: ``/v1/models`` lists the folder's path alone) as a child
on a free port of 127.0.0.1 and waits on ``GET /health`` with a deadline; ``TfServer.stop()`` kills it and
everything it started. The server's log is in the error when it does not come up.

What transformers 5.x sends, as the tests rely on it (transformers/cli/serving/): a request with a field it
does not know is ``422 {"detail": "Unexpected fields in the request: {...}"}`` (``ignore_eos`` among them);
a chat stream opens with a role-only chunk (``{"role": "assistant"}``, sent before generation starts), then a
chunk per token, then a content-free chunk with ``finish_reason`` and ``usage``, and no ``data: [DONE]``;
``/metrics`` and ``/tokenize`` are 404.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kimitui.hosts.sim.tiny_llama import make_tiny_model as make_tiny_model  # the tests import it from here
from tests.sshd import descendants, free_port
from tests.waiting import wait_until

START_TIMEOUT_S = 180.0
"""Deadline for the server to answer /health: importing torch and transformers on a loaded 2-core machine."""

POLL_S = 0.05

TOKEN_TEXT = re.compile(rb'"(?:content|text)":"[^"]')
"""A chunk that carries text (chat's delta content or completions' text), not an empty one."""

class TfServeMissing(RuntimeError):
    """transformers[serving] is not installed."""


def tf_serve_command() -> list[str]:
    """The ``transformers`` CLI of the running interpreter's environment."""
    cli = Path(sys.executable).with_name("transformers")
    if not os.access(cli, os.X_OK):
        raise TfServeMissing(f"{cli} not found: the real-server tests need transformers[serving] "
                             "(pip install '.[test]')")
    return [str(cli), "serve"]


@dataclass
class TfServer:
    model_dir: Path
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes]
    start_s: float
    """Seconds from the spawn to the first healthy answer."""
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def model(self) -> str:
        """The name the pinned server answers to (and lists in /v1/models): the model folder's path."""
        return str(self.model_dir)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """Kill the server and anything it started; wait for it."""
        if self.proc.poll() is None:
            for pid in reversed(descendants(self.proc.pid)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.proc.kill()
        self.proc.wait(timeout=30)


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def start_tf_server(model_dir: Path, log_dir: Path | None = None, timeout: float = START_TIMEOUT_S) -> TfServer:
    """``transformers serve MODEL_DIR`` on a free loopback port, on CPU; returns once /health answers 200.
    Raises RuntimeError with the server's log if it exits or does not answer in time."""
    command = tf_serve_command()
    port = free_port()
    log_dir = Path(tempfile.mkdtemp(prefix="kimitui-tfserve-")) if log_dir is None else log_dir
    log_path = log_dir / "serve.log"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    began = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen([*command, str(model_dir), "--host", "127.0.0.1", "--port", str(port),
                                 "--device", "cpu", "--log-level", "info"],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    server = TfServer(model_dir=model_dir, port=port, log_path=log_path, proc=proc, start_s=0.0)
    try:
        wait_healthy(server.url, proc, server.log, timeout)
    except RuntimeError:
        server.stop()
        raise
    server.start_s = time.monotonic() - began
    return server


def wait_healthy(url: str, proc: subprocess.Popen[bytes], log_text: Callable[[], str],
                 timeout: float = START_TIMEOUT_S) -> None:
    """Wait until URL/health answers 200; RuntimeError with the end of LOG_TEXT() when PROC (the server, or
    what runs it) exits first or the deadline passes."""
    try:
        wait_until(lambda: proc.poll() is not None or healthy(url), f"transformers serve at {url}", timeout, POLL_S)
    except AssertionError as exc:
        raise RuntimeError(f"{exc}; its log:\n{log_text()[-4000:]}") from None
    if proc.poll() is not None:
        raise RuntimeError(f"transformers serve at {url} exited with {proc.returncode}; its log:\n{log_text()[-4000:]}")


def post_json(url: str, body: dict[str, object], timeout: float = 60.0) -> tuple[int, bytes]:
    """POST BODY as JSON; (status, body) for any HTTP answer, error statuses included."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@dataclass
class Exchange:
    """One request through a ``TimingProxy``: unix times of its POST, of the role-only chunk and of the first
    chunk with content, as the proxy saw the bytes go by."""
    post_s: float
    role_s: float | None = None
    content_s: float | None = None


class TimingProxy:
    """A TCP relay on a free loopback port in front of UPSTREAM_PORT that timestamps, per request, the
    client's POST and the server's first role and first content chunks (an independent stopwatch for the
    client's TTFT: a raw socket, no HTTP library between the bytes and the clock)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self._lock:
                self._sockets += [client, upstream]
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            current: list[Exchange] = []  # the connection's request in flight (HTTP/1.1: one at a time)
            threading.Thread(target=self._pump, args=(client, upstream, current, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, current, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, current: list[Exchange], from_client: bool) -> None:
        try:
            while data := src.recv(65536):
                now = time.time()
                if from_client and data.startswith(b"POST "):
                    exchange = Exchange(post_s=now)
                    with self._lock:
                        self.exchanges.append(exchange)
                    current[:] = [exchange]
                elif not from_client and current:
                    exchange = current[0]
                    if exchange.role_s is None and b'"role":"assistant"' in data:
                        exchange.role_s = now
                    if exchange.content_s is None and TOKEN_TEXT.search(data):
                        exchange.content_s = now
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                sock.close()
