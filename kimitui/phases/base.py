"""What every phase shares: the publish callback's type and the clock of the events it publishes."""

from __future__ import annotations

import time
from collections.abc import Callable

from kimitui.core.events import Event

Publish = Callable[[Event], None]


def now() -> float:
    return time.time()
