"""Run files: JSON Lines, a header line then one event a line. See docs/run-format.md.

Writing appends and flushes per event and fsyncs at phase boundaries. Reading builds a light index
(time, type, byte offset) without decoding events, so a long run opens fast and any event can be
decoded on demand; a torn last line is skipped with a warning, an unknown version is refused. A line
that is no valid event (not JSON, an unknown type, a field of the wrong type) is skipped with a warning
naming its line: at open when its start does not look like an event's, else when it is first decoded.
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
import re
import time
import zlib
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kimitui.core.events import EVENT_TYPES, Event, EventDecodeError, PhaseEnd, PhaseStart, decode, encode
from kimitui.core.runchunks import is_chunked
from kimitui.core.runchunks_scan import ChunkError, open_chunked
from kimitui.core.typed import FieldTypeError, build

FORMAT_NAME = "kimitui-run"
FORMAT_VERSION = 1
LATE_OK_S = 1.0
"""How far an event may be stamped before the one recorded ahead of it without a warning."""

# No "^": Pattern.match(data, pos) already anchors at pos, while "^" only matches at the start of the
# whole buffer, which sent every line but the first down the slow path (a full decode per line).
_PREFIX = re.compile(rb'\{"t":(-?[0-9.eE+-]+),"type":"([a-z_]+)"')


def _number(text: bytes) -> float | None:
    """The time a line's prefix gives; None when it is no finite number (the line is then decoded whole)."""
    try:
        t = float(text)
    except ValueError:
        return None
    return t if t - t == 0.0 else None


class RunFileError(Exception):
    """A run file that cannot be read at all (not a run file, unknown version, unreadable)."""


@dataclass(frozen=True, slots=True)
class RunHeader:
    version: int
    created: float = 0.0
    host: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": FORMAT_NAME,
                "version": self.version,
                "created": self.created,
                "host": self.host,
                "meta": self.meta,
            },
            separators=(",", ":"),
        )


class RunWriter:
    """Append-only writer: one flush per event, fsync at phase boundaries and on close."""

    def __init__(self, path: str | Path, host: str = "", meta: dict[str, Any] | None = None,
                 created: float | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.header = RunHeader(FORMAT_VERSION, time.time() if created is None else created, host, meta or {})
        self._fh: IO[str] = open(self.path, "x", encoding="utf-8")  # noqa: SIM115 (kept open: streaming)
        self._fh.write(self.header.to_json() + "\n")
        self._fh.flush()
        self.count = 0

    @classmethod
    def reopen(cls, path: str | Path) -> tuple[RunWriter, int]:
        """Go on writing an existing run file (a campaign resumed after a crash): its header is checked as a
        reader checks it, and a torn last line (the event in hand when the writer died) is cut off first, so
        what follows starts on a line of its own. Returns the writer and the bytes cut off. A compressed run
        cannot be appended to."""
        p = Path(path)
        try:
            with open(p, "rb") as fh:
                head = fh.read(4)
                fh.seek(0)
                if head[:2] == b"\x1f\x8b" or head == b"\x28\xb5\x2f\xfd":
                    raise RunFileError(f"{p}: a compressed run cannot be appended to (resume from the plain .jsonl)")
                first = fh.readline(MAX_LINE + 1)
                if len(first) > MAX_LINE and not first.endswith(b"\n"):
                    raise RunFileError(f"{p}: first line is over {_size_text(MAX_LINE)}, not a kimitui run header")
                header = parse_header_line(first, p)
                size = fh.seek(0, os.SEEK_END)
                keep = _end_of_last_line(fh, len(first), size)
        except FileNotFoundError as exc:
            raise RunFileError(f"{p}: no such run file") from exc
        except IsADirectoryError as exc:
            raise RunFileError(f"{p}: is a directory, not a run file") from exc
        except PermissionError as exc:
            raise RunFileError(f"{p}: permission denied") from exc
        dropped = size - keep
        if dropped:
            os.truncate(p, keep)
        self = cls.__new__(cls)
        self.path, self.header, self.count = p, header, 0
        self._fh = open(p, "a", encoding="utf-8")  # noqa: SIM115 (kept open: streaming)
        return self, dropped

    def append(self, event: Event) -> None:
        self._fh.write(encode(event) + "\n")
        self._fh.flush()
        self.count += 1
        if isinstance(event, PhaseStart | PhaseEnd):
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh.closed:
            return
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


MAX_LINE = 64 << 20
"""Bytes of one line beyond which it is skipped without being read whole (an event is a few KiB: a sample of
64 processes about 20 KiB). See docs/run-format.md."""
READ_CHUNK = 4 << 20
"""Bytes read (or decompressed) at a time."""


def _end_of_last_line(fh: IO[bytes], header_end: int, size: int) -> int:
    """The offset just after the file's last newline (not before ``header_end``), looked for backwards a MiB
    at a time: a torn last line of any length is cut off, never the lines before it."""
    end = size
    while end > header_end:
        start = max(header_end, end - (1 << 20))
        fh.seek(start)
        nl = fh.read(end - start).rfind(b"\n")
        if nl >= 0:
            return start + nl + 1
        end = start
    return header_end


def _size_text(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else f"{n:,} bytes"


class _Collector:
    """A run's bytes gathered chunk by chunk, every line over ``cap`` left out as it is read (its newline is
    kept, so the lines after it keep their numbers): memory is the lines kept plus about ``cap``, never the
    long line. ``skipped`` lists (line number, length) of each line left out."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.skipped: list[tuple[int, int]] = []
        self._line_start = 0
        """Where in ``data`` the line being read starts."""
        self._dropping = 0
        """Bytes so far of a line over the cap that is being read past (0: none)."""
        self._counted = (0, 0)
        """(position, newlines before it): line numbers are counted only when a line is skipped."""

    def _line_number(self, pos: int) -> int:
        at, newlines = self._counted
        newlines += self.data.count(b"\n", at, pos)
        self._counted = (pos, newlines)
        return newlines + 1

    def add(self, chunk: bytes) -> None:
        if self._dropping:
            nl = chunk.find(b"\n")
            if nl < 0:
                self._dropping += len(chunk)
                return
            self.skipped.append((self._line_number(self._line_start), self._dropping + nl))
            self._dropping = 0
            chunk = chunk[nl:]
        data, cap = self.data, self.cap
        scan = len(data)
        data += chunk
        start = self._line_start
        while len(data) - start > cap:
            nl = data.find(b"\n", start, start + cap + 1)
            if nl >= 0:  # a line within the cap ends there
                start = nl + 1
                continue
            nl = data.find(b"\n", start + cap + 1)
            if nl < 0:  # over the cap and not ended yet: read past the rest of it
                self._dropping = len(data) - start
                del data[start:]
                break
            self.skipped.append((self._line_number(start), nl - start))
            del data[start:nl]
            start += 1
        else:
            last = data.rfind(b"\n", max(scan, start))
            if last >= 0:
                start = last + 1
        self._line_start = start

    def end(self) -> bytearray:
        if self._dropping:  # the last line, over the cap (and torn)
            self.skipped.append((self._line_number(self._line_start), self._dropping))
            self._dropping = 0
        return self.data


def _read_capped(path: Path, cap: int = MAX_LINE) -> tuple[bytearray, bool, list[tuple[int, int]]]:
    """The run's bytes (decompressed if gzipped) with every line over ``cap`` left out (see ``_Collector``),
    whether a compressed stream was cut short, and the lines left out. Read in chunks of ``READ_CHUNK``."""
    collector = _Collector(cap)
    # Unbuffered: a BufferedReader would copy every chunk once more on its way.
    with open(path, "rb", buffering=0) as fh:
        magic = fh.read(4)
        if magic[:2] != b"\x1f\x8b":
            if magic == b"\x28\xb5\x2f\xfd":
                raise RunFileError(f"{path}: zstd-compressed run files are not supported; use gzip")
            fh.seek(0)
            while chunk := fh.read(READ_CHUNK):
                collector.add(chunk)
            return collector.end(), False, collector.skipped
    truncated = False
    try:
        with gzip.open(path, "rb") as gz:
            while chunk := gz.read1(READ_CHUNK):  # read1: what came before a cut-short end is kept
                collector.add(chunk)
    except EOFError:
        truncated = True  # a gzip stream cut short (a crash while compressing): keep what decompressed
    except (OSError, zlib.error) as exc:
        raise RunFileError(f"{path}: cannot decompress: {exc}") from exc
    return collector.end(), truncated, collector.skipped


def parse_header_line(first: bytes, path: Path, warnings: list[str] | None = None) -> RunHeader:
    """A run's first line as its header; RunFileError when it is none, or of a version not read here. A
    field of the wrong type (``created``, ``host``, ``meta``) is left at its default, with a warning in
    ``warnings`` (the events are still the run's)."""
    if not first.strip():
        raise RunFileError(f"{path}: empty file, not a kimitui run")
    try:
        head = json.loads(first)
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, an integer of over 4300 digits
        raise RunFileError(f"{path}: first line is not a kimitui run header") from exc
    if not isinstance(head, dict) or head.get("format") != FORMAT_NAME:
        raise RunFileError(f"{path}: not a kimitui run (format is {head.get('format')!r})"
                           if isinstance(head, dict) else f"{path}: not a kimitui run")
    version = head.get("version")
    if type(version) is not int or version != FORMAT_VERSION:
        raise RunFileError(
            f"{path}: run format version {version!r} is not supported "
            f"(this kimitui reads version {FORMAT_VERSION}); upgrade kimitui to open it"
        )
    fields: dict[str, Any] = {"version": version}
    for key in ("created", "host", "meta"):
        if key not in head:
            continue
        try:
            fields[key] = getattr(build(RunHeader, {"version": version, key: head[key]}), key)
        except FieldTypeError as exc:
            if warnings is not None:
                warnings.append(f"{path.name}: header {exc}; left out")
    return RunHeader(**fields)


class RunReader:
    """An opened run: header plus an index of its events, decoded lazily.

    ``warnings`` lists one line for every line that was skipped (torn or malformed), naming the line. A
    line whose start looks like an event's is indexed without decoding, so one whose fields are wrong is
    found when it is first decoded: ``decoded(i)`` then warns once and gives None.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.warnings: list[str] = []
        self.skipped: dict[int, str] = {}
        """Events of the index that did not decode: index -> why (each warned about once)."""
        self._store: Any = None
        """A chunked run's events (kimitui.core.runchunks), read member by member; None: a whole file."""
        try:
            if is_chunked(self.path):
                self._open_chunked()
                return
            data, truncated, skipped = _read_capped(self.path)
        except FileNotFoundError as exc:
            raise RunFileError(f"{self.path}: no such run file") from exc
        except IsADirectoryError as exc:
            raise RunFileError(f"{self.path}: is a directory, not a run file") from exc
        except PermissionError as exc:
            raise RunFileError(f"{self.path}: permission denied") from exc
        if truncated:
            self.warnings.append(f"{self.path.name}: compressed stream is truncated; reading what is intact")
        if skipped and skipped[0][0] == 1:
            raise RunFileError(f"{self.path}: first line is over {_size_text(MAX_LINE)}, not a kimitui run header")
        self.warnings += [f"{self.path.name}: line {lineno} skipped: {size:,} bytes, over the "
                          f"{_size_text(MAX_LINE)} a line may hold" for lineno, size in skipped]
        self._data = data
        self._view = memoryview(data)
        self.header = self._parse_header()
        self.times = array("d")
        self._offsets = array("q")
        self._ends = array("q")
        self._lines = array("q")
        self.types: list[str] = []
        self._index()

    def _open_chunked(self) -> None:
        try:
            header_line, self._store = open_chunked(self.path)
        except ChunkError as exc:
            raise RunFileError(str(exc)) from exc
        self.header = parse_header_line(header_line, self.path, self.warnings)
        found = self._store.found
        self.warnings += found.warnings
        self.index_notes: list[str] = found.index_notes
        self.times, self.types = found.times, found.types
        self._make_monotonic()

    # -- opening

    def _parse_header(self) -> RunHeader:
        data = self._data
        if not data or data.isspace():  # not data.strip(): no copy of a large run
            raise RunFileError(f"{self.path}: empty file, not a kimitui run")
        end = data.find(b"\n")
        header = parse_header_line(data[: end if end >= 0 else len(data)], self.path, self.warnings)
        self._body_start = end + 1 if end >= 0 else len(data)
        return header

    def _index(self) -> None:
        data = self._data
        pos = self._body_start
        size = len(data)
        lineno = 1
        match = _PREFIX.match
        while pos < size:
            lineno += 1
            nl = data.find(b"\n", pos)
            torn = nl < 0
            end = size if torn else nl
            if end > pos:
                # Fast path: a complete line whose prefix gives a number and a known type is indexed
                # without decoding; anything else is decoded now, so it is warned about at open.
                m = match(data, pos, end)
                t = _number(m.group(1)) if m is not None and not torn and data[end - 1] == 0x7D else None
                ty = m.group(2).decode() if t is not None and m is not None else ""
                if t is not None and ty in EVENT_TYPES:
                    self.times.append(t)
                    self.types.append(ty)
                    self._offsets.append(pos)
                    self._ends.append(end)
                    self._lines.append(lineno)
                else:
                    self._index_slow(data[pos:end], pos, end, lineno, torn)
            pos = end + 1
        self._make_monotonic()

    def _make_monotonic(self) -> None:
        """Replay and seeking need non-decreasing times. An event stamped earlier than the one before it
        is taken as happening at its predecessor's time. A sample is stamped when it was taken and
        recorded when it arrived, so a step back of up to ``LATE_OK_S`` is normal; more (clocks of two
        machines, a hand-edited file) gets a warning."""
        times = self.times
        late = 0
        self._stamped: dict[int, float] = {}
        """The events moved later: index -> the time on their line."""
        for i in range(1, len(times)):
            if times[i] < times[i - 1]:
                if times[i - 1] - times[i] > LATE_OK_S:
                    late += 1
                self._stamped[i] = times[i]
                times[i] = times[i - 1]
        if late:
            self.warnings.append(f"{self.path.name}: {late} events were stamped more than {LATE_OK_S:g} s earlier "
                                 "than the event before them; replayed at their predecessor's time")

    def _index_slow(self, line: bytes, start: int, end: int, lineno: int, torn: bool) -> None:
        try:
            ev = decode(line)
        except EventDecodeError as exc:
            where = "last line is torn" if torn else f"line {lineno} skipped"
            self.warnings.append(f"{self.path.name}: {where}: {exc}")
            return
        self.times.append(ev.t)
        self.types.append(ev.type)
        self._offsets.append(start)
        self._ends.append(end)
        self._lines.append(lineno)

    # -- access

    def __len__(self) -> int:
        return len(self.types)

    def raw(self, i: int) -> bytes:
        if self._store is not None:
            return self._store.raw(i)
        return bytes(self._view[self._offsets[i] : self._ends[i]])

    def memory_points(self, i: int) -> tuple[float, list[tuple[int, float | None]]] | None:
        """Sample ``i``'s time and memory points where the run's index holds them (a chunked run), else None."""
        if self._store is None:
            return None
        return self._store.memory(i, self._stamped.get(i, self.times[i]))

    def line_of(self, i: int) -> int:
        """The line of the file event ``i`` is on (the header is line 1; of its segment in a rotated run)."""
        return self._store.line_of(i) if self._store is not None else self._lines[i]

    def event(self, i: int) -> Event:
        """Event ``i``, decoded; EventDecodeError when its line is no valid event."""
        return decode(self.raw(i))

    def decoded(self, i: int) -> Event | None:
        """Event ``i``, or None when its line is no valid event: skipped, with one warning naming the line
        (however often it is asked for again: a replay's seeks decode the same events many times)."""
        if i in self.skipped:
            return None
        try:
            return decode(self.raw(i))
        except EventDecodeError as exc:
            self.skip(i, str(exc))
            return None

    def skip(self, i: int, reason: str) -> None:
        """Mark event ``i`` as not readable (warned about once)."""
        if i not in self.skipped:
            self.skipped[i] = reason
            self.warnings.append(f"{self.path.name}: line {self.line_of(i)} skipped: {reason}")

    def events(self, start: int = 0, stop: int | None = None) -> Iterator[Event]:
        """Every readable event of [start, stop), in order; a line that is not one is skipped with a warning."""
        for i in range(start, len(self) if stop is None else stop):
            ev = self.decoded(i)
            if ev is not None:
                yield ev

    def index_at(self, t: float) -> int:
        """Number of events with time <= t (the position just after t)."""
        return bisect.bisect_right(self.times, t)

    @property
    def start_time(self) -> float:
        return self.times[0] if self.times else self.header.created

    @property
    def end_time(self) -> float:
        return self.times[-1] if self.times else self.header.created

    def indices_of(self, *types: str) -> list[int]:
        wanted = set(types)
        return [i for i, ty in enumerate(self.types) if ty in wanted]


def write_run(path: str | Path, events: list[Event], host: str = "", meta: dict[str, Any] | None = None,
              compress: bool = False) -> Path:
    """Write a whole run at once (for generated runs); gzip when ``compress``."""
    path = Path(path)
    created = events[0].t if events else time.time()
    header = RunHeader(FORMAT_VERSION, created, host, meta or {})
    lines = [header.to_json()] + [encode(e) for e in events]
    body = ("\n".join(lines) + "\n").encode()
    if compress:
        with gzip.GzipFile(path, "wb", mtime=0) as gz:
            gz.write(body)
    else:
        path.write_bytes(body)
    return path
