"""Shared test helpers. Fixtures for one area live in that area's test module or a helper module."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "h200x2"
"""Real captures of a 2 x H200 host (see tests/fixtures/README.md)."""

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
