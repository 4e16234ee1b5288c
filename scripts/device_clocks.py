"""Issue 38 item 5 on a real driver (run by scripts/device_run.sh, part ``clocks``).

Without arguments: NVML's clock calls as ``kimitui/hostside/clocks.py`` makes them, on GPU 0 idle and after a burst
of big bf16 GEMMs (the handle found through torch's PCI bus id, the reasons call the driver offers, the violation
counters, a lap). With ``--rows FILE``: the GEMM rows of ``kimitui bench micro --json`` counted by the caps they
carry, with the SM clock at their ends.
"""

from __future__ import annotations

import argparse
import collections
import json


def driver() -> None:
    import pynvml as nv
    import torch

    from kimitui.hostside.clocks import ClockWatch, reasons_words

    w = ClockWatch.for_device(torch, "cuda:0")
    if w.h is None:
        print("clocks: no NVML handle for cuda:0 (the watch says nothing)")
        return
    call = w._reasons
    print(f"clocks: reasons call {getattr(call, '__name__', None)}; violation counters {w._violations()}")
    mask = int(call(w.h)) if call else 0
    print(f"clocks: idle: reasons {mask:#x} {reasons_words(mask)}; lap {w.lap()}")
    a = torch.randn(16384, 16384, device="cuda:0", dtype=torch.bfloat16)
    for _ in range(300):
        a @ a
    torch.cuda.synchronize()
    mask = int(call(w.h)) if call else 0
    watts = nv.nvmlDeviceGetPowerUsage(w.h) / 1e3
    limit = nv.nvmlDeviceGetEnforcedPowerLimit(w.h) / 1e3
    print(f"clocks: after 300 bf16 16384^3 GEMMs: reasons {mask:#x} {reasons_words(mask)}; lap {w.lap()}; "
          f"power {watts:.0f} W of a {limit:.0f} W limit")
    busy = ClockWatch(w.h, nv, link=True)
    for _ in range(50):
        a @ a
    print(f"clocks: the PCIe link while busy: {busy.link_words() or 'at its maximum'}")
    torch.cuda.synchronize()
    from kimitui.bench.micro.topology import format_topology, parse_topology
    from kimitui.hostside.topology import nvml_topology

    print("clocks: topology: " + format_topology(parse_topology(nvml_topology(nv), "local", 0.0)).replace(
        "\n", "\nclocks: topology: "))


def rows(path: str) -> None:
    with open(path) as f:
        found = [json.loads(line) for line in f if '"gemm_row"' in line]
    caps = collections.Counter(", ".join(r.get("throttle") or []) or "none" for r in found)
    mhz = [r["sm_clock_mhz"] for r in found if r.get("sm_clock_mhz")]
    print(f"clocks: {len(found)} rows by the caps seen: {dict(caps)}; "
          f"SM clock at row end {min(mhz, default=None)}-{max(mhz, default=None)} MHz")
    for r in found[::max(1, len(found) // 10)]:
        print(f"clocks:   {r.get('name')!s:<18} M={r.get('m')!s:<4} {r.get('time_us') or 0:9.1f} us "
              f"{r.get('sm_clock_mhz')} MHz {r.get('throttle')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", help="a `kimitui bench micro --json` output")
    args = parser.parse_args()
    rows(args.rows) if args.rows else driver()


if __name__ == "__main__":
    main()
