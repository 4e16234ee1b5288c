"""``kimitui serve`` as a real child process: what it refuses to serve, the token and the Origin and Host checks
over real HTTP and websockets, and the dashboard in a real headless Chromium (Debian's chromium and
chromium-driver, scripts/ci_browser_deps.sh), read-only: the GPU rows on the page, a key answered with the
refusal, a screenshot, and every process a visitor started gone once the server is stopped.

xterm.js draws the page's terminal on a canvas (no ``.xterm-rows`` text in the DOM): the page's text is read
from what its terminal was given, the websocket's frames, recorded in the page by a hook installed before
its scripts run, and put on a grid by tests/screen_emulator.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from kimitui.core.events import Consent, HostSample, SignalSent, StepPreview
from kimitui.core.runfile import RunReader
from kimitui.resources import bundled_sample_run
from tests.screen_emulator import Terminal
from tests.sshd import alive, free_port
from tests.waiting import DEADLINE_S, wait_until

TOKEN = "s3cret-token-for-tests"


def kimitui(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kimitui", *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, env=env)


@pytest.mark.parametrize(("args", "said"), [
    (["--bind", "0.0.0.0", "--allow-actions"], "--allow-actions with --bind 0.0.0.0"),
    (["--token", "short"], "--token: at least 8"),
    (["--host", "bad host"], "--host: bad SSH target"),
    (["--port", "70000"], "--port 70000"),
    (["--replay", "/nonexistent/run.jsonl"], "/nonexistent/run.jsonl"),
    (["--host", "demo", "--replay", "x"], "not allowed with argument"),
])
def test_what_cannot_be_served_is_one_line_and_exit_2(args: list[str], said: str) -> None:
    done = kimitui("serve", *args)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert said in lines[-1], done.stderr
    assert len(lines) == 1 or lines[-1].startswith("kimitui serve: error:"), done.stderr  # argparse: usage first
    assert done.stdout == ""


def test_a_port_in_use_is_one_line_and_exit_2() -> None:
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        done = kimitui("serve", "--port", str(held.getsockname()[1]))
    assert done.returncode == 2 and done.stdout == "", done  # nothing said of where it would serve
    assert done.stderr.count("\n") == 1 and "Address already in use" in done.stderr, done.stderr


def test_a_host_that_cannot_be_reached_is_one_line_before_serving() -> None:
    done = kimitui("serve", "--host", f"ssh://127.0.0.1:{free_port()}", "--port", str(free_port()))
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("kimitui: --host ssh://127.0.0.1:"), done.stderr


def descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()  # bytes: a comm need not be UTF-8
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(b")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


@dataclass
class Served:
    proc: subprocess.Popen[str]
    port: int
    log: Path
    runs: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text()


def _answers(port: int, proc: subprocess.Popen[str]) -> bool:
    import socket

    assert proc.poll() is None, "kimitui serve ended before it served"
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


@contextlib.contextmanager
def served(tmp_path: Path, *args: str) -> Iterator[Served]:
    """``kimitui serve`` on a free port; stopped with SIGTERM at the end, and every process it started (the
    visitors' dashboards, their simulated hosts) must be gone within seconds."""
    port = free_port()
    log = tmp_path / "serve.log"
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "kimitui", "serve", "--port", str(port), *args],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, env=env,
                                start_new_session=True)
    server = Served(proc, port, log, tmp_path / "data" / "kimitui" / "runs")
    started: set[int] = set()
    try:
        wait_until(lambda: _answers(port, proc), "kimitui serve to listen")
        yield server
        started = descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, server.output()
        wait_until(lambda: not any(alive(pid) for pid in started), "the visitors' processes to end")
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def test_a_token_guards_every_page_and_websocket_and_a_foreign_origin_is_refused(tmp_path: Path) -> None:
    # --allow-actions off loopback is served only with a token
    with served(tmp_path, "--replay", str(bundled_sample_run()), "--bind", "0.0.0.0", "--allow-actions",
                "--token", TOKEN) as server:
        first = server.output().splitlines()[0]
        assert f"?token={TOKEN}" in first and "actions ALLOWED" in first and "KIMITUI_READ_ONLY=0" in first, first
        async with aiohttp.ClientSession() as http:
            for query in ("", "?token=wrong-token-xx"):
                async with http.get(f"{server.url}/{query}") as r:
                    assert r.status == 403 and "token" in await r.text()
            async with http.get(f"{server.url}/static/js/textual.js") as r:
                assert r.status == 200  # textual-serve's own scripts: no secret
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(f"{server.url.replace('http', 'ws')}/ws")
            assert refused.value.status == 403
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:  # an IP's cookies too
            async with http.get(f"{server.url}/?token={TOKEN}") as r:
                assert r.status == 200 and "ws://127.0.0.1" in await r.text()
                cookie = r.cookies[f"kimitui_token_{server.port}"]
                assert cookie.value == TOKEN and cookie["httponly"] and cookie["samesite"] == "Strict"
            ws_url = f"ws://127.0.0.1:{server.port}/ws?width=100&height=30"
            with pytest.raises(aiohttp.WSServerHandshakeError) as foreign:
                await http.ws_connect(ws_url, headers={"Origin": "http://evil.example"})
            assert foreign.value.status == 403
            async with http.ws_connect(ws_url, headers={"Origin": server.url}) as ws:  # the cookie goes along
                received = b""
                deadline = time.monotonic() + DEADLINE_S  # the messages are the wait: no condition to poll
                while b"kimitui" not in received:  # the replay's first frame
                    assert time.monotonic() < deadline, received[-500:]
                    msg = await ws.receive(timeout=max(0.1, deadline - time.monotonic()))
                    assert msg.type == aiohttp.WSMsgType.BINARY, msg
                    received += msg.data


def status_of(url: str, host: str) -> int:
    """The status of a GET of the page naming ``host`` in its Host header."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(f"{url}/", headers={"Host": host}), timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as error:
        return error.code


HOOK = """
window.__kimitui = {received: [], sent: []};
const send = WebSocket.prototype.send;
WebSocket.prototype.send = function (data) { window.__kimitui.sent.push(String(data)); return send.call(this, data); };
const add = WebSocket.prototype.addEventListener;
WebSocket.prototype.addEventListener = function (type, listener, options) {
  if (type === "message") {
    add.call(this, type, (e) => {
      if (typeof e.data !== "string") window.__kimitui.received.push(Array.from(new Uint8Array(e.data)));
    }, options);
  }
  return add.call(this, type, listener, options);
};
"""
"""Installed before the page's scripts run: every frame the page's terminal is given, and what it sends."""


def browser(tmp_path: Path) -> object:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "chromium and chromedriver missing: run scripts/ci_browser_deps.sh"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,900", f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(arg)
    chrome = webdriver.Chrome(service=Service(driver), options=options)
    chrome.execute_cdp_cmd("Network.enable", {})
    chrome.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*fonts.googleapis.com*"]})  # offline: fail fast
    chrome.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": HOOK})
    return chrome


def page_text(chrome: object) -> str:
    received, sent = chrome.execute_script(  # type: ignore[attr-defined]
        "const k = window.__kimitui; return k ? [k.received.flat(), k.sent] : [[], []]")
    sizes = [json.loads(s)[1] for s in sent if s.startswith('["resize"')]
    width, height = (sizes[-1]["width"], sizes[-1]["height"]) if sizes else (80, 24)
    terminal = Terminal(width, height)
    terminal.feed(bytes(received).decode("utf-8", "replace"))
    return "\n".join("".join(cell[0] for cell in row) for row in terminal.cells)


def test_the_dashboard_in_chromium_shows_the_gpus_and_refuses_an_action(tmp_path: Path) -> None:
    with served(tmp_path) as server:
        first = server.output()
        assert "(read-only;" in first and f"ssh -L {server.port}:127.0.0.1:{server.port} " in first, first
        assert status_of(server.url, host="evil.example") == 403  # a DNS rebinding: another name, refused
        assert status_of(server.url, host=f"localhost:{server.port}") == 200
        assert status_of(server.url, host='x"><script>') == 400  # it would be written into the page
        chrome = browser(tmp_path)
        try:
            from selenium.webdriver.common.by import By

            chrome.get(f"{server.url}/")  # type: ignore[attr-defined]
            wait_until(lambda: page_text(chrome).count("RTX PRO 6000") == 8, "the 8 GPU rows on the page")
            text = page_text(chrome)
            assert "Free GPUs" in text and "read-only" not in text, text
            assert "-first-byte" in chrome.execute_script("return document.body.className")  # type: ignore[attr-defined]
            shot = tmp_path / "page.png"
            assert chrome.save_screenshot(str(shot))  # type: ignore[attr-defined]
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
            keys = chrome.find_element(By.CSS_SELECTOR, ".xterm-helper-textarea")  # type: ignore[attr-defined]
            keys.send_keys("F")  # Free GPUs
            wait_until(lambda: "read-only: start with `--allow-actions`" in page_text(chrome),
                       "the read-only refusal on the page")
            assert "Preview first step" not in page_text(chrome)  # the cleanup's dialog did not open
        finally:
            chrome.quit()  # type: ignore[attr-defined]
    (run,) = server.runs.glob("*.jsonl*")  # the visitor's session, recorded and closed
    events = list(RunReader(run).events())
    assert any(isinstance(ev, HostSample) for ev in events)
    assert not [ev for ev in events if isinstance(ev, StepPreview | Consent | SignalSent)]
