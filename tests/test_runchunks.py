"""Long recordings: the chunked, compressed run with its index, rotation, and seeking in them."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from kimitui.core import replay
from kimitui.core.events import Event, GpuSample, HostSample, encode
from kimitui.core.replay import Player, state_at
from kimitui.core.runchunks import ChunkedWriter, SegmentedWriter, index_path, segment_path
from kimitui.core.runfile import FORMAT_VERSION, RunHeader, RunReader
from kimitui.core.state import fold_all
from kimitui.resources import bundled_runs, find_run
from tests.support import campaign, comparable

HEADER = RunHeader(FORMAT_VERSION, 1_000_000.0, "sim", {"command": "record"})


def chunked(path: Path, events: list[Event], chunk_bytes: int = 8000, close: bool = True) -> ChunkedWriter:
    writer = ChunkedWriter(path, HEADER.to_json(), chunk_bytes=chunk_bytes)
    for ev in events:
        writer.append(ev)
    if close:
        writer.close()
    return writer


def positions(n: int) -> list[int]:
    return sorted(p for p in {0, 1, 2, 15, 120, 299, 305, 310, n // 2, n - 7, n - 1, n} if 0 <= p <= n)


def assert_seeks_equal_fold(reader: RunReader, events: list[Event]) -> None:
    assert len(reader) == len(events)
    player = Player(reader)
    for position in positions(len(events)):
        expected = comparable(fold_all(events[:position]))
        assert comparable(state_at(reader, position)) == expected, position
        player.seek_index(position)  # from the checkpoints
        assert comparable(player.session.state) == expected, position
        assert player.session.state.events_folded == position


@pytest.fixture
def few_per_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay, "CHECKPOINT_EVERY", 3)  # many snapshots in a short run


def test_seek_in_a_chunked_compressed_run_equals_folding_from_start(tmp_path: Path, few_per_checkpoint: None) -> None:
    """In a chunked compressed run, a seek to any position, forward or back past the fold's checkpoints, gives the
    state folding the events from the start gives."""
    events = campaign(700)
    path = tmp_path / "run.jsonl.gz"
    chunked(path, events)
    reader = RunReader(path)
    assert len(reader._store.found.members) > 20, "the run is in many members"
    assert reader.warnings == [] and reader.index_notes == []
    assert_seeks_equal_fold(reader, events)
    # a seek back to a position already passed, after the checkpoints were taken further on
    player = Player(reader)
    player.seek_index(len(events))
    player.seek_index(40)
    assert comparable(player.session.state) == comparable(fold_all(events[:40]))


def test_a_chunked_run_is_one_gzip_stream_to_other_tools(tmp_path: Path) -> None:
    """A chunked run is one gzip stream to other tools: decompressed whole, it is the header and every event's line, in
    order."""
    events = campaign(200)
    path = tmp_path / "run.jsonl.gz"
    chunked(path, events)
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    assert lines[0] == HEADER.to_json()
    assert lines[1:] == [encode(e) for e in events]


def test_memory_points_come_from_the_index_and_match_the_lines(tmp_path: Path) -> None:
    """The memory history's points read from the index are the samples' own figures (a GPU that read nothing as
    nothing), and nothing for an event that is not a sample."""
    events = campaign(100)
    events[5] = HostSample(t=events[5].t, host="sim", seq=5, gpus=[GpuSample(0, "GPU-0", "RTX", mem_used_mib=None)])
    path = tmp_path / "run.jsonl.gz"
    chunked(path, events)
    reader = RunReader(path)
    for i, ev in enumerate(events):
        points = reader.memory_points(i)
        if isinstance(ev, HostSample):
            assert points == (ev.t, [(g.index, g.mem_used_mib) for g in ev.gpus]), i
        else:
            assert points is None


def test_missing_stale_or_torn_index_is_rebuilt(tmp_path: Path, few_per_checkpoint: None) -> None:
    """A missing, torn or stale index is rebuilt from the run and written back as the recorder wrote it: the run reads
    the same either way."""
    events = campaign(400)
    path = tmp_path / "run.jsonl.gz"
    chunked(path, events)
    idx = index_path(path)
    good = idx.read_bytes()
    want = RunReader(path)
    expect = (list(want.times), want.types, [want.raw(i) for i in range(len(want))])

    def same(reader: RunReader) -> None:
        assert (list(reader.times), reader.types, [reader.raw(i) for i in range(len(reader))]) == expect
        assert reader.warnings == []

    idx.unlink()
    same(RunReader(path))
    assert idx.read_bytes() == good, "the rebuilt index is written back as the recorder wrote it"

    idx.write_bytes(good[: len(good) * 2 // 3])  # torn in a record
    reader = RunReader(path)
    same(reader)
    assert any("torn" in note for note in reader.index_notes)
    assert idx.read_bytes() == good

    other = tmp_path / "other.jsonl.gz"
    ChunkedWriter(other, RunHeader(FORMAT_VERSION, 5.0, "else", {}).to_json()).close()
    shutil.copy(index_path(other), idx)  # another run's index
    reader = RunReader(path)
    same(reader)
    assert any("stale" in note for note in reader.index_notes)
    assert_seeks_equal_fold(reader, events)


def test_a_truncated_run_opens_and_says_so_in_one_line(tmp_path: Path, few_per_checkpoint: None) -> None:
    """A run cut mid-member opens with what it holds, says it is truncated in one line, and seeks to the states its
    events fold to."""
    events = campaign(400)
    path = tmp_path / "run.jsonl.gz"
    chunked(path, events)
    data = path.read_bytes()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[: len(data) * 3 // 5])
    reader = RunReader(cut)
    assert 0 < len(reader) < len(events)
    assert len(reader.warnings) == 1 and "truncated" in reader.warnings[0], reader.warnings
    assert "\n" not in reader.warnings[0]
    assert [reader.raw(i) for i in range(len(reader))] == [encode(e).encode() for e in events[: len(reader)]]
    assert_seeks_equal_fold(reader, events[: len(reader)])


def test_a_run_being_recorded_reads_up_to_its_last_event(tmp_path: Path) -> None:
    """Every event is flushed whole: a reader opened while the recorder is still writing sees all of them,
    says nothing is wrong (the recorder holds the index), and leaves the index to the recorder."""
    events = campaign(300)
    path = tmp_path / "run.jsonl.gz"
    writer = chunked(path, events, close=False)
    try:
        before = index_path(path).read_bytes()
        reader = RunReader(path)
        assert len(reader) == len(events)
        assert reader.warnings == []
        assert reader.event(len(events) - 1) == events[-1]
        assert index_path(path).read_bytes() == before
    finally:
        writer.close()


def test_rotated_segments_replay_as_one_run(tmp_path: Path, few_per_checkpoint: None) -> None:
    """Rotated segments replay as one run (each segment also opens alone), seeking to the states the events fold to."""
    events = campaign(600)
    base = tmp_path / "night.jsonl.gz"
    with SegmentedWriter(base, HEADER, rotate_bytes=6_000) as writer:
        for ev in events:
            writer.append(ev)
    assert writer.segment >= 3
    assert all(segment_path(base, n).exists() for n in range(writer.segment + 1))
    assert segment_path(base, 1).name == "night.1.jsonl.gz"
    reader = RunReader(base)
    assert reader.header == HEADER
    assert reader.warnings == []
    assert_seeks_equal_fold(reader, events)
    later = RunReader(segment_path(base, 2))
    assert later.header.meta["segment"] == 2 and 0 < len(later) < len(events)


@pytest.mark.parametrize("name", [p.name for p in bundled_runs()])
def test_checkpoints_keep_every_field_of_the_bundled_runs(name: str, tmp_path: Path, few_per_checkpoint: None) -> None:
    """The bundled runs (a campaign's every kind of event), rewritten chunked: a seek from the checkpoints
    gives the whole state a seek from the start gives, field for field (the snapshots lose nothing)."""
    plain = RunReader(find_run(name))
    events = list(plain.events())
    path = tmp_path / "run.jsonl.gz"
    chunked(path, events, chunk_bytes=20_000)
    reader = RunReader(path)
    assert [reader.raw(i) for i in range(len(reader))] == [encode(e).encode() for e in events]
    player = Player(reader)
    for position in sorted({*positions(len(events)), *range(0, len(events), max(1, len(events) // 9))}):
        player.seek_index(position)
        assert player.session.state == state_at(plain, position), position
        assert comparable(player.session.state) == comparable(fold_all(events[:position])), position
