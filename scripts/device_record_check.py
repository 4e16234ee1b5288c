"""Read back a run `kimitui record` wrote on a GPU host: its events and samples, GPU 0's memory in the last
sample, and whether the torch holder (PID) was seen holding memory. Usage: device_record_check.py RUN PID"""

from __future__ import annotations

import sys

from kimitui.core.events import HostSample
from kimitui.core.runfile import RunReader


def main() -> int:
    reader = RunReader(sys.argv[1])
    holder = int(sys.argv[2])
    samples = [e for e in reader.events() if isinstance(e, HostSample)]
    if not samples:
        print("record: NO samples in the run")
        return 1
    last = samples[-1]
    held = [p for p in last.procs if p.pid == holder]
    span = samples[-1].t - samples[0].t
    print(f"record: {len(reader.times)} events, {len(samples)} samples over {span:.1f} s; GPU 0 "
          f"{last.gpus[0].mem_used_mib:.0f} MiB in the last; the holder "
          + (f"seen with {held[0].gpu_mem_mib} MiB" if held else "NOT SEEN")
          + (f"; warnings: {reader.warnings}" if reader.warnings else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
