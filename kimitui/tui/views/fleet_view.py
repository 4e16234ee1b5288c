"""The fleet view (``kimitui fleet``): one row per host, what needs the operator first, each host's GPUs under it
when expanded, and the status line above. Everything shown is read from the fold, ``session.state.fleet``
(kimitui/core/fleet_state.py): its order (``ordered``), its words (``attention``) and its revisions, by which a
host's rows are made again only when its round changed them (the other rows are given to the table as the very
cells they were: ``KeyedTable.sync`` skips them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.text import Text
from textual.message import Message

from kimitui.core.events.fleet import FleetGpu, FleetHost
from kimitui.core.fleet_state import CAPPED, DOWN, HELD, OK, XID, FleetState, attention, held_without_service
from kimitui.tui import fmt
from kimitui.tui.palette import Colors
from kimitui.tui.widgets.keyed_table import Cell, KeyedTable, Row

SORTS = ("attention", "name", "memory", "util", "temp", "power")
"""The orders ``s`` cycles through: the fold's attention order first; the others largest first, ties in
attention order."""

HOST_MIN, HOST_MAX = 18, 28
"""The host column is as wide as the longest name (and its mark), within these."""
ATTENTION_MIN = 32
"""The reasons' column keeps at least this many cells: narrower terminals hide other columns first."""
HIDE_FIRST = ("clock", "service", "gpus", "requests", "procs", "power")
"""The columns a narrow terminal hides, in this order, until the reasons have ``ATTENTION_MIN`` cells."""
SCROLLBAR = 1
GPU_SEP = "\t"
"""Between a host's name and a GPU's index in a GPU row's key (no host name has a tab)."""


def host_key(name: str) -> str:
    return name


def gpu_key(name: str, index: int) -> str:
    return f"{name}{GPU_SEP}{index}"


def host_of(key: str) -> str:
    """The host a row belongs to (its own name for a host row)."""
    return key.split(GPU_SEP, 1)[0]


def is_gpu_row(key: str) -> bool:
    return GPU_SEP in key


@dataclass(frozen=True, slots=True)
class HostFigures:
    """A host's GPUs summed up for its row and for the orders (None: no GPU says)."""

    gpus: int
    used_mib: float | None
    total_mib: float | None
    util_pct: float | None
    temp_c: float | None
    power_w: float | None
    holders: int | None
    service_holders: int | None

    @classmethod
    def of(cls, host: FleetHost) -> HostFigures:
        def total(values: list[float | None]) -> float | None:
            read = [v for v in values if v is not None]
            return sum(read) if read else None

        gs = host.gpus
        utils = [g.util_pct for g in gs if g.util_pct is not None]
        temps = [g.temp_c for g in gs if g.temp_c is not None]
        holders = [g.holders for g in gs if g.holders is not None]
        service = [g.service_holders for g in gs if g.service_holders is not None]
        return cls(gpus=len(gs), used_mib=total([g.mem_used_mib for g in gs]),
                   total_mib=total([g.mem_total_mib for g in gs]),
                   util_pct=sum(utils) / len(utils) if utils else None, temp_c=max(temps) if temps else None,
                   power_w=total([g.power_w for g in gs]), holders=sum(holders) if holders else None,
                   service_holders=sum(service) if service else None)


def rank_style(rank: int, colors: Colors) -> str:
    return {DOWN: f"bold {colors.error}", HELD: f"bold {colors.warning}", XID: f"bold {colors.error}",
            CAPPED: colors.warning}.get(rank, "")


def state_style(state: str, colors: Colors) -> str:
    return {"up": colors.success, "down": f"bold {colors.error}", "slow": colors.warning,
            "stale": colors.warning}.get(state, colors.muted)


def _r(value: str, style: str = "") -> Text:
    return Text(value, justify="right", style=style, no_wrap=True)


def _memory(used: float | None, total: float | None, digits: int, colors: Colors) -> Text:
    if used is None and total is None:
        return _r(fmt.DASH)
    return _r(f"{fmt.gib(used, digits)}/{fmt.gib(total, digits)}", colors.level(fmt.mem_fraction(used, total)))


def _holders(service: int | None, holders: int | None) -> Text:
    if holders is None:
        return _r(fmt.DASH)
    return _r(f"{fmt.num(service)}/{holders}")


def gpu_words(host: FleetHost, g: FleetGpu) -> list[str]:
    """What a GPU row says needs the operator: its memory held with no service, its XID, its clock caps, its link,
    its read error (the words of ``fleet_state.attention``, for this GPU alone)."""
    words = []
    if held_without_service(host, g):
        words.append(f"{fmt.mib(g.mem_used_mib)} MiB held with no service")
    if g.xid:
        words.append(f"XID {g.xid}")
    words += [f"cap: {cap}" for cap in g.throttle]
    if g.link:
        words.append(f"link: {g.link}")
    if g.error:
        words.append(f"error: {g.error}")
    return [fmt.printable(w) for w in words]


def _words_cell(words: Sequence[str], style: str) -> Text:
    return Text("; ".join(words), style=style, no_wrap=True, overflow="ellipsis")


def host_cells(host: FleetHost, figures: HostFigures, rank: int, reasons: list[str], expanded: bool,
               colors: Colors, host_width: int) -> list[Cell]:
    mark = ("▾ " if expanded else "▸ ") if host.gpus else "  "
    style = rank_style(rank, colors)
    f = figures
    requests = (fmt.DASH if host.requests_running is None and host.requests_waiting is None
                else f"{fmt.num(host.requests_running)}/{fmt.num(host.requests_waiting)}")
    return [
        Text(fmt.shorten(mark + fmt.printable(host.name), host_width), style=style, no_wrap=True),
        Text(host.state, style=state_style(host.state, colors), no_wrap=True),
        _r(str(f.gpus) if f.gpus else fmt.DASH),
        _memory(f.used_mib, f.total_mib, 0, colors),
        _r(fmt.num(f.util_pct, "{:.0f}", "%"), colors.level(None if f.util_pct is None else f.util_pct / 100)),
        _r(fmt.num(f.temp_c, "{:.0f}", "C")),
        _r(fmt.num(f.power_w, "{:.0f}", "W")),
        _r(""),
        _holders(f.service_holders, f.holders),
        Text(fmt.shorten(fmt.printable(host.service) or fmt.DASH, 12), no_wrap=True),
        _r(requests),
        _words_cell([fmt.printable(r) for r in reasons], style),
    ]


def gpu_cells(host: FleetHost, g: FleetGpu, colors: Colors, host_width: int) -> list[Cell]:
    label = fmt.shorten(f" {g.index:>2} {fmt.printable(fmt.short_gpu_name(g.name))}", host_width)
    words = gpu_words(host, g)
    return [
        Text(label, style=colors.muted, no_wrap=True),
        Text("error" if g.error else "", style=colors.error, no_wrap=True),
        _r(""),
        _memory(g.mem_used_mib, g.mem_total_mib, 1, colors),
        _r(fmt.num(g.util_pct, "{:.0f}", "%"), colors.level(None if g.util_pct is None else g.util_pct / 100)),
        _r(fmt.num(g.temp_c, "{:.0f}", "C")),
        _r(fmt.num(g.power_w, "{:.0f}", "W")),
        _r(fmt.num(g.sm_clock_mhz, "{:.0f}")),
        _holders(g.service_holders, g.holders),
        Text(""),
        _r(""),
        _words_cell(words, f"bold {colors.error}" if g.xid or g.error else colors.warning if words else ""),
    ]


@dataclass(slots=True)
class _Made:
    """A host's rows as last made, and what they were made from."""

    rev: int
    host: FleetHost
    colors: Colors
    width: int
    expanded: bool
    rank: int
    reasons: list[str]
    figures: HostFigures
    row: list[Cell]
    gpu_rows: list[Row] = field(default_factory=list)


def _sort_value(name: str, made: _Made, sort: str) -> tuple[object, ...]:
    f = made.figures
    value = {"memory": f.used_mib, "util": f.util_pct, "temp": f.temp_c, "power": f.power_w}.get(sort)
    if sort == "name":
        return (name,)
    return (value is None, -(value or 0.0), made.rank, name)


class FleetTable(KeyedTable):
    """Every host of the fleet, a row each, in the order asked; an expanded host's GPUs under it."""

    CURSOR = True
    COLUMNS = (
        ("host", "Host", HOST_MIN),
        ("state", "State", 10),
        ("gpus", "GPUs", 4),
        ("memory", "Mem GiB", 11),
        ("util", "Util", 4),
        ("temp", "Temp", 4),
        ("power", "Power", 6),
        ("clock", "SM MHz", 6),
        ("procs", "Svc/all", 7),
        ("service", "Service", 12),
        ("requests", "Run/wait", 8),
        ("attention", "Needs attention", ATTENTION_MIN),
    )

    class CursorMoved(Message):
        """The cursor is on another row (the app's detail line follows it)."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.host_width = HOST_MIN
        self._made: dict[str, _Made] = {}
        self._order: list[str] = []
        self._order_for: tuple[str, int] = ("", -1)
        self._fit_width = 0
        self.made_last: list[str] = []
        """The hosts whose rows the last ``show`` made again (the others were given as they were)."""
        self.made_total = 0
        """Host rows made since the table was made (a test counts redraws by it)."""
        self.attention_count = 0
        """Hosts that need the operator (rank above OK), as last shown."""

    # -- what the fold says

    def show(self, fleet: FleetState | None, expanded: set[str], sort: str, colors: Colors) -> None:
        hosts = fleet.hosts if fleet is not None else {}
        width = max(HOST_MIN, min(HOST_MAX, max((len(n) for n in hosts), default=0) + 2))
        if width != self.host_width:
            self.host_width = width
            self.set_column_width("host", width)
            if self._fit_width:
                self.fit(self._fit_width)
        made: dict[str, _Made] = {}
        self.made_last = []
        for name, host in hosts.items():
            rev = fleet.revisions.get(name, -1) if fleet is not None else -1
            open_ = name in expanded
            last = self._made.get(name)
            if (last is not None and last.rev == rev and last.host is host and last.colors == colors
                    and last.width == width):
                if last.expanded != open_:
                    last.expanded = open_
                    last.row = host_cells(host, last.figures, last.rank, last.reasons, open_, colors, width)
                    self.made_last.append(name)
                if open_ and not last.gpu_rows:
                    last.gpu_rows = self._gpu_rows(host, colors, width)
                made[name] = last
                continue
            rank, reasons = attention(host)
            figures = HostFigures.of(host)
            made[name] = _Made(rev, host, colors, width, open_, rank, reasons, figures,
                               host_cells(host, figures, rank, reasons, open_, colors, width),
                               self._gpu_rows(host, colors, width) if open_ else [])
            self.made_last.append(name)
        self.made_total += len(self.made_last)
        self._made = made
        self.attention_count = sum(1 for m in made.values() if m.rank < OK)
        order_for = (sort, len(made))
        if self.made_last or order_for != self._order_for:
            # the order moves only when a host's round did (a rank or a figure), or the sort asked changed
            if sort == "attention":
                # FleetState.ordered()'s order (fleet_state.sort_key), from the ranks read above: the fold's
                # attention() is not run over every host again (tests/test_fleet_view.py holds the two equal)
                self._order = sorted(made, key=lambda n: (made[n].rank, n))
            else:
                self._order = sorted(made, key=lambda n: _sort_value(n, made[n], sort))
            self._order_for = order_for
        rows: list[Row] = []
        for name in self._order:
            m = made[name]
            rows.append((host_key(name), m.row))
            if m.expanded:
                rows += m.gpu_rows
        self.sync(rows)

    @staticmethod
    def _gpu_rows(host: FleetHost, colors: Colors, width: int) -> list[Row]:
        return [(gpu_key(host.name, g.index), gpu_cells(host, g, colors, width)) for g in host.gpus]

    # -- the cursor

    @property
    def cursor_key(self) -> str | None:
        keys = self._keys
        return keys[self.cursor_row] if 0 <= self.cursor_row < len(keys) else None

    def move_to_key(self, key: str) -> None:
        index = self._index.get(key)
        if index is not None:
            self.move_cursor(index)

    def move_cursor(self, row: int, *, scroll: bool = True) -> None:
        before = self.cursor_row
        super().move_cursor(row, scroll=scroll)
        if self.cursor_row != before:
            self.post_message(self.CursorMoved())

    def detail(self, key: str | None) -> str:
        """The row under the cursor in full: a host's every reason and what a narrow terminal hides of it, a GPU's
        every figure and word."""
        if key is None:
            return ""
        m = self._made.get(host_of(key))
        if m is None:
            return ""
        host = m.host
        if not is_gpu_row(key):
            parts = [host.name if m.rank == DOWN else f"{host.name}: {host.state}"]  # down: its reason says it
            if host.service:
                parts.append(f"service {host.service}")
            if host.requests_running is not None or host.requests_waiting is not None:
                parts.append(f"requests {fmt.num(host.requests_running)} running, "
                             f"{fmt.num(host.requests_waiting)} waiting")
            parts += m.reasons or ["nothing needs you"]
            return fmt.printable(" · ".join(parts))
        index = int(key.split(GPU_SEP, 1)[1])
        g = next((g for g in host.gpus if g.index == index), None)
        if g is None:
            return ""
        parts = [f"{host.name} GPU {g.index}", fmt.short_gpu_name(g.name) or fmt.DASH,
                 f"SM {fmt.num(g.sm_clock_mhz)} MHz",
                 f"holders {fmt.num(g.holders)} ({fmt.num(g.service_holders)} of the service)"]
        parts += gpu_words(host, g) or ["nothing needs you"]
        return fmt.printable(" · ".join(parts))

    # -- width

    def fit(self, width: int) -> None:
        """Hide what a WIDTH-cell terminal has no room for (``HIDE_FIRST``) and give the reasons the rest."""
        self._fit_width = width
        fixed = {key: w or 0 for key, _, w in self.COLUMNS}
        fixed["host"] = self.host_width
        room = width - SCROLLBAR
        shown = [key for key in fixed if key != "attention"]

        def used() -> int:
            return sum(fixed[k] + 2 for k in shown) + 2

        for key in HIDE_FIRST:
            if room - used() >= ATTENTION_MIN:
                break
            shown.remove(key)
        for key in HIDE_FIRST:
            self.set_column_hidden(key, key not in shown)
        self.set_column_width("attention", max(ATTENTION_MIN, room - used()))


StatusPart = str | tuple[str, str]
STATES = ("up", "down", "slow", "stale", "connecting")


def status_line(fleet: FleetState | None, error: str, sort: str, needing: int, title: str, colors: Colors) -> Text:
    """The line above the table: rounds and the last round's time, hosts by state, GPUs, how many need the
    operator, the source's own error, the order, then the source and where (a long URL is what a narrow
    terminal cuts)."""
    parts: list[StatusPart] = [(" kimitui fleet ", f"bold reverse {colors.primary}")]
    if title:
        parts.append(f" {fmt.printable(title)}")
    if fleet is None or not fleet.rounds:
        parts.append(("  waiting for the first round", colors.muted))
    else:
        counts = fleet.counts()
        parts.append(f"  round {fleet.rounds}" + (f" in {fleet.round_ms:.0f} ms" if fleet.round_ms is not None else ""))
        parts.append(f"  hosts {counts['hosts']}:")
        by_state = [(f" {counts[s]} {s}", state_style(s, colors)) for s in STATES if counts.get(s)]
        for i, (words, style) in enumerate(by_state):
            parts.append((words + ("," if i < len(by_state) - 1 else ""), style))
        parts.append(f"  GPUs {counts['gpus']}")
        if needing:
            parts.append((f"  {needing} need you", f"bold {colors.warning}"))
    if error:
        parts.append((f"  source: {fmt.printable(error)}", f"bold {colors.error}"))
    parts.append((f"  sorted by {sort}", colors.muted))
    if fleet is not None and fleet.source:
        parts.append((f"  {fleet.source}" + (f" {fmt.printable(fleet.where)}" if fleet.where else ""), colors.muted))
    text = Text(no_wrap=True, overflow="ellipsis")
    for part in parts:
        if isinstance(part, str):
            text.append(part)
        else:
            text.append(*part)
    return text

