"""The GEMM worker's fused-MoE rows (torch side): M tokens routed top-k over the experts, measured with
vLLM's fused_marlin_moe where it is installed, torch's grouped GEMM for bf16 (a loop of torch.mm where this
torch has none or it refuses the shape) and a loop of the int4 kernel over the selected experts."""

from __future__ import annotations

import statistics
from typing import Any

from .gemm_rows import parse_dtype, row_bytes
from .gemm_weights import copies_for, quantized, rel_err

Bench = Any
"""gemm_torch.Bench (its device, generator, timer, kernels and args), which imports this module."""


def grouped_mm_of(torch: object) -> object:
    """torch's grouped GEMM (``torch.nn.functional.grouped_mm``, torch 2.10+; ``torch._grouped_mm`` before),
    or None: one kernel launch multiplies each expert's rows by its weight, as a fused MoE kernel does."""
    return getattr(torch.nn.functional, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


GROUPED_NOTE = ("the selected experts in one grouped GEMM per projection, tokens sorted by expert (as "
                "transformers' grouped_mm experts and a fused MoE kernel do)")


def routings(bench: Bench, it: dict, m: int) -> list:
    """Top-k routings of M tokens over the experts: softmax of random gate logits, renormalised over the
    chosen k, as vLLM's benchmarks/kernels/benchmark_moe.py routes (``torch.randn`` gating output): a
    balanced router's spread, the distinct experts ``expected_experts`` counts. Several routings are rotated
    so the experts' weights do not sit in L2 from call to call."""
    torch, e, topk = bench.torch, it["experts"], it["topk"]
    per_expert = row_bytes(dict(it, kind="moe"), 0, 1.0)
    out = []
    count = 1
    while len(out) < count:
        logits = torch.randn((m, e), device=bench.device, generator=bench.gen)
        w, ids = torch.topk(torch.softmax(logits.float(), dim=-1), topk, dim=-1)
        w = w / w.sum(dim=-1, keepdim=True)
        plan = []
        for ex in torch.unique(ids).tolist():
            rows, cols = (ids == ex).nonzero(as_tuple=True)
            plan.append((ex, rows, w[rows, cols].to(torch.bfloat16).unsqueeze(1)))
        out.append({"logits": logits, "weights": w, "ids": ids, "plan": plan})
        if len(out) == 1:
            count = copies_for(int(len(plan) * per_expert), bench.args)
    return out


def moe_rows(bench: Bench, it: dict, ms: list, backends: list, report: object) -> None:
    """The fused-MoE item's rows at each M, for each backend (``report`` records one)."""
    torch, e, group = bench.torch, it["experts"], parse_dtype(it["dtype"])
    n13, k13, n2, k2 = it["n"], it["k"], it["n2"], it["k2"]
    inter = n13 // 2
    f = torch.nn.functional
    int4 = group[0] == "int"
    g = group[2] if int4 else 0
    gmm = grouped_mm_of(torch) if "bf16" in backends else None
    # the experts' bf16 weights, stacked [E, N, K] where a grouped GEMM reads them (each expert a view)
    w13s = torch.empty((e, n13, k13), dtype=torch.bfloat16, device=bench.device) if gmm else None
    w2s = torch.empty((e, n2, k2), dtype=torch.bfloat16, device=bench.device) if gmm else None
    ref13, ref2, p13, p2, sz13, sz2 = [], [], [], [], [], []
    for ex in range(e):
        if int4:
            q1, s1, w1 = quantized(torch, n13, k13, g, bench.device, bench.gen)
            q2, s2, w2 = quantized(torch, n2, k2, g, bench.device, bench.gen)
            if "torch-int4" in backends:
                p13.append(bench.int4.pack(q1))
                p2.append(bench.int4.pack(q2))
                sz13.append(torch.stack([s1, torch.zeros_like(s1)], dim=2).contiguous())
                sz2.append(torch.stack([s2, torch.zeros_like(s2)], dim=2).contiguous())
        else:
            w1, w2 = bench.randn(n13, k13) * 0.02, bench.randn(n2, k2) * 0.02
        if w13s is not None and w2s is not None:
            w13s[ex].copy_(w1)
            w2s[ex].copy_(w2)
            w1, w2 = w13s[ex], w2s[ex]
        ref13.append(w1)
        ref2.append(w2)

    def looped(x: object, r: dict, up: object, down: object) -> object:
        out = torch.zeros((x.shape[0], n2), dtype=torch.bfloat16, device=x.device)
        for ex, rows, wts in r["plan"]:
            h = up(x.index_select(0, rows), ex)
            y = down(f.silu(h[:, :inter]) * h[:, inter:], ex)
            out.index_add_(0, rows, y * wts)
        return out

    cuda = bench.device != "cpu"

    def grouped(x: object, r: dict) -> object:
        ids = r["ids"].reshape(-1)
        sorted_ids, order = torch.sort(ids)
        tokens = order // r["ids"].shape[1]
        # histc, not bincount: no host sync, so the call is captured in a CUDA graph (on a CPU it needs floats)
        counts = torch.histc(sorted_ids.int() if cuda else sorted_ids.float(), bins=e, min=0, max=e - 1)
        offs = torch.cumsum(counts, 0, dtype=torch.int32)
        h = gmm(x.index_select(0, tokens), w13s.transpose(1, 2), offs=offs)
        y = gmm(f.silu(h[:, :inter]) * h[:, inter:], w2s.transpose(1, 2), offs=offs)
        y = y * r["weights"].reshape(-1)[order].unsqueeze(1).to(torch.bfloat16)
        return torch.zeros((x.shape[0], n2), dtype=torch.bfloat16, device=x.device).index_add_(0, tokens, y)

    bf_up = lambda x, ex: torch.mm(x, ref13[ex].t())  # noqa: E731
    bf_down = lambda x, ex: torch.mm(x, ref2[ex].t())  # noqa: E731
    i4_up = lambda x, ex: bench.int4.mm(x, p13[ex], g, sz13[ex])  # noqa: E731
    i4_down = lambda x, ex: bench.int4.mm(x, p2[ex], g, sz2[ex])  # noqa: E731
    mk = bench.marlin
    fused = None
    if "marlin" in backends:
        fused = marlin_moe_weights(bench, ref13, ref2, g)
    for m in ms:
        x = bench.randn(m, k13)
        rs = routings(bench, it, m)
        touched = statistics.mean(len(r["plan"]) for r in rs)
        ref = looped(x, rs[0], bf_up, bf_down)
        for backend in backends:
            if backend == "bf16":
                why = ""
                if gmm is not None:
                    try:
                        err = rel_err(torch, grouped(x, rs[0]), ref)
                    except Exception as exc:  # a shape the kernel refuses (strides, an old GPU): the loop
                        err, why = None, "grouped_mm failed ({}: {})".format(
                            type(exc).__name__, str(exc).splitlines()[0][:120] if str(exc) else "")
                    if err is not None and not err < bench.args.max_rel_err:
                        why = f"grouped_mm's result is off by {err:.3f} of the loop's"
                    if not why:
                        t, calls, how = bench.timer.measure(lambda i, x=x, rs=rs: grouped(x, rs[i % len(rs)]))
                        report(it, m, backend, "grouped_mm", t, calls, how, err, touched, GROUPED_NOTE)
                        continue
                t, calls, how = bench.timer.measure(lambda i, x=x, rs=rs: looped(x, rs[i % len(rs)], bf_up, bf_down))
                report(it, m, backend, "torch.mm loop over experts", t, calls, how, None, touched,
                       "a loop of torch.mm over the selected experts ({})".format(
                           why or f"torch {torch.__version__} has no grouped GEMM"))
            elif backend == "torch-int4":
                err = rel_err(torch, looped(x, rs[0], i4_up, i4_down), ref)
                t, calls, how = bench.timer.measure(lambda i, x=x, rs=rs: looped(x, rs[i % len(rs)], i4_up, i4_down))
                report(it, m, backend, bench.int4.kernel + " loop", t, calls, how, err, touched,
                       "a loop of the int4 kernel over the selected experts (no fused MoE kernel)")
            elif backend == "marlin" and fused is not None:
                def call(i: int, x: object = x, rs: list = rs) -> object:
                    r = rs[i % len(rs)]
                    return mk.call(mk.moe, dict(fused, hidden_states=x, gating_output=r["logits"],
                                                topk_weights=r["weights"], topk_ids=r["ids"].to(torch.int32)))
                err = rel_err(torch, call(0), ref)
                t, calls, how = bench.timer.measure(call)
                report(it, m, backend, "fused_marlin_moe", t, calls, how, err, touched,
                       f"vLLM fused_marlin_moe (vllm {mk.version})")

def marlin_moe_weights(bench: Bench, ref13: list, ref2: list, group: int) -> dict:
    mk, torch = bench.marlin, bench.torch
    q1, s1, q2, s2 = [], [], [], []
    for i in range(len(ref13)):
        _, qa, sa, _, _, _ = mk.quantize(ref13[i].t().contiguous(), mk.qtype, group, False)
        _, qb, sb, _, _, _ = mk.quantize(ref2[i].t().contiguous(), mk.qtype, group, False)
        q1.append(qa)
        s1.append(sa)
        q2.append(qb)
        s2.append(sb)
    return {"w1": torch.stack(q1), "w2": torch.stack(q2), "w1_scale": torch.stack(s1),
            "w2_scale": torch.stack(s2), "bias1": None, "bias2": None, "quant_type_id": mk.qtype.id,
            "num_bits": 4, "global_num_experts": len(ref13), "expert_map": None, "g_idx1": None,
            "g_idx2": None, "sort_indices1": None, "sort_indices2": None, "w1_zeros": None, "w2_zeros": None,
            "workspace": None, "is_k_full": True, "inplace": False, "activation": "silu",
            "apply_router_weight_on_input": False, "global_scale1": None, "global_scale2": None}
