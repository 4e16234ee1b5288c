"""Pure text formatting for the views: numbers, bars, sparklines, clocks. No textual import here.

GPU memory has one unit a screen, said in its headers: GiB on the Dashboard (the GPU and process tables,
the memory history), MiB on the Cleanup tab, the consent modal and the Micro tab (a clean threshold is tens
of MiB), as in the report and the CLI.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

# shared with the CLI and the report
from kimitui.core.printable import printable as printable
from kimitui.core.printable import printable_lines as printable_lines
from kimitui.core.procdisplay import clock_label, local_time
from kimitui.core.procdisplay import command_gist as command_gist
from kimitui.core.procdisplay import gpu_list as gpu_list
from kimitui.core.procdisplay import unit_label as unit_label

DASH = "-"
BLOCKS = " ▁▂▃▄▅▆▇█"


def num(value: float | int | None, fmt: str = "{:.0f}", suffix: str = "") -> str:
    """A number for a table cell; None (unknown) reads as '-'."""
    if value is None:
        return DASH
    try:
        return fmt.format(value) + suffix
    except (TypeError, ValueError):
        return DASH


def gib(mib: float | None, digits: int = 1) -> str:
    """A figure in MiB as GiB, '92.8' (no unit: the column or the line says it)."""
    return num(None if mib is None else mib / 1024, f"{{:.{digits}f}}")


def mib(value: float | None) -> str:
    """A figure in MiB, '92,411' (no unit: the column or the line says it)."""
    return num(value, "{:,.0f}")


def short_gpu_name(name: str) -> str:
    for prefix in ("NVIDIA ", "Tesla "):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name


def mem_label(used_mib: float | None, total_mib: float | None) -> str:
    """'96.9/97.9 GiB' with '-' for unknown parts."""
    if used_mib is None and total_mib is None:
        return DASH
    return f"{gib(used_mib)}/{gib(total_mib)} GiB"


def bar(fraction: float | None, width: int) -> str:
    """A horizontal bar of ``width`` cells, filled to ``fraction`` (eighths of a cell)."""
    if fraction is None or width <= 0:
        return "·" * max(width, 0)
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    partial = " ▏▎▍▌▋▊▉"[part] if part and full < width else ""
    return ("█" * full + partial).ljust(width, "·")


def mem_fraction(used_mib: float | None, total_mib: float | None) -> float | None:
    if used_mib is None or not total_mib:
        return None
    return used_mib / total_mib


def resample(values: Sequence[float | None], width: int) -> list[float | None]:
    """``values`` as they are when they are no more than ``width``, else squeezed into ``width`` cells.

    Each output cell takes the maximum of the points that fall in it, so a short spike stays visible; a
    cell whose every point is None (no reading) is None.
    """
    if width <= 0 or not values:
        return []
    if len(values) <= width:
        return list(values)
    values = list(values)
    if None not in values:
        return [max(values[lo:hi]) for lo, hi in _cells(len(values), width)]  # type: ignore[type-var]
    out: list[float | None] = []
    for lo, hi in _cells(len(values), width):
        read = [v for v in values[lo:hi] if v is not None]
        out.append(max(read) if read else None)
    return out


@functools.lru_cache(maxsize=64)
def _cells(n: int, width: int) -> tuple[tuple[int, int], ...]:
    """The [lo, hi) points of each of ``width`` cells over ``n`` points (n > width)."""
    step = n / width
    return tuple((int(i * step), max(int(i * step) + 1, int((i + 1) * step))) for i in range(width))


NO_READING = "·"
"""A sparkline cell with no reading in it (the GPU's memory could not be read then)."""


def sparkline(values: Sequence[float | None], top: float, width: int) -> str:
    """Block characters scaled from 0 to ``top`` (a GPU's total memory), right-aligned in width; a cell
    without a reading is ``NO_READING``."""
    return spark_cells(resample(values, width), top, width)


def spark_cells(points: Sequence[float | None], top: float, width: int) -> str:
    """``sparkline`` of points already resampled to at most ``width``."""
    if top <= 0:
        top = max((v for v in points if v is not None), default=0.0) or 1.0
    chars = []
    for v in points:
        if v is None or v != v:  # no reading, or not a number (NaN)
            chars.append(NO_READING)
            continue
        fraction = v / top  # clamped to [0, 1], then 8 levels (the clamp without min/max: a hot loop)
        level = 0 if fraction <= 0.0 else 8 if fraction >= 1.0 else round(fraction * 8)
        chars.append(BLOCKS[level] if level or v <= 0 else BLOCKS[1])
    return "".join(chars).rjust(width)


def readings(values: Iterable[float | None]) -> list[float]:
    """The points that have a reading."""
    return [v for v in values if v is not None]


def duration(seconds: float | None) -> str:
    """'1:02:03' or '02:03'."""
    if seconds is None:
        return DASH
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def clock(t: float | None) -> str:
    """A wall-clock time of the run (local time), '-' before any event."""
    if not t:
        return DASH
    return local_time("%Y-%m-%d %H:%M:%S", t)


def time_of_day(t: float | None) -> str:
    """'08:05:36' (local time), '-' before any event."""
    if not t:
        return DASH
    return local_time("%H:%M:%S", t)


def started(at: float | None, now: float) -> str:
    """When a process started (``procdisplay.clock_label``, the CLI's and the report's words)."""
    return clock_label(at, now)


def speed(value: float) -> str:
    return f"{value:g}x"


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def narrow_word(word: str, first: bool) -> str:
    """A path cut to its end: ``/tmp/kimitui-sim-x/worker0.ready`` -> ``…/worker0.ready``; the first word, a
    dotted module, to its last name: ``kimitui.hosts.sim.worker`` -> ``worker``."""
    if word.startswith(("/", "./", "../", "~/")) and "/" in word.rstrip("/")[1:]:  # not a model id (org/name)
        end = "…/" + word.rstrip("/").rsplit("/", 1)[-1]
        return end if len(end) < len(word) else word
    names = word.split(".")
    if first and len(names) > 2 and all(n.isidentifier() for n in names):
        return names[-1]
    return word


def fit_command(gist: str, width: int) -> str:
    """A command's gist (``command_gist``) in WIDTH cells: whole when it fits; else its paths narrowed to their
    ends first, so what tells one process from its siblings (``--title VLLM::Worker_TP3``, ``--gpu 3``) stays
    in view; then cut at the end."""
    if len(gist) <= width:
        return gist
    return shorten(" ".join(narrow_word(w, i == 0) for i, w in enumerate(gist.split(" "))), width)


PHASE_LETTERS = {"macro": "M", "cleanup": "C", "micro": "U", "analysis": "A", "restart": "R", "check": "K"}
"""A phase's mark on the time-based views (the help lists them)."""


def phase_marks(times: Sequence[float], starts: Sequence[tuple[float, str]], width: int) -> str:
    """A line as wide as a sparkline of ``times`` (``sparkline``'s columns, right-aligned the same way)
    with each phase's letter at the column of its start; '' when no start falls within the points."""
    n = len(times)
    if width <= 0 or n == 0:
        return ""
    import bisect

    cells = [" "] * width
    shown = min(n, width)
    step = n / width if n > width else 1.0
    hit = False
    for t, phase in starts:
        if t < times[0] or t > times[-1] + (times[-1] - times[0]) / max(n - 1, 1):
            continue  # before the window, or after its last point and the next
        i = min(bisect.bisect_left(times, t), n - 1)
        col = int(i / step) if n > width else i
        col = width - shown + min(col, shown - 1)
        cells[col] = PHASE_LETTERS.get(phase, phase[:1].upper() or "?")
        hit = True
    return "".join(cells) if hit else ""
