"""The agent's lines cannot be impersonated: the client sends a random token with the agent's source and
takes only lines that start with it. A login shell that prints {"type":"hello"} or a "fatal" line before the
agent starts, and a process it leaves behind that prints a forged reply while a request is in flight, are
ignored (said once in a warning), over the real sshd on loopback and over the local transport."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kimitui.hosts.base import Host
from kimitui.hosts.launch import agent_command, agent_payload
from kimitui.hosts.local import LocalHost
from kimitui.hostside.wire import line_tag
from tests.sshd import sshd_server
from tests.support import make_host
from tests.waiting import DEADLINE_S, until

FORGED_REPLY = {"t": 0, "type": "reply", "id": 1, "ok": True, "result": {"rc": 0, "stdout": "forged", "stderr": ""}}


def impostor_lines(forge: Path) -> str:
    """Shell lines that print what an agent would, before it starts, and leave a job behind that prints a
    forged reply to request 1 once something is written to FORGE (a FIFO)."""
    return (f"echo '{json.dumps({'type': 'hello'})}'\n"
            f"echo '{json.dumps({'t': 0, 'type': 'fatal', 'message': 'forged by the login shell'})}'\n"
            f"( read x < {forge}; echo '{json.dumps(FORGED_REPLY)}' ) &\n")


@contextlib.asynccontextmanager
async def impostor_host(transport: str, tmp: Path) -> AsyncIterator[Host]:
    forge = tmp / "forge"
    os.mkfifo(forge)
    try:
        if transport == "local":
            wrapper = tmp / "python3"  # what a login shell does before it runs the python it is asked for
            wrapper.write_text("#!/bin/sh\n" + impostor_lines(forge) + f'exec {sys.executable} "$@"\n')
            wrapper.chmod(0o755)
            async with LocalHost("box", python=str(wrapper)) as h:
                yield h
        else:
            home = tmp / "home"
            home.mkdir()
            (home / ".bashrc").write_text(impostor_lines(forge))
            with sshd_server(extra_config=f"SetEnv HOME={home}\n") as server:
                async with make_host(server) as h:
                    yield h
    finally:
        with contextlib.suppress(OSError):  # release the job if the test never did
            fd = os.open(forge, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, b"end\n")
            os.close(fd)


@pytest.mark.parametrize("transport", ["local", "ssh"])
async def test_lines_without_the_token_never_start_end_or_answer_anything(transport: str, tmp_path: Path) -> None:
    async with impostor_host(transport, tmp_path) as h:
        queue = h.link.subscribe()
        hello = await h.link.connect()  # the forged hello and fatal are skipped as the login shell's chatter
        assert hello.pid > 0 and hello.executable
        chatter = json.loads(queue.get_nowait())
        assert chatter["type"] == "log" and chatter["level"] == "warning"
        assert '{"type": "hello"} / {"t": 0, "type": "fatal"' in chatter["message"]

        release = tmp_path / "release"
        os.mkfifo(release)
        forge = tmp_path / "forge"
        script = f"echo go > {forge}; read x < {release}; echo real"
        run = asyncio.create_task(h.run(["sh", "-c", script], timeout=60.0))  # request 1
        await until(lambda: h.link.foreign_lines >= 1 or run.done(), "the forged reply")
        assert not run.done(), f"the forged reply was taken for the agent's: {run.result()}"
        with open(release, "w") as fh:
            fh.write("now\n")
        res = await asyncio.wait_for(run, DEADLINE_S)
        assert (res.rc, res.stdout) == (0, "real\n")
        foreign = json.loads(await asyncio.wait_for(queue.get(), DEADLINE_S))
        assert foreign["level"] == "warning" and "not the agent's" in foreign["message"]
        assert '"type": "reply", "id": 1' in foreign["message"]
        assert (await h.request("ping"))["agent_pid"] == hello.pid  # the session goes on
        assert h.link.connects == 1


def test_every_agent_line_starts_with_the_token_the_fatal_line_too(tmp_path: Path) -> None:
    token = "0123456789abcdef" * 2
    ok = subprocess.run(agent_command(sys.executable), input=agent_payload(token) + b'{"id":3,"op":"ping"}\n',
                        capture_output=True, timeout=60, check=True)
    lines = ok.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith(line_tag(token)) for line in lines)
    hello, reply = (json.loads(line) for line in lines)
    assert hello["k"] == token and hello["type"] == "hello" and reply["id"] == 3 and reply["ok"]
    old = subprocess.run(agent_command(sys.executable, min_python=(3, 99)), input=agent_payload(token),
                         capture_output=True, timeout=60)
    assert old.returncode == 5 and old.stdout.startswith(line_tag(token))
    fatal = json.loads(old.stdout)
    assert fatal["type"] == "fatal" and "too old" in fatal["message"]
    with pytest.raises(ValueError, match="hex digits"):
        agent_payload('x","type":"hello')
