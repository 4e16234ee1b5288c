"""The local agent started ahead of its host, for the dashboard's start: its python, the host program and
NVML start beside the caller's own imports instead of after them. Light on purpose (no asyncio, no host
classes): ``kimitui`` calls it before it builds its command line's parser."""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import sys
import threading
from dataclasses import dataclass

from kimitui.hosts.launch import agent_command, agent_payload


@dataclass
class Prestarted:
    """The local agent started ahead of its host (``prestart_agent``), its payload being written."""

    argv: list[str]
    proc: subprocess.Popen[bytes]
    token: str
    writer: threading.Thread


_prestarted: Prestarted | None = None


def prestart_agent(python: str | None = None) -> None:
    """Start the local agent now. The first ``LocalHost`` on the same python takes it (``open_channel``);
    one nobody takes ends when this process does (end of its input). Best effort: a failure here is the
    normal start's to say."""
    global _prestarted
    argv = agent_command(python or sys.executable)
    token = secrets.token_hex(16)
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError:
        return

    def write() -> None:  # made and written while the agent's python starts, and read as it is written
        assert proc.stdin is not None
        with contextlib.suppress(OSError, ValueError):
            proc.stdin.write(agent_payload(token))
            proc.stdin.flush()

    writer = threading.Thread(target=write, name="agent-payload", daemon=True)
    writer.start()
    _prestarted = Prestarted(argv, proc, token, writer)


def take_prestarted(argv: list[str]) -> Prestarted | None:
    """The prestarted agent if it was started with ``argv`` and still runs; else None (and one that does not
    fit is ended: its input closed)."""
    global _prestarted
    pre, _prestarted = _prestarted, None
    if pre is None:
        return None
    if pre.argv == argv and pre.proc.poll() is None:
        return pre
    with contextlib.suppress(OSError, ValueError):
        assert pre.proc.stdin is not None
        pre.proc.stdin.close()
    return None
