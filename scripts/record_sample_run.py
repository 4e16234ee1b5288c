#!/usr/bin/env python3
"""Record the bundled sample run: ``kimitui demo --campaign --headless`` (the embedded default campaign on
the simulated 8 x RTX PRO 6000 host, samples every 0.5 s), gzipped to
sample_runs/campaign-demo-8x-rtx-pro-6000.jsonl.gz.

It is a real recording, so two runs differ in their times and figures (the machine's load shows in the
macro phase). Usage: .venv/bin/python scripts/record_sample_run.py [--out FILE]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "sample_runs" / "campaign-demo-8x-rtx-pro-6000.jsonl.gz"


def record(out: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="kimitui-sample-") as tmp:
        env = {**os.environ, "XDG_DATA_HOME": tmp, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-m", "kimitui", "demo", "--campaign", "--headless"], env=env,
                              cwd=tmp, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            sys.exit(f"the demo campaign failed (exit {done.returncode}):\n{done.stderr}")
        (run,) = (Path(tmp) / "kimitui" / "runs").glob("*.jsonl")
        with open(run, "rb") as src, gzip.GzipFile(out, "wb", mtime=0, compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    path = record(args.out)
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
