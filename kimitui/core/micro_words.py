"""Micro rows in words: a GEMM row's cells (``gemm_words``, the same on every surface) and its table line,
the all-reduce table in nccl-tests' columns, a burst, a progress bar; the CLI's text (``bench/micro/tables.py``),
the views and the report all write them. torch.distributed's all-reduce works in place, so nccl-tests' two column
groups (out-of-place, in-place) are here eager and CUDA graph, both in place."""

from __future__ import annotations

from kimitui.core.events import AllReduceRow, GemmRow, MicroProgress
from kimitui.core.figures import correctness_failed, roofline_pct
from kimitui.core.printable import printable
from kimitui.core.procdisplay import DASH

GEMM_FAIL = "FAIL"
"""The mark of a GEMM row whose output is off the reference by more than the limit, on every surface."""


def gemm_words(g: GemmRow) -> dict[str, str]:
    """A GEMM row's cells, the same on the Benchmarks and Micro tabs, the CLI and the report (each shows
    the columns it has room for): a row that failed its correctness check says FAIL in its error cell."""
    pct = roofline_pct(g)
    err = "-" if g.rel_err is None else f"{g.rel_err:.4f}"
    if correctness_failed(g):
        err = GEMM_FAIL if g.rel_err is None else f"{err} {GEMM_FAIL}"
    return {"name": printable(g.name), "m": str(g.m), "nk": f"{g.n} x {g.k}", "dtype": printable(g.dtype or DASH),
            "backend": printable(g.backend or DASH), "kernel": printable(g.kernel or DASH),
            "time": f"{g.time_us:.2f}", "roofline": DASH if g.roofline_us is None else f"{g.roofline_us:.2f}",
            "pct_roof": DASH if pct is None else f"{pct:.0f}%", "tflops": f"{g.tflops:.2f}",
            "gbps": f"{g.gbps:.0f}", "rel_err": err, "cap": cap_words(g)}


def cap_words(g: GemmRow | AllReduceRow) -> str:
    """``power cap at 2235 MHz`` for a row measured under a clock cap; "" for one that was not (or unknown)."""
    if not g.throttle:
        return ""
    return printable(", ".join(g.throttle)) + (f" at {g.sm_clock_mhz:.0f} MHz" if g.sm_clock_mhz else "")

INT4_NOTE = ("torch-int4 is torch._weight_int4pack_mm (tinygemm): correct, but honest only near M=1; it stands "
             "in for Marlin where vLLM is not installed")
GEMM_HEAD = (f"{'GEMM':<20} {'M':>4} {'N x K':>13} {'dtype':<14} {'backend':<10} {'time us':>9} {'TFLOP/s':>8} "
             f"{'GB/s':>7} {'% roof':>7} {'rel err':>11}")
NCCL_HEAD = (
    "#                                                   eager (in place)                    CUDA graph (in place)\n"
    "#       size       count      type redop  root     time    algbw    busbw  #wrong     time    algbw"
    "    busbw  #wrong\n"
    "#        (B)  (elements)                           (us)   (GB/s)   (GB/s)             (us)   (GB/s)"
    "   (GB/s)")


def gemm_line(g: GemmRow) -> str:
    """A GEMM row under ``GEMM_HEAD``, in ``describe.gemm_words``' cells (the dashboard's and the report's)."""
    w = gemm_words(g)
    return (f"{w['name'][:20]:<20} {w['m']:>4} {w['nk']:>13} {w['dtype'][:14]:<14} {w['backend'][:10]:<10} "
            f"{w['time']:>9} {w['tflops']:>8} {w['gbps']:>7} {w['pct_roof']:>7} {w['rel_err']:>11}"
            + (f"  [{w['cap']}]" if w["cap"] else ""))


def _cols(r: AllReduceRow | None) -> str:
    if r is None:
        return f"{'-':>8} {'-':>8} {'-':>8} {'-':>7}"
    return f"{r.time_us:>8.1f} {r.algbw_gbps:>8.2f} {r.busbw_gbps:>8.2f} {r.wrong:>7}"


def nccl_caps(eager: AllReduceRow | None, graph: AllReduceRow | None) -> str:
    """``eager: power cap at 1755 MHz`` for the modes of one size measured under a clock cap; "" for none."""
    return "; ".join(f"{r.mode}: {cap_words(r)}" for r in (eager, graph) if r is not None and r.throttle)


def nccl_line(eager: AllReduceRow | None, graph: AllReduceRow | None) -> str:
    r = eager or graph
    assert r is not None
    dtype = {"bfloat16": "bfloat16", "float16": "half", "float32": "float"}.get(r.dtype, r.dtype)
    caps = nccl_caps(eager, graph)
    return (f"{r.size_bytes:>12} {r.count:>11} {dtype:>9}   sum    -1 {_cols(eager)} {_cols(graph)}"
            + (f"  [{caps}]" if caps else ""))


def burst_line(r: AllReduceRow) -> str:
    where = "in one CUDA graph" if r.mode == "graph" else "back to back (eager)"
    per = r.burst_us if r.burst_us is not None else r.time_us * r.burst
    return (f"burst: {r.burst} all-reduces of M={r.tokens} ({r.size_bytes:,} B) {where}: {per:,.1f} us per burst, "
            f"{r.time_us:.1f} us each ({r.ranks} ranks, {r.backend or '?'})"
            + (f" [{cap_words(r)}]" if r.throttle else ""))


def progress_bar(p: MicroProgress, width: int = 24) -> str:
    frac = p.done / p.total if p.total else 0.0
    full = int(frac * width)
    return f"[{'#' * full}{'.' * (width - full)}] {p.part} {p.done}/{p.total} {p.item}"
