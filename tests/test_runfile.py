from __future__ import annotations

import gzip
import json
import random
import tracemalloc
from pathlib import Path

import pytest

from kimitui.core.events import (
    EVENT_TYPES,
    AllReduceRow,
    BudgetRow,
    CampaignControl,
    CampaignEnd,
    CampaignPlan,
    CampaignResume,
    CleanupPlan,
    Consent,
    DecodeBudget,
    DrainProgress,
    EventDecodeError,
    FleetGpu,
    FleetHost,
    FleetSample,
    GemmRow,
    GpuSample,
    GpuVerdict,
    HostCommand,
    HostSample,
    LogLine,
    MacroPoint,
    MacroProgress,
    MacroRequests,
    MacroVerdict,
    MicroEnd,
    MicroEnv,
    MicroPlan,
    MicroProgress,
    PhaseEnd,
    PhaseStart,
    ProbeResult,
    ProcRef,
    ProcSample,
    RequestFieldsDropped,
    ServedModel,
    ServerSample,
    SignalLate,
    SignalOutcome,
    SignalSent,
    StepPreview,
    StepResult,
    TopoGpu,
    Topology,
    Verification,
    decode,
    encode,
)
from kimitui.core.runfile import FORMAT_VERSION, RunFileError, RunReader, RunWriter, write_run


def sample(t: float, seq: int, used: float = 1000.0) -> HostSample:
    return HostSample(
        t=t, host="box", seq=seq,
        gpus=[GpuSample(i, f"GPU-{i}", "NVIDIA H200", mem_used_mib=used + i, mem_total_mib=143771,
                        mem_reserved_mib=616, util_pct=None) for i in range(2)],
        procs=[ProcSample(pid=557, start_time=2637, user="root", gpu_mem_mib={0: 8148.0, 1: 4334.0},
                          kind="cuda", cmdline="python3 hold.py", state="S", ppid=554, gpus=[0, 1])],
    )


def every_event() -> list:
    ref = ProcRef(pid=557, start_time=2637, user="root", gpus=[0], mem_mib=8148.0, reason="NVML lists it")
    return [
        sample(1.0, 1),
        PhaseStart(t=2.0, phase="cleanup", title="free the GPUs"),
        CleanupPlan(t=2.1, host="box", service="vllm.service", manager="systemd", gpus=[0, 1],
                    steps=["graceful", "process"], clean_threshold_mib=64),
        StepPreview(t=2.2, step="process", action="SIGTERM then SIGKILL", targets=[ref], spared=[]),
        Consent(t=2.3, step="process", accepted=True, operator="alice", pids=[557]),
        SignalSent(t=2.4, step="process", pid=557, start_time=2637, signal="SIGTERM"),
        SignalOutcome(t=2.6, step="process", pid=557, start_time=2637, signal="SIGTERM", elapsed_s=0.2),
        StepResult(t=2.7, step="process", status="done", elapsed_s=0.4),
        Verification(t=2.8, clean=True, gpus=[GpuVerdict(0, 0.0, 0.0, True)], elapsed_s=0.1),
        PhaseEnd(t=3.0, phase="cleanup"),
        MacroPoint(t=4.0, concurrency=1, metrics={"output_throughput": 48.0}),
        MacroProgress(t=4.0, status="running", levels=[1, 8], level_index=1, concurrency=8, stage="run", done=3,
                      total=32, failed=1, in_flight=8, level_fraction=0.09, elapsed_s=2.5),
        MacroRequests(t=4.0, concurrency=1, level_index=0, origin=3.5, first=0, total=1,
                      requests=[{"start_ms": 0.0, "end_ms": 21.5, "chunk_ms": [5.25, 21.0], "in": 16, "out": 2,
                                 "max_tokens": 2, "error": None}]),
        RequestFieldsDropped(t=4.5, fields=["ignore_eos"], url="http://127.0.0.1:8000/v1/completions",
                             reason="HTTP 422: {\"detail\":\"Unexpected fields in the request: {'ignore_eos'}\"}"),
        MacroVerdict(t=4.1, slo={"ttft": 200.0, "tpot": 50.0}, meets=[1], slo_concurrency=1, knee_concurrency=1,
                     knee_tok_s=48.0, peak_tok_s=48.0),
        ServerSample(t=4.2, engine="vllm", concurrency=8, level_index=1, running=5.0, waiting=2.0, kv_cache=0.25,
                     preemptions=None),
        GemmRow(t=5.0, name="o_proj", m=1, n=7168, k=1024, dtype="bf16", time_us=9.5),
        AllReduceRow(t=6.0, size_bytes=14336, count=7168, ranks=2, time_us=28.0, burst=122),
        Topology(t=6.1, host="box", source="nvml", gpus=[TopoGpu(0, "NVIDIA H200", pcie_gen=5, nvlinks=18)],
                 links=[["X"]], p2p=[["X"]], summary="1 x PCIe Gen5 x16", link_kind="NVLink", link_gbps=450.0),
        MicroPlan(t=6.2, run_id="r1", parts=["gemm"], gemms=[{"name": "o_proj", "n": 7168, "k": 1024}], ms=[1],
                  totals={"gemm": 1}),
        MicroEnv(t=6.3, run_id="r1", part="gemm", torch="2.11", backends={"marlin": "not available"}),
        MicroProgress(t=6.4, run_id="r1", part="gemm", item="o_proj", done=1, total=1),
        MicroEnd(t=6.5, run_id="r1", part="gemm", status="refused", holders=[ref]),
        LogLine(t=7.0, level="warning", source="test", message="hello ✓"),
        CampaignPlan(t=7.1, name="c", file="c.toml", host="box", service="sim:vllm", phases=["macro", "cleanup"],
                     consent={"graceful": "yes"}, settings={"macro": {"concurrency": [1, 8]}}, headless=True),
        CampaignControl(t=7.2, action="skip", phase="micro", operator="alice"),
        CampaignResume(t=7.3, done=["macro"], cut_off=["cleanup"], todo=["cleanup"], notes={"macro": "kept"},
                       dropped_bytes=12),
        DrainProgress(t=7.4, status="waiting", running=3, waiting=1, url="http://x/metrics", elapsed_s=1.5,
                      deadline_s=20.0),
        DecodeBudget(t=7.5, rows=[BudgetRow(m=1, tpot_ms=20.0, tok_s=50.0, allreduce_ms=2.3, int4_gemm_ms=1.7,
                                            bf16_gemm_ms=1.1, rest_ms=14.9, notes=["n"])],
                     bound="rest", plateau_m=1, plateau_tok_s=50.0, verdict="v", assumptions=["a"],
                     stand_ins=["s"], link="PCIe", missing=[]),
        ProbeResult(t=7.6, requests=3, tok_s=49.0, ttft_ms=36.0, baseline_tok_s=50.0, baseline_ttft_ms=35.0,
                    tok_s_change_pct=-2.0, ttft_change_pct=2.9, drift=False),
        SignalLate(t=7.65, step="process", pid=557, start_time=2637, signal="SIGTERM", how="reply", outcome="sent",
                   after_s=16.2, after_end=True),
        HostCommand(t=7.66, step="reset", argv=["nvidia-smi", "-i", "0", "-pm", "0"], purpose="persistence off",
                    ok=False, detail="rc 6"),
        ServedModel(t=7.68, name="org/m", source="the server's org/m: /hf/config.json (pid 7)", family="llama", tp=2,
                    config={"model_type": "llama", "hidden_size": 256}, params_total=143_000_000,
                    params_active=143_000_000, server_names=["org/m"], note="n ✓"),
        FleetSample(t=7.69, source="prometheus", where="http://prom:9090", seq=3, round_ms=41.5, error="",
                    hosts=[FleetHost("gpu-01", gpus=[FleetGpu(0, "NVIDIA H200", mem_used_mib=1024.0, xid=79,
                                                             throttle=["thermal"], link="PCIe Gen4 x16 of Gen5 x16")],
                                     requests_running=3.0, service="vllm"),
                           FleetHost("gpu-02 ✓", state="down", detail="connection refused")]),
        CampaignEnd(t=7.7, status="done", note="ok"),
    ]


def test_every_event_type_round_trips() -> None:
    events = every_event()
    seen = {e.type for e in events}
    assert seen | {"connection"} == set(EVENT_TYPES), "a new event type needs a round-trip case here"
    for ev in events:
        line = encode(ev)
        assert line.startswith(f'{{"t":{json.dumps(ev.t)},"type":"{ev.type}"')
        assert decode(line) == ev


def test_decode_rejects_bad_lines() -> None:
    with pytest.raises(EventDecodeError, match="not JSON"):
        decode('{"t":1,"type":"log"')
    with pytest.raises(EventDecodeError, match="unknown or missing event type"):
        decode('{"t":1,"type":"nope"}')
    with pytest.raises(EventDecodeError, match="not a JSON object"):
        decode("[1,2]")


def test_unknown_keys_are_ignored() -> None:
    ev = decode('{"t":1,"type":"log","message":"m","added_in_v2":true}')
    assert isinstance(ev, LogLine) and ev.message == "m"


def test_writer_appends_and_reader_indexes(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with RunWriter(path, host="box", meta={"k": 1}) as w:
        for ev in every_event():
            w.append(ev)
        # readable while still open: every event is flushed as it is written
        assert len(RunReader(path)) == len(every_event())
    r = RunReader(path)
    assert r.header.version == FORMAT_VERSION and r.header.host == "box" and r.header.meta == {"k": 1}
    assert r.types[0] == "sample" and r.types[-1] == "campaign_end"
    assert list(r.events()) == every_event()
    assert r.index_at(2.25) == 4
    assert r.indices_of("phase_start", "phase_end") == [1, 9]
    assert r.warnings == []


def test_reopen_cuts_a_torn_last_line_and_appends(tmp_path: Path) -> None:
    """A campaign resumed after a kill -9: the event in hand was half written; the writer cuts it off and
    what follows is read whole, no line skipped."""
    events = every_event()
    path = write_run(tmp_path / "run.jsonl", events[:5], host="box", meta={"command": "campaign"})
    whole = path.read_bytes()
    path.write_bytes(whole + encode(events[5]).encode()[:17])  # torn: no newline
    w, dropped = RunWriter.reopen(path)
    assert dropped == 17 and w.header.host == "box" and w.header.meta == {"command": "campaign"}
    with w:
        for ev in events[5:]:
            w.append(ev)
    r = RunReader(path)
    assert r.warnings == [] and list(r.events()) == events


def test_reopen_cuts_a_torn_last_line_of_many_mib_and_only_it(tmp_path: Path) -> None:
    """A torn last line longer than one backward read (a MiB): the events before it are kept."""
    events = every_event()
    path = write_run(tmp_path / "run.jsonl", events[:5])
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"t":9.0,"type":"log","message":"' + b"x" * (3 << 20))
    w, dropped = RunWriter.reopen(path)
    w.close()
    assert dropped == 33 + (3 << 20) and path.read_bytes() == whole


def test_reopen_refuses_what_it_cannot_append_to(tmp_path: Path) -> None:
    with pytest.raises(RunFileError, match="no such run file"):
        RunWriter.reopen(tmp_path / "none.jsonl")
    gz = write_run(tmp_path / "run.jsonl.gz", every_event()[:2], compress=True)
    with pytest.raises(RunFileError, match="compressed run cannot be appended"):
        RunWriter.reopen(gz)
    other = tmp_path / "other.jsonl"
    other.write_text('{"format":"something-else"}\n')
    with pytest.raises(RunFileError, match="not a kimitui run"):
        RunWriter.reopen(other)
    assert other.read_text() == '{"format":"something-else"}\n'


def test_writer_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    RunWriter(path).close()
    with pytest.raises(FileExistsError):
        RunWriter(path)


def test_torn_last_line_is_skipped_with_warning(tmp_path: Path) -> None:
    path = write_run(tmp_path / "run.jsonl", every_event())
    data = path.read_bytes()
    path.write_bytes(data[:-20])  # cut inside the last event, as a crash mid-write would
    r = RunReader(path)
    assert len(r) == len(every_event()) - 1
    assert len(r.warnings) == 1 and "last line is torn" in r.warnings[0]


def test_malformed_middle_line_is_skipped_and_rest_kept(tmp_path: Path) -> None:
    path = write_run(tmp_path / "run.jsonl", every_event())
    lines = path.read_text().splitlines()
    lines.insert(3, "garbage {")
    path.write_text("\n".join(lines) + "\n")
    r = RunReader(path)
    assert len(r) == len(every_event())
    assert len(r.warnings) == 1 and "line 4 skipped" in r.warnings[0]


def test_unknown_version_is_one_clear_line(tmp_path: Path) -> None:
    path = tmp_path / "future.jsonl"
    path.write_text('{"format":"kimitui-run","version":99,"created":0}\n')
    with pytest.raises(RunFileError) as info:
        RunReader(path)
    message = str(info.value)
    assert "version 99" in message and "\n" not in message


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "empty file"),
        (b"\n\n", "empty file"),
        (b'{"format":"other","version":1}\n', "not a kimitui run"),
        (b"hello\n", "not a kimitui run header"),
    ],
)
def test_not_a_run(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(content)
    with pytest.raises(RunFileError, match=expected):
        RunReader(path)


def test_missing_file_is_a_run_file_error(tmp_path: Path) -> None:
    with pytest.raises(RunFileError, match="no such run file"):
        RunReader(tmp_path / "absent.jsonl")


def test_header_only_run_is_empty_not_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty-run.jsonl"
    RunWriter(path, host="box").close()
    r = RunReader(path)
    assert len(r) == 0 and r.warnings == []


def test_compressed_run(tmp_path: Path) -> None:
    path = write_run(tmp_path / "run.jsonl.gz", every_event(), compress=True)
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    r = RunReader(path)
    assert list(r.events()) == every_event()


def test_truncated_compressed_run_keeps_what_decompresses(tmp_path: Path) -> None:
    events = [sample(float(i), i) for i in range(200)]
    path = write_run(tmp_path / "run.jsonl.gz", events, compress=True)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    r = RunReader(path)
    assert 0 < len(r) < 200
    assert r.event(len(r) - 1).seq == len(r) - 1  # the events kept are intact and in order
    assert any("compressed stream is truncated" in w for w in r.warnings)
    assert any("last line is torn" in w for w in r.warnings)


def test_writer_output_is_prefix_indexable(tmp_path: Path) -> None:
    """The fast index relies on "t" and "type" leading every line; a hand-written line still reads."""
    path = write_run(tmp_path / "run.jsonl", every_event()[:2])
    with open(path, "a") as fh:
        fh.write('{"type":"log","message":"hand edited","t":9.5}\n')
    r = RunReader(path)
    assert r.types[-1] == "log" and r.times[-1] == 9.5


def test_events_out_of_time_order_replay_in_file_order(tmp_path: Path) -> None:
    events = [LogLine(t=1.0, message="a"), LogLine(t=3.0, message="b"), LogLine(t=2.5, message="late sample"),
              LogLine(t=4.0, message="d"), LogLine(t=2.0, message="skewed"), LogLine(t=5.0, message="e")]
    r = RunReader(write_run(tmp_path / "run.jsonl", events))
    assert list(r.times) == [1.0, 3.0, 3.0, 4.0, 4.0, 5.0]
    assert r.index_at(3.0) == 3 and r.event(2).t == 2.5  # the event itself keeps its stamp
    # half a second late is delivery; two seconds is a clock problem worth a warning
    assert len(r.warnings) == 1 and "1 events were stamped more than 1 s earlier" in r.warnings[0]


LONG_LINE = 256 << 20
"""A line four times the reader's cap (64 MiB, docs/run-format.md), well short of a real 2 GB one (see
benchmarks/long_line.py) to spare the disk."""


def _run_with_a_long_line(path: Path, compress: bool) -> Path:
    """Three events, a log line of ``LONG_LINE`` bytes (line 5: the header is line 1), two events after it;
    written a MiB at a time."""
    header = write_run(tmp := path.with_suffix(".tmp"), [sample(1.0, 1), sample(2.0, 2), sample(3.0, 3)])
    head = header.read_bytes()
    tmp.unlink()
    start = b'{"t":4.0,"type":"log","level":"info","source":"x","message":"'
    end = b'"}\n'
    after = (encode(sample(5.0, 5)) + "\n" + encode(sample(6.0, 6)) + "\n").encode()
    with gzip.open(path, "wb", compresslevel=1) if compress else open(path, "wb") as fh:
        fh.write(head + start)
        piece = b"x" * (1 << 20)
        for _ in range((LONG_LINE - len(start) - len(end)) >> 20):
            fh.write(piece)
        fh.write(b"x" * ((LONG_LINE - len(start) - len(end)) % (1 << 20)) + end + after)
    return path


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_a_line_over_the_cap_is_skipped_by_its_number_in_memory_near_the_cap(tmp_path: Path,
                                                                              compress: bool) -> None:
    path = _run_with_a_long_line(tmp_path / ("run.jsonl.gz" if compress else "run.jsonl"), compress)
    tracemalloc.start()
    try:
        reader = RunReader(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert reader.warnings == [f"{path.name}: line 5 skipped: {LONG_LINE - 1:,} bytes, over the 64 MiB a "
                               "line may hold"]
    assert [e.seq for e in reader.events()] == [1, 2, 3, 5, 6]
    assert [reader.line_of(i) for i in range(len(reader))] == [2, 3, 4, 6, 7]
    # the cap, a chunk or two, a bytearray's spare eighth: near the cap (64 MiB), far below the line (256)
    assert peak < 96 << 20, f"peak {peak:,} bytes for a line of {LONG_LINE:,}"


def test_every_line_over_the_cap_and_only_those_are_left_out_whatever_the_chunks() -> None:
    """The collector at a cap of 100 bytes, fed lines of lengths around it in chunks of random sizes (one
    byte to several lines), against the lines themselves: a line of 100 bytes is kept, of 101 left out."""
    from kimitui.core.runfile import _Collector

    rng = random.Random(7)
    for _ in range(300):
        lines = [bytes([97 + k % 26]) * rng.choice([0, 1, 50, 99, 100, 101, 102, 250, 1000])
                 for k in range(rng.randint(1, 12))]
        data = b"".join(line + b"\n" for line in lines)
        if rng.random() < 0.3:  # a last line without its newline
            data = data[:-1]
        collector = _Collector(100)
        pos = 0
        while pos < len(data):
            n = rng.choice([1, 2, 7, 64, 99, 100, 101, 300, 2000])
            collector.add(data[pos:pos + n])
            pos += n
        kept = bytes(collector.end())
        expected = [b"" if len(line) > 100 else line for line in data.split(b"\n")]
        assert kept.split(b"\n") == expected
        assert collector.skipped == [(k + 1, len(line)) for k, line in enumerate(data.split(b"\n"))
                                     if len(line) > 100]


def test_a_header_over_the_cap_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with open(path, "wb") as fh:
        fh.write(b'{"format":"kimitui-run","version":1,"meta":{"x":"')
        for _ in range(65):
            fh.write(b"x" * (1 << 20))
        fh.write(b'"}}\n')
    for opener in (RunReader, RunWriter.reopen):
        with pytest.raises(RunFileError, match=r"run.jsonl: first line is over 64 MiB, not a kimitui run header$"):
            opener(path)
