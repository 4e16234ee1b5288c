"""Prefix cache hygiene: a level measured on a warm prefix cache reports a TTFT the cold server would not
give (vLLM's own issues report one 49x lower on a cell that reused the previous cell's prompts).

Each level's hit rate comes from the server's counters (``server_scrape``: ``prefix_cache_hit_rate``, the
share of the level's prompt tokens found cached); above 10 % a warning says so
(``kimitui.core.server_metrics.prefix_cache_warning``, which the report shares).
``--reset-prefix-cache`` (``MacroConfig.reset_prefix_cache``) asks the server to drop its cache before each
level: vLLM's ``POST /reset_prefix_cache``, served only when it runs with ``VLLM_SERVER_DEV_MODE=1`` (200,
empty body; without dev mode the route does not exist: 404). A server that does not offer it (404, 405) is
said once and the sweep goes on without resetting.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

import httpx

from kimitui.bench.macro.transport import ssl_context
from kimitui.core.error_words import exc_words
from kimitui.core.events import Event, LogLine

SOURCE = "macro"
PATH = "/reset_prefix_cache"
NOT_OFFERED = (404, 405)


class PrefixCacheReset:
    """Asks the server to drop its prefix cache (``reset``, before each level); after a 404 or 405 it stops
    asking. ``resets``: how many it accepted."""

    def __init__(self, base_url: str, publish: Callable[[Event], None], headers: dict[str, str] | None = None,
                 timeout_s: float = 10.0) -> None:
        self.url = base_url.rstrip("/") + PATH
        self.publish = publish
        self.headers = headers or {}
        self.timeout_s = timeout_s
        self.offered = True
        self.resets = 0
        self._failed_said = False

    async def reset(self) -> bool:
        """POST the reset; True when the server accepted it (2xx)."""
        if not self.offered:
            return False
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s, headers=self.headers, verify=ssl_context()) as client:
                resp = await client.post(self.url)
        except httpx.HTTPError as exc:
            self._failed(f"POST {self.url}: {type(exc).__name__}: {exc_words(exc)}")
            return False
        if resp.status_code in NOT_OFFERED:
            self.offered = False
            self._say("warning", f"the server does not offer POST {PATH} (HTTP {resp.status_code}; vLLM serves it "
                                 "with VLLM_SERVER_DEV_MODE=1): the levels run without dropping its prefix cache")
            return False
        if not 200 <= resp.status_code < 300:
            self._failed(f"POST {self.url}: HTTP {resp.status_code}")
            return False
        if self.resets == 0:
            self._say("info", f"prefix cache: POST {PATH} before each level")
        self.resets += 1
        return True

    def _failed(self, why: str) -> None:
        if not self._failed_said:
            self._failed_said = True
            self._say("warning", f"prefix cache not reset ({why}); trying again before each level")

    def _say(self, level: Literal["info", "warning"], message: str) -> None:
        self.publish(LogLine(t=time.time(), level=level, source=SOURCE, message=message))
