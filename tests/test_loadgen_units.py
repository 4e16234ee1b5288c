"""The SSE splitter and the statistics, without a server."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from kimitui.bench.macro.config import SLO
from kimitui.bench.macro.metrics import LevelContext, percentile, series_stats, summarize
from kimitui.bench.macro.records import RequestRecord
from kimitui.bench.macro.sse import SSEDecoder, SSEOverflow


def _feed_all(blocks: list[bytes]) -> list[bytes]:
    dec = SSEDecoder()
    out: list[bytes] = []
    for b in blocks:
        out += dec.feed(b)
    return out + dec.flush()


STREAM = (b': comment\r\n'
          b'data: {"a": 1}\r\n\r\n'
          b'event: x\nid: 3\ndata: {"b":\ndata: 2}\n\n'
          b'data:{"c": 3}\n\n'
          b'retry: 10\n\n'
          b'data: [DONE]\n\n')
EXPECTED = [b'{"a": 1}', b'{"b":\n2}', b'{"c": 3}', b"[DONE]"]


def test_sse_crlf_comments_multiline_done() -> None:
    assert _feed_all([STREAM]) == EXPECTED


@pytest.mark.parametrize("seed", range(5))
def test_sse_any_block_boundaries(seed: int) -> None:
    rng = random.Random(seed)
    blocks, i = [], 0
    while i < len(STREAM):
        n = rng.randint(1, 9)
        blocks.append(STREAM[i:i + n])
        i += n
    assert _feed_all(blocks) == EXPECTED


def test_sse_flush_keeps_an_unterminated_last_event() -> None:
    dec = SSEDecoder()
    assert dec.feed(b'data: {"x": 1}\n\ndata: [DONE]') == [b'{"x": 1}']
    assert dec.pending
    assert dec.flush() == [b"[DONE]"]
    assert not dec.pending


def test_sse_a_line_at_the_cap_passes_and_one_byte_more_fails_when_that_byte_arrives() -> None:
    line = b"data: " + b"x" * 58  # 64 bytes
    dec = SSEDecoder(max_line=64)
    assert dec.feed(line[:10]) == [] and dec.feed(line[10:]) == []
    assert dec.feed(b"\n\n") == [b"x" * 58]
    dec = SSEDecoder(max_line=64)
    for i in range(0, 64, 7):  # trickled in, the cap is reached but not passed
        assert dec.feed(line[i:i + 7]) == []
    with pytest.raises(SSEOverflow, match=r"^SSE line over 64 bytes$"):
        dec.feed(b"y")
    with pytest.raises(SSEOverflow, match=r"^SSE line over 64 bytes$"):  # whole in one block, ended
        SSEDecoder(max_line=64).feed(line + b"yy\n\n")


def test_sse_an_event_of_many_short_data_lines_is_capped_as_a_whole() -> None:
    dec = SSEDecoder(max_line=64)
    assert dec.feed(b"data: 0123456789\n" * 5) == []  # 5 x 10 bytes joined by 4 newlines: 54
    with pytest.raises(SSEOverflow, match=r"^SSE event over 64 bytes$"):
        dec.feed(b"data: 0123456789\n")
    dec = SSEDecoder(max_line=64)
    assert dec.feed(b"data: 0123456789\n" * 5 + b"\n") == [b"\n".join([b"0123456789"] * 5)]
    assert dec.feed(b"data: 0123456789\n" * 5 + b"\n") == [b"\n".join([b"0123456789"] * 5)]  # count restarts


def test_percentile_and_std_match_numpy_definitions() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 90) == pytest.approx(3.7)
    assert percentile(values, 99) == pytest.approx(3.97)
    assert percentile([5.0], 99) == 5.0
    s = series_stats("ttft", [1.0, 2.0, 3.0, 4.0])
    assert s["mean_ttft_ms"] == pytest.approx(2.5)
    assert s["median_ttft_ms"] == pytest.approx(2.5)
    assert s["std_ttft_ms"] == pytest.approx(math.sqrt(1.25))  # population std, as numpy.std
    assert s["p90_ttft_ms"] == pytest.approx(3.7)
    empty = series_stats("itl", [])
    assert empty["mean_itl_ms"] == 0.0 and empty["p99_itl_ms"] == 0.0


def _ok(start: float, ttft: float, e2el: float, n: int, gaps: list[float], prompt: int = 10) -> RequestRecord:
    """A successful request (times in ms): chunks at ttft, then after each gap (summing to e2el)."""
    chunks = [ttft]
    for g in gaps:
        chunks.append(chunks[-1] + g)
    assert chunks[-1] == pytest.approx(e2el)
    return RequestRecord(start_ms=start, end_ms=e2el + 1, chunk_ms=chunks, input_tokens=prompt,
                         output_tokens=n, target_input=prompt, max_tokens=n)


def _failed(start: float, end: float, error: str) -> RequestRecord:
    return RequestRecord(start_ms=start, end_ms=end, error=error, input_tokens=10, max_tokens=5)


def test_summary_formulas() -> None:
    recs = [
        _ok(0.0, 100, 500, 5, [100, 100, 100, 100]),        # TPOT 100
        _ok(200, 200, 200, 1, []),                          # one token: no TPOT (0 for goodput)
        _ok(300, 50, 1050, 11, [500, 500]),                 # 2 chunks of several tokens: TPOT 100
        _failed(400, 200, "HTTP 500: boom"),
        _failed(500, 200, "HTTP 500: boom"),
        _failed(500, 200, "stream closed early (before [DONE])"),
    ]
    # the last byte (1.999 s after the origin): the level's duration is 2.0 s
    recs[2] = dataclasses.replace(recs[2], end_ms=1700)
    ctx = LevelContext(concurrency=4, slo=SLO(ttft_ms=150, tpot_ms=100), concurrency_reached=3,
                       percentiles=(50.0, 99.9))
    m = summarize(recs, ctx)
    assert m["duration"] == pytest.approx(2.0)
    assert m["completed"] == 3 and m["failed"] == 3 and m["num_prompts"] == 6
    assert m["failures"] == {"HTTP 500: boom": 2, "stream closed early (before [DONE])": 1}
    assert m["total_output_tokens"] == 17 and m["total_input_tokens"] == 30
    assert m["output_throughput"] == pytest.approx(8.5)
    assert m["request_throughput"] == pytest.approx(1.5)
    assert m["total_token_throughput"] == pytest.approx(23.5)
    assert m["mean_tpot_ms"] == pytest.approx(100.0)  # only n > 1
    assert m["mean_ttft_ms"] == pytest.approx((100 + 200 + 50) / 3)
    assert m["mean_e2el_ms"] == pytest.approx((500 + 200 + 1050) / 3)
    assert m["mean_itl_ms"] == pytest.approx((400 + 1000) / 6)  # pooled per chunk gap
    # the percentiles asked for, in vLLM's key spelling, and no others
    assert m["p50_ttft_ms"] == m["median_ttft_ms"] == 100 and "p99.9_itl_ms" in m and "p99_itl_ms" not in m
    assert m["percentiles"] == [50.0, 99.9]
    # goodput: request 1 (ttft 100 <= 150, tpot 100 <= 100) and 3 (50, 100) pass; request 2's ttft fails
    assert m["request_goodput"] == pytest.approx(1.0)
    assert m["max_concurrency"] == 4 and m["request_rate"] == "inf" and m["concurrency_reached"] == 3
    assert m["max_concurrent_requests"] == 3  # [0,500) [200,400) [300,1350) overlap at 300
    assert m["mean_input_tokens"] == 10 and m["std_input_tokens"] == 0 and m["requested_input_len"] == 10
    assert m["input_tokens_source"] == "usage"
    assert m["mean_output_tokens"] == pytest.approx(17 / 3)
    no_slo = summarize(recs, LevelContext(concurrency=4, request_rate=5.0, concurrency_reached=3))
    assert no_slo["request_goodput"] is None and no_slo["request_rate"] == 5.0
    # the summary holds what it was computed with: the same records recompute it exactly
    assert summarize(recs, LevelContext.from_metrics(m)) == m
    assert summarize(recs, LevelContext.from_metrics(no_slo)) == no_slo


def test_records_round_trip_through_json() -> None:
    r = RequestRecord(start_ms=1.5, end_ms=20.25, chunk_ms=[3.0, 4.5], input_tokens=7, output_tokens=2,
                      input_from_usage=False, target_input=8, max_tokens=2, sched_ms=1.0, late_ms=0.5)
    assert RequestRecord.from_json(r.to_json()) == r
    failed = RequestRecord(start_ms=0.0, end_ms=5.0, error="HTTP 500: x", max_tokens=3)
    assert RequestRecord.from_json(failed.to_json()) == failed
    assert set(failed.to_json()) == {"start_ms", "end_ms", "chunk_ms", "in", "out", "max_tokens", "error"}
