"""The SSE splitter and the statistics, without a server."""

from __future__ import annotations

import math
import random

import pytest

from kimitui.bench.macro.config import SLO
from kimitui.bench.macro.metrics import level_metrics, percentile, series_stats
from kimitui.bench.macro.request import RequestOutcome
from kimitui.bench.macro.sse import SSEDecoder


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


def test_percentile_and_std_match_numpy_definitions() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 90) == pytest.approx(3.7)
    assert percentile(values, 99) == pytest.approx(3.97)
    assert percentile([5.0], 99) == 5.0
    s = series_stats("ttft", [0.001, 0.002, 0.003, 0.004])
    assert s["mean_ttft_ms"] == pytest.approx(2.5)
    assert s["median_ttft_ms"] == pytest.approx(2.5)
    assert s["std_ttft_ms"] == pytest.approx(math.sqrt(1.25))  # population std, as numpy.std
    assert s["p90_ttft_ms"] == pytest.approx(3.7)
    empty = series_stats("itl", [])
    assert empty["mean_itl_ms"] == 0.0 and empty["p99_itl_ms"] == 0.0


def _ok(t0: float, ttft: float, e2el: float, n: int, itl: list[float], prompt: int = 10) -> RequestOutcome:
    return RequestOutcome(t0=t0, end=t0 + e2el, success=True, ttft=ttft, latency=e2el, itl=itl,
                          output_tokens=n, prompt_tokens=prompt)


def test_level_metrics_formulas() -> None:
    outs = [
        _ok(0.0, 0.1, 0.5, 5, [0.1, 0.1, 0.1, 0.1]),       # TPOT 0.1
        _ok(0.2, 0.2, 0.2, 1, []),                         # one token: no TPOT (0 for goodput)
        _ok(0.3, 0.05, 1.05, 11, [0.5, 0.5]),              # 2 chunks of several tokens: TPOT 0.1
        RequestOutcome(t0=0.4, end=0.6, error="HTTP 500: boom"),
        RequestOutcome(t0=0.5, end=0.7, error="HTTP 500: boom"),
        RequestOutcome(t0=0.5, end=0.7, error="stream closed early (before [DONE])"),
    ]
    m = level_metrics(outs, duration_s=2.0, max_concurrency=4, request_rate=None,
                      slo=SLO(ttft_ms=150, tpot_ms=100), concurrency_reached=3)
    assert m["completed"] == 3 and m["failed"] == 3 and m["num_prompts"] == 6
    assert m["failures"] == {"HTTP 500: boom": 2, "stream closed early (before [DONE])": 1}
    assert m["total_output_tokens"] == 17 and m["total_input_tokens"] == 30
    assert m["output_throughput"] == pytest.approx(8.5)
    assert m["request_throughput"] == pytest.approx(1.5)
    assert m["total_token_throughput"] == pytest.approx(23.5)
    assert m["mean_tpot_ms"] == pytest.approx(100.0)  # only n > 1
    assert m["mean_ttft_ms"] == pytest.approx((100 + 200 + 50) / 3)
    assert m["mean_e2el_ms"] == pytest.approx((500 + 200 + 1050) / 3)
    assert m["mean_itl_ms"] == pytest.approx((0.4 + 1.0) / 6 * 1000)  # pooled per chunk gap
    # goodput: request 1 (ttft 100 <= 150, tpot 100 <= 100) and 3 (50, 100) pass; request 2's ttft fails
    assert m["request_goodput"] == pytest.approx(1.0)
    assert m["max_concurrency"] == 4 and m["request_rate"] == "inf" and m["concurrency_reached"] == 3
    assert m["max_concurrent_requests"] == 3  # [0,.5) [.2,.4) [.3,1.35) overlap at .3
    no_slo = level_metrics(outs, duration_s=2.0, max_concurrency=4, request_rate=5.0, slo=SLO(),
                           concurrency_reached=3)
    assert no_slo["request_goodput"] is None and no_slo["request_rate"] == 5.0
