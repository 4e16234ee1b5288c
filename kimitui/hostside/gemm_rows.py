"""The GEMM rows' arithmetic, shared by the worker (gemm.py), its torch side (gemm_torch.py) and the caller's
shape plan (kimitui/bench/micro/shapes.py): dtypes and their stored bytes, the plan's items, a row's bytes,
FLOPs and figures. Pure python 3.8, no torch."""

from __future__ import annotations

import re

INT4_HONEST = "tinygemm: honest only near M=1"
MAX_REL_ERR = 0.04
DATASHEET_GBPS = (("H200", 4800.0), ("H100 NVL", 3900.0), ("H100 PCIe", 2000.0), ("H100", 3350.0),
                  ("GH200", 4000.0), ("B200", 8000.0), ("A100-SXM4-80GB", 2039.0), ("A100 80GB PCIe", 1935.0),
                  ("A100", 1555.0), ("RTX PRO 6000", 1792.0), ("L40S", 864.0), ("L4", 300.0))
MODELS = {"rtx-pro-6000": {"device": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "bw": 1792.0,
                           "bf16_tflops": 250.0, "l2_mb": 128.0, "boost_mhz": 2617.0, "capped_mhz": 2235.0}}
MODELLED_JITTER = (0.985, 1.025)
"""A modelled row's time is ``modelled_gemm_us`` times a factor drawn from this range (a run's spread)."""



# --- what to measure ----------------------------------------------------------------------------------


def dtype_bits(dtype: str) -> tuple | None:
    """(bits per weight, group size or None) of a weight as the checkpoint stores it: bf16 -> (16, None),
    int4-g32 -> (4, 32), fp8 -> (8, None); None for a dtype no one knows. The one reading of a dtype name:
    the caller's shape plan (kimitui/bench/micro/shapes.py) and this worker both use it."""
    m = re.fullmatch(r"int(\d+)-g(\d+)", dtype)
    if m:
        return int(m.group(1)), int(m.group(2))
    if dtype.startswith("fp8"):
        return 8, None
    if dtype in ("bf16", "fp16", "bfloat16", "float16"):
        return 16, None
    if dtype in ("fp32", "float32"):
        return 32, None
    return None


def weight_bytes(n: int, k: int, dtype: str) -> int:
    """Bytes of an N x K weight as stored: bits/8 per element (fp8: 1 byte), plus a bf16 scale per group
    of a grouped int format. ValueError for a dtype no one knows."""
    found = dtype_bits(dtype)
    if found is None:
        raise ValueError(f"unknown weight dtype {dtype!r}")
    bits, group = found
    if group is None:
        return n * k * bits // 8
    return n * k * bits // 8 + (n * k // group) * 2


def parse_dtype(dtype: str) -> tuple:
    """How this worker benchmarks a dtype: ("bf16", None), ("int", bits, group) or ("other", name) (not
    benchmarked)."""
    if dtype in ("bf16", "bfloat16"):
        return ("bf16", None)
    found = dtype_bits(dtype)
    if found is not None and found[1] is not None:
        return ("int", found[0], found[1])
    return ("other", dtype)


def plan_items(shapes: list, backends: list) -> tuple:
    """(items, skipped): one item per dense shape (a routed expert's shape as ONE expert's dense GEMM)
    plus one fused-MoE item when both expert weights are there; each with the backends that apply."""
    items, skipped = [], []
    by_name = {s["name"]: s for s in shapes}
    for s in shapes:
        kind = parse_dtype(s["dtype"])
        if kind[0] == "other":
            skipped.append("{}: dtype {} is not benchmarked (bf16 and intN-gG are)".format(s["name"], s["dtype"]))
            continue
        wanted = ["bf16"] if kind[0] == "bf16" else [b for b in ("marlin", "torch-int4", "bf16") if b in backends]
        wanted = [b for b in wanted if b in backends]
        if not wanted:
            continue
        label = s["name"] + (" (1 expert)" if s.get("experts") else "")
        items.append({"kind": "dense", "name": label, "n": s["n"], "k": s["k"], "dtype": s["dtype"],
                      "backends": wanted})
    w13, w2 = by_name.get("moe_w13"), by_name.get("moe_w2")
    if w13 and w2 and w13.get("experts") and parse_dtype(w13["dtype"])[0] != "other":
        kind = parse_dtype(w13["dtype"])
        wanted = ["bf16"] if kind[0] == "bf16" else [b for b in ("marlin", "torch-int4", "bf16") if b in backends]
        wanted = [b for b in wanted if b in backends]
        if wanted:
            items.append({"kind": "moe", "name": f"moe ({w13['topk']} of {w13['experts']})",
                          "n": w13["n"], "k": w13["k"], "n2": w2["n"], "k2": w2["k"], "dtype": w13["dtype"],
                          "experts": w13["experts"], "topk": w13["topk"], "backends": wanted})
    return items, skipped


def row_key(name: str, m: int, backend: str) -> str:
    """A row's identity for ``--skip`` (rows a resumed campaign already has)."""
    return f"{name}|{m}|{backend}"


def expected_experts(experts: int, topk: int, m: int) -> float:
    """Distinct experts M tokens touch when each picks ``topk`` of ``experts`` uniformly."""
    return experts * (1.0 - (1.0 - topk / float(experts)) ** m)


def row_bytes(item: dict, m: int, touched: float) -> int:
    act = 2
    if item["kind"] == "moe":
        per = weight_bytes(item["n"], item["k"], item["dtype"]) + weight_bytes(item["n2"], item["k2"], item["dtype"])
        return int(touched * per + m * item["k"] * act + m * item["n2"] * act)
    return weight_bytes(item["n"], item["k"], item["dtype"]) + m * item["k"] * act + m * item["n"] * act


def row_flops(item: dict, m: int) -> float:
    if item["kind"] == "moe":
        return 2.0 * m * item["topk"] * (item["n"] * item["k"] + item["n2"] * item["k2"])
    return 2.0 * m * item["n"] * item["k"]


def as_backend(item: dict, backend: str) -> dict:
    """The item as the backend reads it: the bf16 reference of a quantized weight reads bf16 weights."""
    return dict(item, dtype="bf16") if backend == "bf16" else item


def figures(item: dict, m: int, time_us: float, bw_gbps: float, touched: float) -> dict:
    b = row_bytes(item, m, touched)
    return {"bytes_moved": b, "tflops": row_flops(item, m) / (time_us * 1e-6) / 1e12 if time_us > 0 else 0.0,
            "gbps": b / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0,
            "roofline_us": b / (bw_gbps * 1e9) * 1e6 if bw_gbps else None}


# --- modelled figures (the simulated host) -----------------------------------------------------------


def modelled_gemm_us(item: dict, backend: str, m: int, model: dict) -> float:
    """The modelled time of one GEMM row (``plan_items``'s item, run with ``backend`` at M=``m``) on the machine
    ``model`` (``MODELS``): the larger of its bytes over the usable bandwidth and its FLOPs over the usable
    bf16 rate, plus the launch overhead. The simulated host's micro rows are this times a small jitter, and its
    serving model's decode step is built from the same figures (kimitui.hosts.sim.machine)."""
    touched = expected_experts(item["experts"], item["topk"], m) if item["kind"] == "moe" else 0.0
    b = row_bytes(as_backend(item, backend), m, touched)
    eff = 0.82 if backend == "bf16" else 0.72
    mem_us = b / (eff * model["bw"] * 1e9) * 1e6
    flop_us = row_flops(item, m) / (0.55 * model["bf16_tflops"] * 1e12) * 1e6
    overhead = 2.6 + (6.0 if item["kind"] == "moe" else 0.0)  # a MoE's: sorting the tokens by expert, the gather
    return max(mem_us, flop_us) + overhead


def modelled_clock(item: dict, backend: str, m: int, model: dict) -> dict:
    """The simulated GPU's clock under a modelled row: a row bound by its FLOPs (not its bytes) draws the most
    power, and the modelled GPU meets its power cap there (``throttle``, a lower SM clock), as a real one can;
    a bandwidth-bound row runs at its boost clock. Only the flag and the clock are modelled, not a slowdown."""
    touched = expected_experts(item["experts"], item["topk"], m) if item["kind"] == "moe" else 0.0
    mem_us = row_bytes(as_backend(item, backend), m, touched) / (model["bw"] * 1e9) * 1e6
    flop_us = row_flops(item, m) / (model["bf16_tflops"] * 1e12) * 1e6
    capped = flop_us > mem_us
    return {"throttle": ["power cap"] if capped else [],
            "sm_clock_mhz": model["capped_mhz"] if capped else model["boost_mhz"]}
