"""One agent per host, on one channel: requests with ids and their replies, the sample stream, workers.

``AgentLink`` starts the agent through the host's transport (``Host.open_channel``), reads its hello,
then demultiplexes what it writes: replies go to the request waiting on that id, samples and log lines to
the subscribers (telemetry), worker lines to their ``RemoteWorker``. It is the one place that retries: each
``connect()`` makes one attempt, after the backoff wait when the previous one failed; a failure another
attempt cannot fix (HostFatal: host key, authentication, a name that does not resolve, no usable python)
is remembered and repeated at once, never retried.

When the channel drops, every request in flight fails with OutcomeUnknown (nothing is resent), the
subscribers get a ``Lost`` item, and live workers end with WorkerLost; the next request or ``connect()``
starts a new agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from kimitui.hosts.channel import (
    AncestorProcess,
    Channel,
    HostError,
    HostFatal,
    OutcomeUnknown,
    RequestFailed,
    Sleep,
    StateCallback,
)
from kimitui.hosts.launch import MIN_PYTHON, agent_command, agent_payload
from kimitui.hosts.remote_worker import RemoteWorker
from kimitui.hostside.wire import line_tag

NEEDED = f"python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]}"
LATE_REPLY_OPS = frozenset({"signal"})
"""Requests whose reply is still taken after their timeout (OutcomeUnknown.late)."""
QUICK_DEATH_S = 5.0
"""A channel that dies sooner than this after its hello counts as a failed attempt (backoff applies)."""


@runtime_checkable
class LinkHost(Protocol):
    """What the link needs of its host (``kimitui.hosts.base.Host`` is one): the transport, and how to
    start and retry the agent there. The link never imports the host class, which makes the link."""

    @property
    def name(self) -> str: ...

    @property
    def python(self) -> str:
        """The interpreter that runs the agent on the host."""

    @property
    def backoff(self) -> Sequence[float]: ...

    @property
    def first_line_s(self) -> float: ...

    async def open_channel(self, argv: list[str]) -> Channel: ...


@dataclass(frozen=True, slots=True)
class AgentHello:
    pid: int
    start_time: int | None
    python: str
    executable: str
    host: str
    user: str | None
    ancestors: list[AncestorProcess]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AgentHello:
        return cls(int(d["agent_pid"]), d.get("start_time"), str(d.get("python", "")), str(d.get("executable", "")),
                   str(d.get("host", "")), d.get("user"),
                   [AncestorProcess(int(a[0]), int(a[1]), int(a[2]), str(a[3])) for a in d.get("ancestors") or []])


@dataclass(frozen=True, slots=True)
class Lost:
    """What a subscriber's queue gets when the channel drops."""

    reason: str


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _untag(line: bytes, tag: bytes) -> bytes | None:
    """The agent's line as its JSON object without the token, or None when the line does not carry it."""
    return b"{" + line[len(tag):] if line.startswith(tag) else None


def _line_type(line: bytes) -> str:
    """The ``type`` of an agent line, read without parsing it (every line starts {"t":...,"type":"X")."""
    i = line.find(b'"type":"', 0, 64)
    if i < 0:
        return ""
    j = line.find(b'"', i + 8, i + 40)
    return line[i + 8:j].decode("ascii", "replace") if j > 0 else ""


@dataclass
class _Pending:
    op: str
    future: asyncio.Future[dict[str, Any]]


@dataclass
class _Up:
    channel: Channel
    hello: AgentHello
    tag: bytes
    """How each of this agent's lines starts (``line_tag`` of the token sent with it)."""
    reader: asyncio.Task[None] | None = None
    since: float = field(default_factory=time.monotonic)


class AgentLink:
    def __init__(self, host: LinkHost, sleep: Sleep = asyncio.sleep) -> None:
        self.host = host
        self.sleep = sleep
        self.fatal: str | None = None
        self.attempts = 0
        """Connection attempts so far."""
        self.connects = 0
        """Agents started so far (1 plus the reconnects)."""
        self.backoff_log: list[float] = []
        """Every wait before an attempt, in seconds."""
        self.foreign_lines = 0
        """Lines on the channel after the hello that did not start with the agent's token (something else
        on the host writing to the session): ignored, the first one said in a warning."""
        self.state: str | None = None
        self._up: _Up | None = None
        self._failures = 0
        self._last_error = ""
        self._lost_reason = ""
        self._closed = False
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._workers: dict[int, RemoteWorker] = {}
        self._subscribers: list[asyncio.Queue[Any]] = []
        self._callbacks: list[StateCallback] = []

    # --- state --------------------------------------------------------------------------------------

    @property
    def up(self) -> bool:
        return self._up is not None

    @property
    def hello(self) -> AgentHello | None:
        return self._up.hello if self._up else None

    def on_state(self, callback: StateCallback) -> Callable[[], None]:
        self._callbacks.append(callback)
        return lambda: self._callbacks.remove(callback) if callback in self._callbacks else None

    def _emit(self, state: str, detail: str) -> None:
        self.state = state
        for cb in list(self._callbacks):
            cb(state, detail)

    def next_delay(self) -> float:
        """The wait before the next attempt (0 when the last one did not fail)."""
        if not self._failures:
            return 0.0
        b = tuple(self.host.backoff) or (1.0,)
        return float(b[min(self._failures - 1, len(b) - 1)])

    # --- connecting ---------------------------------------------------------------------------------

    async def connect(self) -> AgentHello:
        """The running agent's hello; starts one (one attempt, after the backoff wait) when none runs."""
        if self._up is not None:
            return self._up.hello
        async with self._lock:
            if self._up is not None:
                return self._up.hello
            if self._closed:
                raise HostError(f"{self.host.name}: host is closed")
            if self.fatal is not None:
                raise HostFatal(self.fatal)
            delay = self.next_delay()
            if delay:
                self.backoff_log.append(delay)
                await self.sleep(delay)
            self.attempts += 1
            again = self.connects or self._failures
            why = self._last_error if self._failures else self._lost_reason
            self._emit("reconnecting" if again else "connecting",
                       f"attempt {self.attempts}" + (f": {why}" if again and why else ""))
            started = time.monotonic()
            try:
                up = await self._start()
            except HostFatal as exc:
                self.fatal = str(exc)
                self._emit("failed", self.fatal)
                raise
            except HostError as exc:
                self._failures += 1
                self._last_error = str(exc)
                raise
            self._up = up
            up.reader = asyncio.create_task(self._read(up))
            self._failures = 0
            self.connects += 1
            self._emit("connected", f"{self.host.name}: agent pid {up.hello.pid}, python {up.hello.python}, "
                                    f"in {time.monotonic() - started:.2f}s")
            return up.hello

    async def _start(self) -> _Up:
        name, python = self.host.name, self.host.python
        ch = await self.host.open_channel(agent_command(python))
        sent = getattr(ch, "token", None)  # an agent started ahead (hosts/local.py) has its payload already
        token = sent or secrets.token_hex(16)
        tag = line_tag(token)
        try:
            if not sent:
                ch.write(agent_payload(token))
                with contextlib.suppress(HostError):
                    # it stopped reading, exited: a too-old python's bootstrap reads only its version check (a
                    # payload over the pipe's 64 KiB then breaks it), and what it printed says why
                    await ch.drain()
            msg, chatter = await asyncio.wait_for(self._first_message(ch, tag), self.host.first_line_s)
        except TimeoutError:
            await ch.close()
            raise HostError(f"{name}: the agent did not start within {self.host.first_line_s:g}s") from None
        except BaseException:
            await ch.close()
            raise
        if isinstance(msg, dict) and msg.get("type") == "hello":
            try:
                hello = AgentHello.from_dict(msg)
            except (KeyError, TypeError, ValueError, IndexError) as exc:
                await ch.close()
                raise HostError(f"{name}: the agent's hello is malformed ({_one_line(exc)})") from None
            up = _Up(ch, hello, tag)
            if chatter:  # a login shell that prints (a banner, conda's hooks): skipped, said once
                text = _one_line(b" / ".join(chatter)[:160].decode(errors="replace"))
                for q in self._subscribers:
                    q.put_nowait(json.dumps({"t": time.time(), "type": "log", "level": "warning", "source": "agent",
                                             "message": f"{name}: the login shell printed {text!r} before the "
                                                        "agent started (ignored)"}))
            return up
        rc = await ch.wait_exit(2.0)
        err = ch.stderr_tail().strip()
        await ch.close()
        if isinstance(msg, dict) and msg.get("type") == "fatal":
            raise HostFatal(f"{name}: {_one_line(msg.get('message'))}; name another with --remote-python PATH")
        last = _one_line(err.splitlines()[-1]) if err else ""
        if rc in (126, 127):  # the shell found no such program, or could not run it
            raise HostFatal(f"{name}: no {python} on the host ({last or f'exit {rc}'}); the kimitui agent needs "
                            f"{NEEDED}: install one or name it with --remote-python PATH")
        said = f"it printed {_one_line(chatter[-1][:80].decode(errors='replace'))!r}" if chatter else "no hello"
        raise HostError(f"{name}: the agent failed to start with {python} ({said}; "
                        f"{last or f'exit status {rc}'})")

    @staticmethod
    async def _first_message(ch: Channel, tag: bytes) -> tuple[Any, list[bytes]]:
        """The agent's first line (hello, or fatal from the bootstrap), past anything the login shell printed
        first, a line that looks like the agent's but lacks its token included: (its JSON, or None at the
        end of the channel; the lines skipped)."""
        chatter: list[bytes] = []
        while True:
            line = await ch.readline()
            msg: Any = _untag(line, tag)
            if msg is not None:
                with contextlib.suppress(ValueError):
                    msg = json.loads(msg)
            if not line or (isinstance(msg, dict) and msg.get("type") in ("hello", "fatal")) or len(chatter) >= 200:
                return msg, chatter
            chatter.append(line.strip())

    # --- reading ------------------------------------------------------------------------------------

    async def _read(self, up: _Up) -> None:
        reason = ""
        try:
            while True:
                line = await up.channel.readline()
                if not line:
                    await up.channel.wait_exit(1.0)  # so the reason can name its exit status
                    break
                own = _untag(line, up.tag)
                if own is None:
                    self._foreign(line)
                else:
                    self._dispatch(own)
        except HostError as exc:
            reason = str(exc)
        except Exception as exc:  # a transport error of another kind: still a loss, never a crash
            reason = _one_line(f"{type(exc).__name__}: {exc}")
        if self._up is up:
            self._down(up, reason or up.channel.end_reason())

    def _dispatch(self, line: bytes) -> None:
        kind = _line_type(line)
        msg: Any = None
        if not kind:  # not the agent's compact form: parse it to know
            with contextlib.suppress(ValueError):
                msg = json.loads(line)
            kind = str(msg.get("type", "")) if isinstance(msg, dict) else ""
        if kind not in ("reply", "worker_line", "worker_exit"):  # samples, logs, anything else: telemetry's
            text = line.decode(errors="replace").rstrip("\n")
            for q in self._subscribers:
                q.put_nowait(text)
            return
        if msg is None:
            try:
                msg = json.loads(line)
            except ValueError:
                return
        if kind == "reply":
            pending = self._pending.pop(msg.get("id"), None)
            if pending is not None and not pending.future.done():
                pending.future.set_result(msg)
        elif kind == "worker_line":
            worker = self._workers.get(msg.get("worker"))
            if worker is not None:
                worker._line(msg)
        else:
            worker = self._workers.pop(msg.get("worker"), None)
            if worker is not None:
                worker._exit(msg)

    def _foreign(self, line: bytes) -> None:
        """A line on the channel that is not the agent's (no token): never a reply, sample or worker line."""
        self.foreign_lines += 1
        if self.foreign_lines > 1:
            return
        text = _one_line(line[:160].decode(errors="replace"))
        for q in self._subscribers:
            q.put_nowait(json.dumps({"t": time.time(), "type": "log", "level": "warning", "source": "agent",
                                     "message": f"{self.host.name}: a line on the agent's channel that is not "
                                                f"the agent's ({text!r}): ignored, as is any other"}))

    def _down(self, up: _Up, reason: str) -> None:
        """The channel ended: fail what is in flight (outcome unknown), tell subscribers and workers."""
        if self._up is not up:
            return
        self._up = None
        reason = _one_line(reason) or "channel closed"
        self._lost_reason = reason
        if time.monotonic() - up.since < QUICK_DEATH_S:
            self._failures += 1  # an agent that dies right after starting is not restarted in a tight loop
            self._last_error = reason
        pending, self._pending = self._pending, {}
        for rid, p in pending.items():
            if not p.future.done():
                p.future.set_exception(OutcomeUnknown(
                    f"{self.host.name}: connection lost with the {p.op} request (id {rid}) in flight ({reason}): "
                    "its outcome is unknown"))
                p.future.exception()
        workers, self._workers = self._workers, {}
        for w in workers.values():
            w._lost(f"connection lost ({reason})")
        for q in self._subscribers:
            q.put_nowait(Lost(reason))
        if not self._closed:
            self._emit("lost", reason)

    # --- requests -----------------------------------------------------------------------------------

    def subscribe(self) -> asyncio.Queue[Any]:
        """A queue of the agent's sample and log lines (str), and a Lost item whenever the channel drops."""
        q: asyncio.Queue[Any] = asyncio.Queue()
        self._subscribers.append(q)
        return q

    def unsubscribe(self, q: asyncio.Queue[Any]) -> None:
        with contextlib.suppress(ValueError):
            self._subscribers.remove(q)

    async def request(self, op: str, fields: dict[str, Any], *, timeout: float = 30.0,
                      rid: int | None = None) -> Any:
        """Send one request (once) and wait for its reply."""
        await self.connect()
        up = self._up
        if up is None:  # dropped between the connect and now: not sent, so not unknown
            raise HostError(f"{self.host.name}: {self._lost_reason or 'connection lost'}; the {op} request was "
                            "not sent")
        rid = next(self._ids) if rid is None else rid
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = _Pending(op, fut)
        late = False
        try:
            try:
                up.channel.write(json.dumps({"id": rid, "op": op, **fields}, separators=(",", ":")).encode()
                                 + b"\n")
                await up.channel.drain()
            except HostError as exc:
                raise OutcomeUnknown(f"{self.host.name}: the {op} request may not have reached the agent: {exc}; "
                                     "its outcome is unknown") from None
            try:
                msg = await asyncio.wait_for(asyncio.shield(fut), timeout)
            except TimeoutError:
                # a signal's reply that comes after all still resolves fut (a drop fails it): the caller
                # reports what the signal did, late; other requests are given up whole
                late = op in LATE_REPLY_OPS and self._up is up
                exc = OutcomeUnknown(f"{self.host.name}: no answer to the {op} request in {timeout:g}s: its "
                                     "outcome is unknown")
                exc.late = fut if late else None
                raise exc from None
        finally:
            if not late:
                self._pending.pop(rid, None)
        if msg.get("ok"):
            return msg.get("result")
        raise RequestFailed(_one_line(msg.get("error") or "request failed"), str(msg.get("kind") or "error"))

    async def start_worker(self, source: bytes | str, args: list[str], env: dict[str, str], python: str | None,
                           cwd: str | None) -> RemoteWorker:
        await self.connect()
        text = source.decode("utf-8") if isinstance(source, bytes) else source
        rid = next(self._ids)
        worker = RemoteWorker(self, rid, self.host.name)
        self._workers[rid] = worker  # before the request: its first lines may come before the reply is read
        try:
            res = await self.request("worker_start", {"source": text, "args": [str(a) for a in args],
                                                      "env": {str(k): str(v) for k, v in env.items()},
                                                      "python": python, "cwd": cwd}, timeout=60.0, rid=rid)
        except RequestFailed as exc:
            self._workers.pop(rid, None)
            raise HostError(f"{self.host.name}: cannot start the worker: {exc}") from None
        except BaseException:
            self._workers.pop(rid, None)
            raise
        worker.pid, worker.python = int(res["pid"]), str(res["python"])
        return worker

    async def reset(self, reason: str) -> None:
        """Drop the channel (the agent stopped answering): what is in flight fails, the next call restarts it."""
        up = self._up
        if up is not None:
            self._down(up, reason)
            await self._end(up)

    async def close(self) -> None:
        self._closed = True
        up = self._up
        if up is not None:
            self._down(up, "host closed")
            await self._end(up)

    @staticmethod
    async def _end(up: _Up) -> None:
        await up.channel.close()
        if up.reader is not None and up.reader is not asyncio.current_task():
            up.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await up.reader
