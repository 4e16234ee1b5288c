"""Shared test helpers. Fixtures for one area live in that area's test module or a helper module."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
FIXTURES = SHARED / "fixtures" / "h200x2"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
