"""Live commands (demo, connect, watch, the default): filled in with the live telemetry work."""

from __future__ import annotations

import argparse
from collections.abc import Callable

HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {}
