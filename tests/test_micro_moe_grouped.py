"""The bf16 MoE row: torch's grouped GEMM over the selected experts (one launch per projection, as a fused
MoE kernel), checked against the loop of torch.mm; the loop where the kernel refuses the shape, said."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support import ROOT

WORKER = "import sys; from kimitui.hostside.gemm import main; sys.exit(main(sys.argv[1:]))"


def _moe_rows(n13: int, k13: int, n2: int, k2: int) -> list[dict]:
    shapes = [{"name": "moe_w13", "n": n13, "k": k13, "dtype": "bf16", "experts": 8, "topk": 2},
              {"name": "moe_w2", "n": n2, "k": k2, "dtype": "bf16", "experts": 8, "topk": 2}]
    out = subprocess.run([sys.executable, "-c", WORKER, "--shapes", json.dumps(shapes),
                          "--device", "cpu", "--ms", "1,4", "--backends", "bf16", "--warmup", "1",
                          "--replays", "1", "--target-ms", "1", "--max-calls", "3"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    env = next(d for d in lines if d.get("type") == "env")
    assert "MoE: grouped_mm" in env["backends"]["bf16"]
    return [d for d in lines if d.get("type") == "row" and d["name"].startswith("moe (")]


def test_the_bf16_moe_row_is_one_grouped_gemm_per_projection_and_agrees_with_the_loop() -> None:
    rows = _moe_rows(256, 128, 128, 128)
    assert [(r["m"], r["backend"], r["kernel"]) for r in rows] == [(1, "bf16", "grouped_mm"),
                                                                   (4, "bf16", "grouped_mm")]
    assert all(r["correct"] is True and r["rel_err"] < 0.01 for r in rows)
    assert all("one grouped GEMM per projection" in r["note"] and 1 <= r["experts"] <= 8 for r in rows)


def test_a_shape_the_grouped_gemm_refuses_is_measured_by_the_loop_and_says_why() -> None:
    rows = _moe_rows(72, 36, 36, 36)  # 36 bf16 = 72 bytes a row: not a multiple of 16 bytes
    assert [(r["m"], r["kernel"]) for r in rows] == [(1, "torch.mm loop over experts"),
                                                     (4, "torch.mm loop over experts")]
    assert all("a loop of torch.mm over the selected experts (grouped_mm failed (RuntimeError" in r["note"]
               for r in rows)
