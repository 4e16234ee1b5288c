"""The local agent started ahead of its host (the dashboard's start: its python, the host program and NVML
start beside the caller's imports): the first LocalHost on the same python takes it, over the same link
protocol; a dead one or one on another python is not taken, and nobody's agent is left behind."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from kimitui.hosts import prestart as local
from kimitui.hosts.local import LocalHost
from kimitui.hosts.prestart import prestart_agent
from tests.sshd import alive
from tests.waiting import DEADLINE_S, until


@pytest.fixture(autouse=True)
def nothing_prestarted() -> Iterator[None]:
    local._prestarted = None
    yield
    pre, local._prestarted = local._prestarted, None
    if pre is not None and pre.proc.poll() is None:
        pre.proc.kill()
        pre.proc.wait()


async def test_the_first_local_host_takes_the_prestarted_agent_and_its_requests_work() -> None:
    prestart_agent()
    pre = local._prestarted
    assert pre is not None
    host = LocalHost(name="local")
    try:
        hello = await host.link.connect()
        assert hello.pid == pre.proc.pid and local._prestarted is None
        assert (await host.link.request("ping", {}, timeout=DEADLINE_S))["agent_pid"] == pre.proc.pid
        assert (await host.link.request("scan", {}, timeout=DEADLINE_S)) is not None
    finally:
        await host.close()
    await until(lambda: pre.proc.poll() is not None, "the adopted agent's exit once its host closed")


async def test_a_prestarted_agent_that_died_is_not_taken() -> None:
    prestart_agent()
    pre = local._prestarted
    assert pre is not None
    pre.proc.kill()
    pre.proc.wait()
    host = LocalHost(name="local")
    try:
        hello = await host.link.connect()
        assert hello.pid != pre.proc.pid and alive(hello.pid)
    finally:
        await host.close()


async def test_one_started_on_another_python_is_not_taken_and_ends() -> None:
    prestart_agent(sys.executable)
    pre = local._prestarted
    assert pre is not None
    host = LocalHost(name="local", python="/usr/bin/python3")
    try:
        hello = await host.link.connect()
        assert hello.pid != pre.proc.pid
    finally:
        await host.close()
    await until(lambda: pre.proc.poll() is not None, "the prestarted agent's exit (its input closed)")


def test_only_the_local_dashboard_starts_an_agent_ahead() -> None:
    from kimitui.commands.main import _is_the_local_dashboard

    assert _is_the_local_dashboard([]) and _is_the_local_dashboard(["--interval", "0.25"])
    assert not any(_is_the_local_dashboard(argv) for argv in (
        ["demo"], ["replay", "run.jsonl"], ["watch", "--host", "local"], ["--help"], ["--version"], ["record"]))
