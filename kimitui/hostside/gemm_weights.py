"""The GEMM worker's weights and checks (torch side, torch passed in): random int4 weights with their bf16
reference, how many copies a rotation needs to keep the weights out of L2, a result's relative error."""

from __future__ import annotations

import argparse
import math


def rel_err(torch: object, out: object, ref: object) -> float:
    """Mean |out - ref| over mean |ref|."""
    out, ref = out.float(), ref.float()
    return float((out - ref).abs().mean() / ref.abs().mean().clamp_min(1e-12))


def copies_for(nbytes: int, args: argparse.Namespace) -> int:
    """Copies of NBYTES of weights that rotate over at least --rotate-mb (at most --max-copies)."""
    return max(1, min(args.max_copies, math.ceil(args.rotate_mb * 2 ** 20 / max(nbytes, 1))))


def quantized(torch: object, n: int, k: int, group: int, device: str, gen: object) -> tuple:
    """(q ints 0..15 [N, K], scales [K/g, N] bf16, dequantized bf16 [N, K]); symmetric: zero point 8."""
    q = torch.randint(0, 16, (n, k), dtype=torch.uint8, device=device, generator=gen)
    s = (torch.rand((k // group, n), device=device, generator=gen) * 0.01 + 0.002).to(torch.bfloat16)
    w = ((q.to(torch.float32) - 8.0) * s.to(torch.float32).t().repeat_interleave(group, dim=1)).to(torch.bfloat16)
    return q, s, w
