#!/usr/bin/env python3
"""Regenerate the bundled sample run: kimitui/data/sample_runs/campaign-8x-rtx-pro-6000.jsonl.gz.

Deterministic (fixed seed and start, gzip mtime 0): running it twice gives byte-identical files.
Run it again whenever the run format changes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kimitui.core.runfile import write_run  # noqa: E402
from kimitui.samplegen import HOST, SAMPLE_META, campaign_events  # noqa: E402

DEFAULT_OUT = ROOT / "kimitui" / "data" / "sample_runs" / "campaign-8x-rtx-pro-6000.jsonl.gz"


def make_sample_run(out: Path = DEFAULT_OUT, seed: int = 0) -> Path:
    events = campaign_events(seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    # gzip records the file's name in its header: write under the final name in a scratch folder
    # beside it, then move it in place (atomic, and the bytes do not depend on the scratch name).
    with tempfile.TemporaryDirectory(dir=out.parent) as scratch:
        tmp = Path(scratch) / out.name
        write_run(tmp, events, host=HOST, meta={**SAMPLE_META, "seed": seed}, compress=out.suffix == ".gz")
        tmp.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write (.gz compresses)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    path = make_sample_run(args.out, args.seed)
    print(f"{path} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
