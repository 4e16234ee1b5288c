"""How a process is shown to an operator, by the CLI and the dashboard alike: its command line cut to what
tells it apart, and its start (clock ticks after boot, half of its identity) as a wall-clock time.

The full command line and the ticks stay in the run file and the audit log; these are only the words.
"""

from __future__ import annotations

import re
import time

_PYTHON = re.compile(r"python[0-9.]*")
_PY_FLAGS_WITH_ARG = frozenset({"-W", "-X", "--check-hash-based-pycs"})


def short_command(cmdline: str) -> str:
    """The command line without the folders in front of what tells processes apart.

    ``/opt/venv/bin/python3 -S -u -m vllm.entrypoints.openai.api_server --port 8000`` ->
    ``python3 -m vllm.entrypoints.openai.api_server --port 8000``; a script run by python keeps its name
    without its folder (``/opt/venv/bin/python3 /work/scripts/serve.py --role worker`` ->
    ``python3 serve.py --role worker``); any other program loses only its folder.
    """
    words = cmdline.split(" ")
    if not words[0]:
        return "?"
    program = words[0].rsplit("/", 1)[-1] or words[0]
    rest = words[1:]
    if _PYTHON.fullmatch(program):
        i = 0
        while i < len(rest) and rest[i].startswith("-") and rest[i] not in ("-m", "-c", "-"):
            i += 2 if rest[i] in _PY_FLAGS_WITH_ARG else 1
        rest = rest[i:]
        if rest and not rest[0].startswith("-") and "/" in rest[0]:
            rest = [rest[0].rsplit("/", 1)[-1] or rest[0], *rest[1:]]
    return " ".join([program, *rest])


def start_wall_time(start_ticks: int | None, boot_time: float, ticks_per_s: int) -> float | None:
    """Unix time a process started: its /proc start (ticks after boot) on a host booted at ``boot_time``."""
    if start_ticks is None or ticks_per_s <= 0:
        return None
    return boot_time + start_ticks / ticks_per_s


def clock_label(t: float | None, now: float | None = None) -> str:
    """``14:02:07`` for a time within the last day, ``Nov 30 14:02`` before; ``-`` when unknown."""
    if t is None:
        return "-"
    now = time.time() if now is None else now
    local = time.localtime(t)
    return time.strftime("%H:%M:%S" if now - t < 86_400 else "%b %d %H:%M", local)
