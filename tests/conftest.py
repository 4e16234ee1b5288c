"""Shared test helpers and the fixtures more than one test module uses: ``sim`` (a simulated driver's folder,
the GPUs a module's ``SIM_GPUS`` names, 2 by default) and ``rig`` (the cleanup's rig on it:
tests/cleanup_rig.py). Fixtures for one area only live in that area's test module or a helper module.

The suite runs in parallel (pytest-xdist, ``./run-tests`` picks the workers): each worker gets its own
XDG data and config folders here, so no test writes into the real home or meets another worker's runs and
audit log. Every test module is one of three kinds, marked here by its name (``KINDS``), so that
``./run-tests -m unit`` is a quick loop: ``unit`` (in-process, no child process, no server), ``integration``
(real child processes, servers, an agent, a simulated host or the app under Textual's Pilot) and ``e2e`` (the
kimitui command itself as a user runs it: a subprocess, a real terminal, a browser, the wheel, a real
third-party server). Modules known to be slow are handed out first (``SLOW_FIRST``), so the last worker
to finish is not the one that drew them last."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "h200x2"
"""Real captures of a 2 x H200 host (see tests/fixtures/README.md)."""

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.kinds import SLOW_FIRST, kind_of  # noqa: E402 (after the clone's root is on sys.path)

if TYPE_CHECKING:
    from tests.cleanup_rig import Rig
    from tests.cleanup_support import SimDir


@pytest.fixture
async def sim(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SimDir]:
    from tests.cleanup_support import make_sim

    s = make_sim(tmp_path / "sim", gpus=getattr(request.module, "SIM_GPUS", 2))
    yield s
    s.teardown()


@pytest.fixture
async def rig(sim: SimDir, tmp_path: Path) -> AsyncIterator[Rig]:
    from kimitui.hosts.local import LocalHost
    from tests.cleanup_rig import Rig

    r = Rig(sim, LocalHost(), tmp_path)
    await r.start()
    yield r
    await r.close()


def pytest_configure(config: pytest.Config) -> None:
    for kind, text in (("unit", "in-process, no child process or server: the quick loop"),
                       ("integration", "real child processes, servers, an agent, a simulated host or Pilot"),
                       ("e2e", "the kimitui command as a user runs it, or a real third-party server")):
        config.addinivalue_line("markers", f"{kind}: {text}")
    # A pytest-xdist worker has COLUMNS=80 and LINES=24 in its environment, and a child on a pty reads them
    # before the pty's own size (shutil.get_terminal_size, as Textual does): the app on a 120x40 test terminal
    # drew at 80x24, its header without the brand, and missed a key. A terminal's size is the pty's.
    for var in ("COLUMNS", "LINES"):
        os.environ.pop(var, None)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    home = tempfile.mkdtemp(prefix=f"kimitui-tests-{worker}-")
    config.add_cleanup(lambda: shutil.rmtree(home, ignore_errors=True))
    for var, sub in (("XDG_DATA_HOME", "data"), ("XDG_CONFIG_HOME", "config")):
        os.environ[var] = os.path.join(home, sub)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(kind_of(item.module.__name__.rpartition(".")[2] if item.module else ""))
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    # sorted() is stable: within a module (and among the rest) the collection order stays
    items[:] = sorted(items, key=lambda it: rank.get(it.module.__name__.rpartition(".")[2] if it.module else "",
                                                     len(rank)))


@pytest.fixture(autouse=True)
def _unit_starts_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``unit`` test runs in-process: starting a child process fails it, naming where to move its module."""
    if request.node.get_closest_marker("unit") is None:
        return
    import subprocess

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"{request.node.nodeid}: a unit test starts no child process; list its module "
                             "under another kind in tests/conftest.py KINDS")

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    monkeypatch.setattr(os, "fork", refuse)
