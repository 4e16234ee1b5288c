"""Where the local agent's start goes on a GPU host: the link's connect (python's start, the payload read,
the bootstrap's in-memory import of the host program), the probe (pynvml, NVML's start, the GPUs' handles),
the first sample; and what compiling the host program's modules alone costs. Usage: device_agent_start.py"""

from __future__ import annotations

import asyncio
import time

from kimitui.hosts.bundle import AGENT, modules_for
from kimitui.hosts.local import LocalHost


async def once() -> str:
    host = LocalHost(name="local")
    try:
        t0 = time.perf_counter()
        await host.link.connect()
        t1 = time.perf_counter()
        info = await host.link.request("probe", {}, timeout=30)
        t2 = time.perf_counter()
        await host.link.request("scan", {}, timeout=30)
        t3 = time.perf_counter()
        return (f"connect {t1 - t0:.3f} s, probe {t2 - t1:.3f} s ({info.get('gpus')} GPUs, {info.get('source')}), "
                f"process scan {t3 - t2:.3f} s")
    finally:
        await host.close()


def main() -> None:
    for _ in range(3):
        print("agent start: " + asyncio.run(once()))
    sources = modules_for(AGENT)
    t0 = time.perf_counter()
    for path, src in sources.items():
        compile(src, path, "exec")
    print(f"agent start: compiling its {len(sources)} modules ({sum(map(len, sources.values())) / 1000:.0f} KB) "
          f"takes {time.perf_counter() - t0:.3f} s here")


if __name__ == "__main__":
    main()
