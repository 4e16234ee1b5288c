"""How a process is shown to an operator, by the CLI, the dashboard and the report alike: its command line
cut to what tells it apart, its unit, and its start (clock ticks after boot, half of its identity) as a
wall-clock time.

The full command line and the ticks stay in the run file and the audit log; these are only the words.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from kimitui.core.printable import printable

DASH = "-"
INTERPRETERS = ("python", "bash", "sh", "node", "perl", "ruby", "java", "env", "uv", "torchrun")
"""Programs whose own name says little: the distinguishing part of their command is what they run."""
_FLAGS_WITH_ARG = frozenset({"-W", "-X", "--check-hash-based-pycs"})
"""Python options that take the next word as their value (not the script)."""


def _interpreter(program: str) -> bool:
    base = program.rstrip("0123456789.")
    return base in INTERPRETERS or program.startswith("python")


def command_gist(cmdline: str) -> str:
    """The distinguishing part of a command line (``_gist``), printable: control and format characters
    escaped (``\\x1b``, ``\\u202e``), so a process cannot write to the operator's terminal by its name."""
    return printable(_gist(cmdline))


def _gist(cmdline: str) -> str:
    """The distinguishing part of a command line: ``/opt/venv/bin/python3 -u /opt/x/probe.py --device 3`` ->
    ``probe.py --device 3``; ``python -S -m vllm.entrypoints.openai.api_server --port 8000`` ->
    ``vllm.entrypoints.openai.api_server --port 8000``; ``python3 -c CODE`` -> ``python3 -c CODE``; any other
    program keeps its name, without its directory, and its arguments."""
    words = cmdline.split()
    if not words:
        return "?"
    program = words[0].rsplit("/", 1)[-1] or words[0]
    rest = words[1:]
    if not _interpreter(program) or not rest:
        return " ".join([program, *rest])
    i = 0
    while i < len(rest) and rest[i].startswith("-") and rest[i] not in ("-m", "-c", "-"):
        i += 2 if rest[i] in _FLAGS_WITH_ARG else 1
    if i >= len(rest):
        return " ".join([program, *rest])
    if rest[i] == "-m" and i + 1 < len(rest):
        return " ".join(rest[i + 1:])
    if rest[i] in ("-c", "-"):
        return " ".join([program, *rest[i:]])
    return " ".join([rest[i].rsplit("/", 1)[-1] or rest[i], *rest[i + 1:]])


def unit_label(unit: str | None, container: str | None = None) -> str:
    """A process' unit as every view writes it: 'vllm.service', 'docker:5d6c468c' (a container id cut to its
    first 8 characters, a prefix docker accepts), '-' when none."""
    if unit and unit.startswith("docker:"):
        container, unit = unit[len("docker:"):], None
    if unit:
        return printable(unit)
    if container:
        return printable(f"docker:{container[:8]}")
    return DASH


def start_wall_time(start_ticks: int | None, boot_time: float | None, ticks_per_s: int | None) -> float | None:
    """Unix time a process started: its /proc start (ticks after boot) on a host booted at ``boot_time``."""
    if start_ticks is None or boot_time is None or not ticks_per_s or ticks_per_s <= 0:
        return None
    return boot_time + start_ticks / ticks_per_s


def local_time(fmt: str, t: float, utc: bool = False) -> str:
    """``time.strftime(fmt)`` of ``t`` in local time (UTC with ``utc``); ``n/a`` for a time the platform's
    calendar does not hold (a hand-edited 1e20, NaN)."""
    try:
        return time.strftime(fmt, time.gmtime(t) if utc else time.localtime(t))
    except (OverflowError, OSError, ValueError):
        return "n/a"


def clock_label(t: float | None, now: float | None = None, utc: bool = False) -> str:
    """A process's start (or any past time) as every surface writes it: ``14:02:07`` within the day before
    ``now``, ``Nov 30 14:02`` before; ``-`` when unknown. Local time on screen, UTC in the report (``utc``)."""
    if t is None:
        return DASH
    now = time.time() if now is None else now
    return local_time("%H:%M:%S" if now - t < 86_400 else "%b %d %H:%M", t, utc)


def gpu_list(indices: Sequence[int]) -> str:
    """'0-3,5' for GPU indices (any order, repeats ignored)."""
    idx = sorted(set(indices))
    if not idx:
        return DASH
    runs: list[list[int]] = []
    for i in idx:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    parts = [str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs]
    return ",".join(parts)
