"""Shared test helpers and the fixtures more than one test module uses: ``sim`` (a simulated driver's folder,
the GPUs a module's ``SIM_GPUS`` names, 2 by default) and ``rig`` (the cleanup's rig on it:
tests/cleanup_rig.py). Fixtures for one area only live in that area's test module or a helper module."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "h200x2"
"""Real captures of a 2 x H200 host (see tests/fixtures/README.md)."""

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

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
