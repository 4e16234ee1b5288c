"""Long recordings: a run file of gzip members (chunks) with an index beside it, and rotation by size.

The run is ``NAME.jsonl.gz``: the header line alone in the first gzip member, then the events in members of
about ``CHUNK_BYTES`` (uncompressed) each. Every event is sync-flushed as it is appended, so the file on disk
always decompresses up to the last event (a crash loses at most the event in hand and leaves the last member
without its trailer: the reader says so in one line). ``gzip -dc`` reads it as one plain run.

The index ``NAME.jsonl.gz.idx`` gets one record per member as the member is closed: where the member is in
the file, each event's time, type and offset in the member, and the raw lines of the events that are not
samples (few and small; a seek folds them all, so they are read without decompressing anything). Opening
reads the index, then decompresses only what it does not cover (the member being written, or everything when
the index is missing, stale or torn: it is rebuilt, and written back when no recorder holds it).

Rotation: ``SegmentedWriter`` starts ``NAME.1.jsonl.gz``, ``NAME.2.jsonl.gz`` ... once a segment's
compressed size reaches its limit; ``open_chunked`` (kimitui.core.runchunks_scan) opens ``NAME.jsonl.gz``
with the segments after it as one run. See docs/run-format.md.
"""

from __future__ import annotations

import bisect
import fcntl
import json
import os
import re
import struct
import zlib
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kimitui.core.events import EVENT_TYPES, Event, EventDecodeError, HostSample, PhaseEnd, PhaseStart, decode, encode
from kimitui.core.sample_memory import MEMORY_ERRORS, line_memory

CHUNK_BYTES = 1 << 20
"""Uncompressed bytes of events a member holds before it is closed (a seek decompresses a few)."""
INDEX_SUFFIX = ".idx"
INDEX_FORMAT = "kimitui-run-index"
INDEX_VERSION = 1
GZIP_MAGIC = b"\x1f\x8b"
MAX_MEMBER = 64 << 20
"""Uncompressed bytes beyond which a member is not a chunk (a whole run gzipped at once: read whole)."""
_CACHE = 16
"""Members kept decompressed (a seek reads the last minute of samples: about five)."""
_FSYNC_TYPES = (PhaseStart.type, PhaseEnd.type)
_RECORD = struct.Struct("<cII")
_MEMBER = struct.Struct("<qqqqII")
_PREFIX = re.compile(rb'\{"t":(-?[0-9.eE+-]+),"type":"([a-z_]+)"')


def index_path(run: Path) -> Path:
    return run.with_name(run.name + INDEX_SUFFIX)


def segment_path(base: Path, n: int) -> Path:
    """Segment ``n`` of a rotated run: the base itself for 0, then ``NAME.n.jsonl.gz``."""
    if n == 0:
        return base
    name = base.name
    for suffix in (".jsonl.gz", ".gz"):
        if name.endswith(suffix):
            return base.with_name(f"{name[: -len(suffix)]}.{n}{suffix}")
    return base.with_name(f"{name}.{n}")


def _header_crc(header_line: bytes) -> int:
    return zlib.crc32(header_line.rstrip(b"\n"))


# -- writing


class ChunkedWriter:
    """Append-only writer of a chunked run and its index: a flush per event, fsync at phase boundaries and
    on close. Holds an exclusive lock on the index while open, so a reader never rewrites it meanwhile."""

    def __init__(self, path: str | Path, header_line: str, level: int = 6, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._level, self._chunk = level, chunk_bytes
        head = (header_line + "\n").encode()
        self._fh: IO[bytes] = open(self.path, "xb")  # noqa: SIM115 (kept open: streaming)
        self._idx: IO[bytes] = open(index_path(self.path), "wb")  # noqa: SIM115
        fcntl.flock(self._idx.fileno(), fcntl.LOCK_EX)
        self._idx.write(_index_head(head))
        first = _compressor(level)
        data = first.compress(head) + first.flush(zlib.Z_FINISH)
        self._fh.write(data)
        self._fh.flush()
        self._idx.flush()
        self.size = len(data)
        """Compressed bytes written so far."""
        self.count = 0
        self._line = 2
        self._comp: Any = None
        self._m_off = self._m_clen = self._m_ulen = self._m_line = 0
        self._times = array("d")
        self._offsets = array("I")
        self._types: list[str] = []
        self._others: list[tuple[int, bytes]] = []
        self._mem = _Memory()

    def append(self, event: Event) -> None:
        points = [(g.index, g.mem_used_mib) for g in event.gpus] if isinstance(event, HostSample) else None
        self.append_line((encode(event) + "\n").encode(), event.t, event.type, points)

    def append_line(self, line: bytes, t: float, type_name: str,
                    points: list[tuple[int, float | None]] | None = None) -> None:
        """Append one encoded event (its line, newline included): what ``append`` does after encoding. A
        sample's memory points are read from its line when not given."""
        if self._comp is None:
            self._comp = _compressor(self._level)
            self._m_off, self._m_clen, self._m_ulen, self._m_line = self.size, 0, 0, self._line
        k = len(self._types)
        self._times.append(t)
        self._offsets.append(self._m_ulen)
        self._types.append(type_name)
        if type_name != "sample":
            self._others.append((k, line[:-1]))
            self._mem.add(k, [])
        else:
            self._mem.add(k, points if points is not None else points_of(line[:-1]))
        data = self._comp.compress(line) + self._comp.flush(zlib.Z_SYNC_FLUSH)
        self._fh.write(data)
        self._fh.flush()
        self._m_clen += len(data)
        self._m_ulen += len(line)
        self.size += len(data)
        self._line += 1
        self.count += 1
        if self._m_ulen >= self._chunk:
            self._end_member()
        if type_name in _FSYNC_TYPES:
            os.fsync(self._fh.fileno())

    def _end_member(self) -> None:
        tail = self._comp.flush(zlib.Z_FINISH)
        self._fh.write(tail)
        self._fh.flush()
        self._m_clen += len(tail)
        self.size += len(tail)
        self._idx.write(_member_record(self._m_off, self._m_clen, len(self._types), self._m_line, self._types,
                                       self._times, self._offsets, self._others, self._mem))
        self._idx.flush()
        self._comp = None
        self._times, self._offsets, self._types, self._others = array("d"), array("I"), [], []
        self._mem = _Memory()

    def close(self) -> None:
        if self._fh.closed:
            return
        if self._comp is not None:
            self._end_member()
        os.fsync(self._fh.fileno())
        self._fh.close()
        os.fsync(self._idx.fileno())
        self._idx.close()


def _compressor(level: int) -> Any:
    return zlib.compressobj(level, zlib.DEFLATED, 31)  # 31: a gzip header and trailer


def _index_head(header_line: bytes) -> bytes:
    head = {"format": INDEX_FORMAT, "version": INDEX_VERSION, "run_header_crc": _header_crc(header_line)}
    return json.dumps(head, separators=(",", ":")).encode() + b"\n"


class _Memory:
    """A member's memory points: per event how many, then every point's GPU index and MiB (NaN: no
    reading), and the samples whose points could not be read (a seek reads those from their line)."""

    def __init__(self) -> None:
        self.counts = array("H")
        self.index = array("i")
        self.mib = array("d")
        self.unread: list[int] = []

    def add(self, k: int, points: list[tuple[int, float | None]] | None) -> None:
        ok = points is not None and len(points) < 0xFFFF and all(
            type(i) is int and -(1 << 31) <= i < 1 << 31 and (m is None or m == m) for i, m in points)
        if not ok or points is None:
            self.counts.append(0)
            self.unread.append(k)
            return
        self.counts.append(len(points))
        self.index.extend(i for i, _ in points)
        self.mib.extend(_NAN if m is None else m for _, m in points)

    def add_to(self, found: _Found, first: int) -> None:
        """This member's points into the run's (its first event is the run's ``first``)."""
        start = found.mem_start
        total = start[-1]
        for c in self.counts:
            total += c
            start.append(total)
        found.mem_index.extend(self.index)
        found.mem_mib.extend(self.mib)
        found.unread.update(first + k for k in self.unread)

    @classmethod
    def of(cls, found: _Found, first: int, stop: int) -> _Memory:
        """The points of the run's events [first, stop) as a member's."""
        mem = cls()
        start = found.mem_start
        mem.counts.extend(start[i + 1] - start[i] for i in range(first, stop))
        mem.index.extend(found.mem_index[start[first] : start[stop]])
        mem.mib.extend(found.mem_mib[start[first] : start[stop]])
        mem.unread = [i - first for i in range(first, stop) if i in found.unread]
        return mem


_NAN = float("nan")


def points_of(line: bytes) -> list[tuple[int, float | None]] | None:
    try:
        return line_memory(line)[1]
    except MEMORY_ERRORS:
        return None


def _member_record(off: int, clen: int, lines: int, line: int, types: list[str], times: array,
                   offsets: array, others: list[tuple[int, bytes]], mem: _Memory) -> bytes:
    """One member's index record: kind, payload length, CRC-32, then (offset, compressed length, lines,
    first line, events, JSON length), the JSON (types, others' lengths, memory points' count, unread
    samples), times, offsets, memory counts, indexes and MiB, then the others' lines."""
    meta = json.dumps({"types": types, "others": [[k, len(raw)] for k, raw in others], "m": len(mem.index),
                       "unread": mem.unread}, separators=(",", ":")).encode()
    payload = b"".join([_MEMBER.pack(off, clen, lines, line, len(types), len(meta)), meta, times.tobytes(),
                        offsets.tobytes(), mem.counts.tobytes(), mem.index.tobytes(), mem.mib.tobytes(),
                        *(raw for _, raw in others)])
    return _RECORD.pack(b"M", len(payload), zlib.crc32(payload)) + payload


class SegmentedWriter:
    """A chunked run rotated by size: once a segment's compressed size reaches ``rotate_bytes`` the next
    event starts the next segment (its header is the first's, with ``segment`` in its meta)."""

    def __init__(self, path: str | Path, header: Any, rotate_bytes: int | None = None, level: int = 6) -> None:
        self.path = Path(path)
        self.header = header
        self.rotate_bytes = rotate_bytes
        self._level = level
        self.segment = 0
        self.count = 0
        self._done_bytes = 0
        self._writer = ChunkedWriter(self.path, header.to_json(), level)

    @property
    def segment_path(self) -> Path:
        return self._writer.path

    @property
    def size(self) -> int:
        """Compressed bytes of the segment being written."""
        return self._writer.size

    @property
    def total_size(self) -> int:
        """Compressed bytes of every segment."""
        return self._done_bytes + self._writer.size

    def append(self, event: Event) -> None:
        if self.rotate_bytes is not None and self._writer.size >= self.rotate_bytes and self._writer.count:
            self._writer.close()
            self._done_bytes += self._writer.size
            self.segment += 1
            from dataclasses import replace

            meta = {**self.header.meta, "segment": self.segment}
            line = replace(self.header, meta=meta).to_json()
            self._writer = ChunkedWriter(segment_path(self.path, self.segment), line, self._level)
        self._writer.append(event)
        self.count += 1

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> SegmentedWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- reading


@dataclass(slots=True)
class Member:
    file: int
    off: int
    clen: int
    line: int
    """The line of the file the member's first byte starts."""
    first: int
    """The run's index of its first event."""
    offsets: array
    """Each event's offset in the member's uncompressed bytes."""
    lines: int
    """The lines (newlines) the member holds."""


@dataclass(slots=True)
class _Found:
    """What indexing gave: the events, in order, and the lines left out."""

    times: array = field(default_factory=lambda: array("d"))
    types: list[str] = field(default_factory=list)
    members: list[Member] = field(default_factory=list)
    others: dict[int, bytes] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    mem_start: array = field(default_factory=lambda: array("q", [0]))
    """Per event, where its memory points start in ``mem_index``/``mem_mib`` (one more at the end)."""
    mem_index: array = field(default_factory=lambda: array("i"))
    mem_mib: array = field(default_factory=lambda: array("d"))
    unread: set[int] = field(default_factory=set)
    """Samples whose memory points the index does not hold."""
    index_notes: list[str] = field(default_factory=list)
    """Why an index was rebuilt (missing is no note): not a warning about the run."""


class ChunkedRun:
    """The events of a chunked run (all its segments): ``raw(i)`` decompresses the member event ``i`` is in
    (a few are kept), or gives a non-sample event from memory."""

    def __init__(self, files: list[Path], found: _Found) -> None:
        self.files = files
        self.found = found
        self._firsts = [m.first for m in found.members]
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self._handles: dict[int, IO[bytes]] = {}

    def raw(self, i: int) -> bytes:
        other = self.found.others.get(i)
        if other is not None:
            return other
        m = bisect.bisect_right(self._firsts, i) - 1
        data = self._member_bytes(m)
        off = self.found.members[m].offsets[i - self._firsts[m]]
        end = data.find(b"\n", off)
        return data[off : end if end >= 0 else len(data)]

    def memory(self, i: int, t: float) -> tuple[float, list[tuple[int, float | None]]] | None:
        """Sample ``i``'s memory points from the index (None: not there, read its line)."""
        found = self.found
        if i in found.unread or found.types[i] != "sample":
            return None
        a, b = found.mem_start[i], found.mem_start[i + 1]
        return t, [(g, None if m != m else m) for g, m in zip(found.mem_index[a:b], found.mem_mib[a:b], strict=True)]

    def line_of(self, i: int) -> int:
        m = bisect.bisect_right(self._firsts, i) - 1
        member = self.found.members[m]
        off = member.offsets[i - self._firsts[m]]
        return member.line + self._member_bytes(m).count(b"\n", 0, off)

    def _member_bytes(self, m: int) -> bytes:
        data = self._cache.get(m)
        if data is not None:
            self._cache.move_to_end(m)
            return data
        member = self.found.members[m]
        fh = self._handles.get(member.file)
        if fh is None:
            fh = self._handles[member.file] = open(self.files[member.file], "rb")  # noqa: SIM115
        fh.seek(member.off)
        data = zlib.decompressobj(31).decompress(fh.read(member.clen), MAX_MEMBER)
        self._cache[m] = data
        if len(self._cache) > _CACHE:
            self._cache.popitem(last=False)
        return data

    def close(self) -> None:
        for fh in self._handles.values():
            fh.close()
        self._handles.clear()


def is_chunked(path: Path) -> bool:
    """Whether ``path`` is a chunked run: an index beside it, or a first gzip member that ends early and is
    followed by another (a chunked run whose index was lost)."""
    if index_path(path).exists() or segment_path(path, 1).exists():
        return True
    with open(path, "rb") as fh:
        data = fh.read(1 << 16)
    if data[:2] != GZIP_MAGIC:
        return False
    d = zlib.decompressobj(31)
    try:
        d.decompress(data, MAX_MEMBER)
    except zlib.error:
        return False
    return d.eof and d.unused_data[:2] == GZIP_MAGIC


def lock_or_none(fh: IO[bytes]) -> bool:
    """Whether the index could be locked (no recorder is writing it)."""
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def prefix_event(data: bytes, pos: int, end: int, torn: bool) -> tuple[float, str] | None:
    """A line's time and type when its prefix shows an event (no decoding), else None."""
    m = _PREFIX.match(data, pos, end)
    if m is None or torn or data[end - 1] != 0x7D:
        return None
    try:
        t = float(m.group(1))
    except ValueError:
        return None
    ty = m.group(2).decode()
    return (t, ty) if t - t == 0.0 and ty in EVENT_TYPES else None


def decode_line(line: bytes) -> tuple[float, str] | str:
    """A line that is no fast-path event, decoded: its time and type, or why it is none."""
    try:
        ev = decode(line)
    except EventDecodeError as exc:
        return str(exc)
    return ev.t, ev.type

