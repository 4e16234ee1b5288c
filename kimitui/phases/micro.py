"""Phase 2, micro: the GEMM and all-reduce benchmarks as a phase, and the transition before them when the GPUs
hold memory."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from kimitui.core.events import HostSample, PhaseEnd, PhaseStart
from kimitui.phases.base import Publish, now

if TYPE_CHECKING:
    from kimitui.bench.micro.runner import MicroConfig, MicroResult
    from kimitui.bench.micro.workers import WorkerHost
    from kimitui.cleanup.sample_feed import SampleFeed


async def free_before_micro(sample: HostSample, scope: list[int] | None, feed: SampleFeed,
                            transition: Callable[[], Awaitable[bool]], say: Callable[[str], None],
                            threshold_mib: float = 256.0) -> tuple[bool, HostSample]:
    """Before Phase 2: when the GPUs in scope (all: None) hold memory, ``say`` why and run the transition
    (``transition``: the cleanup phase); Phase 2 then starts from a sample taken after it. Returns (free,
    sample); not free when the transition did not free them. The campaign's Phase 2 and ``kimitui bench
    micro`` on a simulated host (whose vLLM holds its GPUs) both go this way."""
    from kimitui.bench.micro.runner import gpu_holders

    busy, holders = gpu_holders(sample, scope or sorted(g.index for g in sample.gpus), threshold_mib)
    if not busy and not holders:
        return True, sample
    say("; ".join(busy) or f"{len(holders)} holders")
    if not await transition():
        return False, sample
    return True, await feed.latest(after=time.monotonic(), timeout=30.0)



async def micro_phase(publish: Publish, host: WorkerHost, host_name: str, cfg: MicroConfig,
                      sample: HostSample | None, cancel: asyncio.Event) -> MicroResult:
    """The micro benchmarks as a phase (a refusal, the GPUs holding memory, ends it not ok with why)."""
    from kimitui.bench.micro.runner import MicroRunner

    runner = MicroRunner(host, host_name, cfg, publish, cancel)
    publish(PhaseStart(now(), phase="micro", title="GEMM and all-reduce micro benchmarks"
                       + (" (simulated)" if cfg.modelled else "")))
    ok, note = False, ""
    try:
        result = await runner.run(sample)
        ok = result.ok
        note = ", ".join(f"{p.part} {p.status}" for p in result.parts.values())
        if result.refused or any(p.status == "refused" for p in result.parts.values()):
            note = "refused: " + (next(iter(result.parts.values())).detail if result.parts else "GPUs in use")
        return result
    except asyncio.CancelledError:
        note = "interrupted"
        raise
    except Exception as exc:
        note = f"could not run: {exc}"
        raise
    finally:
        publish(PhaseEnd(now(), phase="micro", ok=ok, note=note))
