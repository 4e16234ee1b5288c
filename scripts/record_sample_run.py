#!/usr/bin/env python3
"""Record a bundled sample run: ``kimitui demo --campaign --headless`` (the embedded default campaign on
the simulated 8 x RTX PRO 6000 host, samples every 0.5 s), gzipped to
sample_runs/campaign-demo-8x-rtx-pro-6000.jsonl.gz.

With ``--allreduce-speedup K`` it records one half of the bundled pair to compare (``kimitui compare``): the
same campaign from a file, renamed to say so, with the simulated all-reduce K times faster
(KIMITUI_SIM_ALLREDUCE_SPEEDUP: the modelled all-reduce rows and the simulated server's decode step alike), to
sample_runs/campaign-demo-8x-rtx-pro-6000-allreduce-Kx.jsonl.gz. The pair: K = 1 (as modelled) and K = 2,
recorded by the same code so that only the all-reduce differs.

It is a real recording, so two runs differ in their times and figures (the machine's load shows in the
macro phase). Usage: .venv/bin/python scripts/record_sample_run.py [--allreduce-speedup K] [--out FILE]
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
SPEEDUP_ENV = "KIMITUI_SIM_ALLREDUCE_SPEEDUP"


def campaign_file(tmp: Path, speedup: float) -> Path:
    """The demo campaign as a file, its name saying what was changed."""
    sys.path.insert(0, str(ROOT))
    from kimitui.campaign.examples import DEMO_TEXT

    name = 'name = "demo: Kimi-K2.5 on the simulated 8 x RTX PRO 6000"'
    assert name in DEMO_TEXT
    what = "as modelled" if speedup == 1.0 else f"{speedup:g}x faster (simulated)"
    text = DEMO_TEXT.replace(name, f'{name[:-1]}, all-reduce {what}"')
    path = tmp / f"demo-allreduce-{speedup:g}x.toml"
    path.write_text(text, encoding="utf-8")
    return path


def record(out: Path, speedup: float | None = None) -> Path:
    with tempfile.TemporaryDirectory(prefix="kimitui-sample-") as tmp:
        env = {**os.environ, "XDG_DATA_HOME": tmp, "PYTHONPATH": str(ROOT)}
        argv = [sys.executable, "-m", "kimitui", "demo", "--campaign", "--headless"]
        if speedup is not None:
            env[SPEEDUP_ENV] = repr(speedup)
            argv = [sys.executable, "-m", "kimitui", "campaign", str(campaign_file(Path(tmp), speedup)),
                    "--headless"]
        done = subprocess.run(argv, env=env, cwd=tmp, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            sys.exit(f"the demo campaign failed (exit {done.returncode}):\n{done.stderr}")
        (run,) = (Path(tmp) / "kimitui" / "runs").glob("*.jsonl")
        with open(run, "rb") as src, gzip.GzipFile(out, "wb", mtime=0, compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--allreduce-speedup", type=float, metavar="K",
                        help="one half of the pair to compare: the simulated all-reduce K times faster "
                             "(1: as modelled)")
    args = parser.parse_args()
    out = args.out or (DEFAULT_OUT if args.allreduce_speedup is None else DEFAULT_OUT.with_name(
        f"campaign-demo-8x-rtx-pro-6000-allreduce-{args.allreduce_speedup:g}x.jsonl.gz"))
    path = record(out, args.allreduce_speedup)
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
