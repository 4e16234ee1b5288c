"""The simulated engine's automatic prefix cache, as vLLM's v1 engine keeps and counts it.

vLLM (``vllm/v1/core/kv_cache_manager.py``, ``block_pool.py``) hashes a prompt by full blocks of
``block_size`` tokens (16 by default), each block's hash chained to the one before it, so a block matches
only when the whole prefix up to it does. When a waiting request is scheduled it looks its blocks up: the
longest run of cached blocks from the start is reused, capped so that at least the prompt's last token is
computed again (``num_tokens - 1``, in whole blocks), and its stats count the prompt's tokens as queried and
the reused ones as hits: the counters ``vllm:prefix_cache_queries`` and ``vllm:prefix_cache_hits``
(exposed with ``_total``). The request's full blocks are then cached, and stay cached after it ends until
their room is needed (least recently used first). A reset (``POST /reset_prefix_cache`` in dev mode) drops
every cached block, but only when no request holds blocks: otherwise vLLM logs that it failed and keeps
the cache (the HTTP answer is 200 either way). The counters are never reset.

What the simulator leaves out: blocks of generated tokens are not cached (its outputs are the same few
words for every request), and a block held by a running request can be evicted.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

BLOCK_SIZE = 16
"""vLLM's default ``--block-size`` on GPUs."""


def block_hashes(token_ids: Sequence[int], block_size: int = BLOCK_SIZE) -> tuple[int, ...]:
    """The chained hash of each full block of ``token_ids`` (a partial last block has none)."""
    out: list[int] = []
    parent = 0
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(token_ids[start:start + block_size])))
        out.append(parent)
    return tuple(out)


class PrefixCache:
    """Cached blocks by hash, least recently used first; ``queries`` and ``hits`` in tokens since start."""

    def __init__(self, capacity_blocks: int, block_size: int = BLOCK_SIZE) -> None:
        self.capacity_blocks = capacity_blocks
        self.block_size = block_size
        self.queries = 0
        self.hits = 0
        self.resets = 0
        self._blocks: OrderedDict[int, None] = OrderedDict()

    @property
    def cached_blocks(self) -> int:
        return len(self._blocks)

    def schedule(self, hashes: Sequence[int], num_tokens: int) -> int:
        """A request with these block hashes and ``num_tokens`` prompt tokens is scheduled: how many of its
        tokens are found cached (counted as hits, all of them as queries); its blocks are cached."""
        usable = max(0, (num_tokens - 1) // self.block_size)
        found = 0
        for h in hashes[:usable]:
            if h not in self._blocks:
                break
            found += 1
        cached = found * self.block_size
        self.queries += num_tokens
        self.hits += cached
        for h in hashes:
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)
        return cached

    def reset(self, requests_holding_blocks: int) -> bool:
        """Drop every cached block; refused (False) while requests hold blocks, as vLLM refuses."""
        if requests_holding_blocks:
            return False
        self._blocks.clear()
        self.resets += 1
        return True
