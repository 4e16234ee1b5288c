"""Opening one file of a chunked run: its index read, what it does not cover decompressed and indexed, and
the index written back for the members it lacked (when no recorder holds it). See kimitui.core.runchunks."""

from __future__ import annotations

import json
import struct
import zlib
from array import array
from pathlib import Path
from typing import IO

from kimitui.core.events import EVENT_TYPES
from kimitui.core.runchunks import (
    _MEMBER,
    _RECORD,
    GZIP_MAGIC,
    INDEX_FORMAT,
    INDEX_VERSION,
    MAX_MEMBER,
    ChunkedRun,
    Member,
    _Found,
    _header_crc,
    _index_head,
    _member_record,
    _Memory,
    decode_line,
    index_path,
    lock_or_none,
    points_of,
    prefix_event,
    segment_path,
)

READ = 4 << 20
_NAMES = {name: name for name in EVENT_TYPES}
"""Type names interned: a day of samples shares one string."""


class ChunkError(Exception):
    """A chunked file that cannot be read (its first member is no gzip, or a member is far too large)."""


def first_member(fh: IO[bytes], path: Path) -> tuple[bytes, int]:
    """The header line (the first line of the first member) and where that member ends."""
    d = zlib.decompressobj(31)
    out = bytearray()
    fed = 0
    try:
        while not d.eof and len(out) <= MAX_MEMBER:
            chunk = fh.read(1 << 16)
            if not chunk:
                break
            fed += len(chunk)
            out += d.decompress(chunk, MAX_MEMBER + 1 - len(out))
    except zlib.error as exc:
        raise ChunkError(f"{path}: cannot decompress: {exc}") from exc
    nl = out.find(b"\n")
    end = fed - len(d.unused_data) if d.eof else fed
    return bytes(out[: nl if nl >= 0 else len(out)]), end


def index_file(path: Path, file_no: int, found: _Found) -> bytes:
    """Add the events of one file of the run to ``found``; returns its header line."""
    name = path.name
    size = path.stat().st_size
    with open(path, "rb") as fh:
        header, _ = first_member(fh, path)
        idx = index_path(path)
        handle = _open_index(idx)
        live = handle is not None and not lock_or_none(handle)
        loaded, why, start, line, valid_len = _load_index(idx, header, file_no, size, found, fh)
        first_new = len(found.members)
        truncated = _scan(fh, name, file_no, start if loaded else 0, size, found, line if loaded else 1,
                          skip_header=not loaded)
    if truncated and not live:
        found.warnings.append(f"{name}: truncated (its recorder did not close it): read up to its last whole "
                              f"event, {len(found.types):,} events in all")
    if why:
        found.index_notes.append(f"{name}: index {why}: rebuilt by reading the file")
    if handle is not None:
        if not live:
            _write_back(handle, header, found, first_new, valid_len, truncated)
        handle.close()
    return header


def _open_index(idx: Path) -> IO[bytes] | None:
    try:
        return open(idx, "ab")
    except OSError:
        return None


def _load_index(idx: Path, header: bytes, file_no: int, size: int, found: _Found, fh: IO[bytes]
                ) -> tuple[bool, str, int, int, int]:
    """The index's records added to ``found`` while they are whole and fit the file: (any loaded, why it
    stopped short ("" when it did not), where the next member starts, its line, the index's good length)."""
    try:
        raw = idx.read_bytes()
    except OSError:
        return False, "missing", 0, 1, 0
    nl = raw.find(b"\n")
    try:
        head = json.loads(raw[:nl]) if nl > 0 else None
    except ValueError:
        head = None
    if not isinstance(head, dict) or head.get("format") != INDEX_FORMAT or head.get("version") != INDEX_VERSION \
            or head.get("run_header_crc") != _header_crc(header):
        return False, "missing" if not raw else "stale", 0, 1, 0
    pos = nl + 1
    prev_end = 0
    line = 1
    loaded = False
    why = ""
    good = pos
    while pos < len(raw):
        try:
            got = _record(raw, pos, file_no, size, prev_end, found)
        except (ValueError, KeyError, TypeError, struct.error) as exc:
            why = f"torn at byte {pos} ({exc})"
            break
        if got is None:
            why = f"stale at byte {pos}"
            break
        pos, prev_end, line = got
        loaded, good = True, pos
    if loaded:
        fh.seek(found.members[-1].off)
        if fh.read(2) != GZIP_MAGIC:  # the file was rewritten under its index
            del found.members[-1:]
            return False, "stale", 0, 1, 0
    return loaded, why, prev_end, line, good


def _record(raw: bytes, pos: int, file_no: int, size: int, prev_end: int, found: _Found
            ) -> tuple[int, int, int] | None:
    kind, plen, crc = _RECORD.unpack_from(raw, pos)
    body = pos + _RECORD.size
    payload = raw[body : body + plen]
    if kind != b"M" or len(payload) != plen or zlib.crc32(payload) != crc:
        raise ValueError("a record is cut short or damaged")
    off, clen, lines, line, n, jlen = _MEMBER.unpack_from(payload, 0)
    if off < prev_end or off + clen > size:
        return None
    p = _MEMBER.size
    meta = json.loads(payload[p : p + jlen])
    p += jlen
    types = [_NAMES[t] for t in meta["types"]]
    times = array("d")
    times.frombytes(payload[p : p + 8 * n])
    p += 8 * n
    offsets = array("I")
    offsets.frombytes(payload[p : p + 4 * n])
    p += 4 * n
    mem = _Memory()
    m = int(meta["m"])
    mem.counts.frombytes(payload[p : p + 2 * n])
    p += 2 * n
    mem.index.frombytes(payload[p : p + 4 * m])
    p += 4 * m
    mem.mib.frombytes(payload[p : p + 8 * m])
    p += 8 * m
    mem.unread = [int(k) for k in meta["unread"]]
    if len(types) != n or len(times) != n or len(offsets) != n or len(mem.counts) != n or len(mem.mib) != m \
            or sum(mem.counts) != m:
        raise ValueError("a record's lists disagree")
    first = len(found.types)
    mem.add_to(found, first)
    found.members.append(Member(file_no, off, clen, line, first, offsets, lines))
    found.times.extend(times)
    found.types.extend(types)
    for k, length in meta["others"]:
        found.others[first + k] = payload[p : p + length]
        p += length
    return body + plen, off + clen, line + lines


def _scan(fh: IO[bytes], name: str, file_no: int, start: int, size: int, found: _Found, line: int,
          skip_header: bool) -> bool:
    """Decompress the members from ``start`` on and index their lines; True when the last member has no
    trailer (the file was cut short)."""
    fh.seek(start)
    pending = b""
    pos = start  # the file offset of pending's first byte
    while True:
        d = zlib.decompressobj(31)
        out: list[bytes] = []
        ulen = 0
        off = pos
        try:
            while not d.eof:
                if not pending:
                    pending = fh.read(READ)
                    if not pending:
                        break
                fed = len(pending)
                data = d.decompress(pending)
                out.append(data)
                ulen += len(data)
                pending = d.unused_data if d.eof else b""
                pos += fed - len(pending)
                if ulen > MAX_MEMBER:
                    raise ChunkError(f"{name}: a gzip member over {MAX_MEMBER >> 20} MiB: not a chunked run")
        except zlib.error:
            found.warnings.append(f"{name}: bytes from {off:,} on are not a gzip member; left out")
            return False
        if not out and not d.eof:
            return False  # the end of the file
        data = b"".join(out)
        offsets, lines = _index_member(data, name, line, found, skip_header)
        skip_header = False
        if len(offsets):
            found.members.append(Member(file_no, off, pos - off, line, len(found.types) - len(offsets), offsets,
                                        lines))
        line += lines
        if not d.eof:
            return True


def _index_member(data: bytes, name: str, line: int, found: _Found, skip_header: bool
                  ) -> tuple[array, int]:
    """Index one member's lines into ``found``: (their offsets, the lines it holds)."""
    offsets = array("I")
    pos, size, lineno = 0, len(data), line - 1
    torn = False
    if skip_header:
        nl = data.find(b"\n")
        pos, lineno = (size, line) if nl < 0 else (nl + 1, line)
    while pos < size:
        lineno += 1
        nl = data.find(b"\n", pos)
        torn = nl < 0
        end = size if torn else nl
        if end > pos:
            got = prefix_event(data, pos, end, torn)
            if got is None:
                decoded = decode_line(data[pos:end])
                if isinstance(decoded, str):
                    if not torn:
                        found.warnings.append(f"{name}: line {lineno} skipped: {decoded}")
                    pos = end + 1
                    continue
                got = decoded
            i = len(found.types)
            found.times.append(got[0])
            found.types.append(_NAMES[got[1]])
            offsets.append(pos)
            mem = _Memory()
            if got[1] != "sample":
                found.others[i] = data[pos:end]
                mem.add(0, [])
            else:
                mem.add(0, points_of(data[pos:end]))
            mem.add_to(found, i)
        pos = end + 1
    return offsets, data.count(b"\n")


def _write_back(handle: IO[bytes], header: bytes, found: _Found, first_new: int, valid_len: int,
                truncated: bool) -> None:
    """Write the index records of the members indexed by reading (the last one only when it is closed)."""
    members = found.members[first_new:]
    if truncated and members:
        members = members[:-1]
    if not members and valid_len:
        return
    try:
        handle.truncate(valid_len)
        if not valid_len:
            handle.write(_index_head(header + b"\n"))
        for j, m in enumerate(members, start=first_new):
            stop = found.members[j + 1].first if j + 1 < len(found.members) else len(found.types)
            others = [(i - m.first, found.others[i]) for i in range(m.first, stop) if i in found.others]
            record = _member_record(m.off, m.clen, m.lines, m.line, found.types[m.first:stop],
                                    found.times[m.first:stop], m.offsets, others, _Memory.of(found, m.first, stop))
            handle.write(record)
        handle.flush()
    except OSError:
        pass


def open_chunked(path: Path) -> tuple[bytes, ChunkedRun]:
    """The first segment's header line and the run's events, over every segment after it."""
    files = [path]
    while segment_path(path, len(files)).exists():
        files.append(segment_path(path, len(files)))
    found = _Found()
    header = b""
    for n, file in enumerate(files):
        head = index_file(file, n, found)
        if n == 0:
            header = head
    return header, ChunkedRun(files, found)
