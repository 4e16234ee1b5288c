#!/usr/bin/env python3
"""A run file with one absurdly long line (2 GB by default): the reader skips it in bounded memory.

Builds a run in a temporary folder: a few samples, one ``log`` event whose message is ``--gb`` GB long
(written a MiB at a time), a few samples after it; gzip-compressed with ``--gzip`` (a few MB on disk).
Then, in a fresh child process, opens it with ``RunReader`` and prints the time, the peak RSS
(ru_maxrss) and the reader's warnings. The line is over the 64 MiB cap (kimitui.core.runfile.MAX_LINE),
so it is skipped as it is read: the peak is the interpreter, about the cap and a read chunk, not the line.

Usage: .venv/bin/python benchmarks/long_line.py [--gb 2] [--gzip] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MIB = 1 << 20


def build_run(path: Path, line_bytes: int, compress: bool) -> None:
    from kimitui.core.events import GpuSample, HostSample, encode
    from kimitui.core.runfile import FORMAT_VERSION, RunHeader

    def sample(seq: int) -> bytes:
        gpu = GpuSample(index=0, uuid="GPU-0", name="bench", mem_used_mib=1000.0, mem_total_mib=80000.0)
        return (encode(HostSample(t=float(seq), host="bench", seq=seq, gpus=[gpu])) + "\n").encode()

    start = b'{"t":4.0,"type":"log","level":"info","source":"bench","message":"'
    end = b'"}\n'
    body = line_bytes - len(start) - len(end)
    with gzip.open(path, "wb", compresslevel=1) if compress else open(path, "wb") as fh:
        fh.write((RunHeader(FORMAT_VERSION, 0.0, "bench").to_json() + "\n").encode())
        fh.write(sample(1) + sample(2) + sample(3) + start)
        piece = b"x" * MIB
        for _ in range(body // MIB):
            fh.write(piece)
        fh.write(b"x" * (body % MIB) + end + sample(5) + sample(6))


def measure(path: Path) -> dict[str, object]:
    import resource

    from kimitui.core.runfile import RunReader

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    reader = RunReader(path)
    elapsed = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"open_s": elapsed, "peak_mb": peak / 1024, "before_open_mb": rss0 / 1024, "events": len(reader),
            "warnings": reader.warnings}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a run file with one very long line")
    parser.add_argument("--gb", type=float, default=2.0, help="length of the long line in GB (default 2)")
    parser.add_argument("--gzip", action="store_true", help="write the run gzip-compressed")
    parser.add_argument("--keep", type=Path, help="build the run in this folder and keep it")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / ("long-line.jsonl.gz" if args.gzip else "long-line.jsonl")
        line_bytes = int(args.gb * 1e9)
        t0 = time.perf_counter()
        build_run(path, line_bytes, args.gzip)
        print(f"run: a line of {line_bytes:,} bytes among 5 samples, {path.stat().st_size / 1e6:,.1f} MB on disk "
              f"({'gzip' if args.gzip else 'plain'}), built in {time.perf_counter() - t0:.1f} s")
        out = subprocess.run([sys.executable, __file__, "--measure", str(path)], capture_output=True, text=True,
                             check=True)
        m = json.loads(out.stdout)
        print(f"  open (RunReader)      {m['open_s']:8.2f} s")
        print(f"  peak RSS              {m['peak_mb']:8.0f} MB   (before the open: {m['before_open_mb']:.0f} MB)")
        print(f"  events read           {m['events']:8d}")
        for warning in m["warnings"]:
            print(f"  warning: {warning}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
