"""Errors in words (kimitui/core/error_words.py) and the counts and kinds said right."""

from __future__ import annotations

import asyncio
import json
import socket

import httpx
import pytest

from kimitui.campaign.config import CampaignConfigError, parse_config
from kimitui.core.error_words import exc_words, json_words, os_words
from kimitui.core.events import EventDecodeError, decode


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: a connect is refused


def test_a_refused_connection_reads_as_words() -> None:
    async def get() -> BaseException:
        try:
            async with httpx.AsyncClient() as client:
                await client.get(f"http://127.0.0.1:{closed_port()}/")
        except httpx.HTTPError as exc:
            return exc
        raise AssertionError("the connect was not refused")

    assert exc_words(asyncio.run(get())) == "connection refused"
    assert os_words("[Errno 111] Connect call failed ('127.0.0.1', 8000)") == "connection refused"
    assert "Errno" not in exc_words(ConnectionRefusedError(111, "Connection refused"))


def test_a_json_error_says_at_once() -> None:
    with pytest.raises(json.JSONDecodeError) as caught:
        json.loads('{"a": "b')
    assert json_words(caught.value) == "Unterminated string starting at column 7"
    with pytest.raises(EventDecodeError) as bad:
        decode('{"t": 1, "type": "log", "x": "y')
    assert "at at" not in str(bad.value) and "starting at column" in str(bad.value)


def test_a_list_of_whole_numbers_is_said_in_the_plural() -> None:
    with pytest.raises(CampaignConfigError) as caught:
        parse_config({"macro": {"concurrency": "8"}}, "c.toml")
    assert "a list of whole numbers" in str(caught.value), str(caught.value)


def test_one_level_done_is_said_in_the_singular() -> None:
    from kimitui.core.events import MacroPoint, MacroProgress
    from kimitui.core.state import SessionState, fold
    from kimitui.tui.views.macro_progress import sweep_status

    state = SessionState()
    for ev in (MacroProgress(t=1.0, status="running", levels=[1]),
               MacroPoint(t=2.0, concurrency=1, metrics={"completed": 4, "output_throughput": 50.0}),
               MacroProgress(t=3.0, status="done", levels=[1], elapsed_s=2.0)):
        fold(state, ev)
    shown = sweep_status(state.sweep, live=False).plain
    assert shown.startswith("done: 1 level in "), shown


def test_a_tls_error_is_said_in_its_own_words_not_by_its_errno() -> None:
    """ssl.SSLError is an OSError whose errno is OpenSSL's (a certificate that fails has errno 1): read as a
    system errno it said "operation not permitted" (the https test of the load generator caught it)."""
    import ssl

    error = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    wrapped = ConnectionError("All connection attempts failed")
    wrapped.__cause__ = error
    assert "CERTIFICATE_VERIFY_FAILED" in exc_words(wrapped)
    assert "not permitted" not in exc_words(error)


def test_a_name_that_does_not_resolve_reads_as_words() -> None:
    """The resolver's errno (-2) is not the system's: not "error -2"."""
    async def get() -> BaseException:
        try:
            async with httpx.AsyncClient() as client:
                await client.get("http://gpu-node-01.invalid:8000/")
        except httpx.HTTPError as exc:
            return exc
        raise AssertionError("the name resolved")

    words = exc_words(asyncio.run(get()))
    assert words.startswith("the name does not resolve (") and "-2" not in words, words
