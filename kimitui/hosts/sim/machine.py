"""The simulated machine's decode step from its own micro figures: one set of parameters for both.

The simulated host answers the micro benchmarks with modelled figures (``kimitui.hostside.gemm_rows.
modelled_gemm_us``, ``kimitui.hostside.allreduce.modelled_us``: bandwidth, FLOP rate, link latency and bus
bandwidth of ``MODELS[machine]``) and serves requests with a batching model (``batching.py``). Both describe
one machine, so the serving model's decode step at batch M is built from the same figures: the GEMMs and
all-reduces of one step, counted the way the campaign's analysis counts them (kimitui/phases/analysis.py:
each per-GPU GEMM x its calls per token, the routed experts through the fused MoE row on the production
kernel, 2 all-reduces per layer replayed in a CUDA graph), plus the rest (attention, routing, sampling,
scheduling), which the micro benchmarks do not measure. So the analysis of a run on the simulated host finds
its measured parts within the TPOT at every M, as on a real machine.

The shapes are the served model's (``kimitui.bench.micro.shapes``): only a model whose config is known has
them; the simulator serves any other name with the plain batching model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kimitui.bench.micro.shapes import KIMI_K25, shapes_for
from kimitui.hostside import allreduce, gemm_rows

MACHINE = "rtx-pro-6000"
"""The simulated host's GPU model in ``kimitui.hostside``'s MODELS (8 x RTX PRO 6000 over PCIe)."""
CONFIGS: dict[str, dict[str, Any]] = {str(KIMI_K25["_name"]): KIMI_K25}
"""The served models whose shapes the simulator knows (name -> config)."""


@dataclass(frozen=True, slots=True)
class StepParts:
    """The modelled GEMMs and all-reduces of one decode step at batch 1, 2, ... (seconds, index = batch - 1)."""

    gemm_s: tuple[float, ...]
    allreduce_s: tuple[float, ...]
    allreduces: int
    """All-reduces per step (2 per layer; 0 at TP=1)."""


def step_parts(model: str, tp: int, max_batch: int, machine: str = MACHINE,
               allreduce_speedup: float = 1.0) -> StepParts:
    """The modelled parts of one decode step of ``model`` at tensor parallel ``tp`` on ``machine``, at batch 1
    to ``max_batch``, with the all-reduce ``allreduce_speedup`` times faster (its latency and bus bandwidth
    alike, as ``kimitui.hostside.allreduce.modelled`` does). KeyError for a model the simulator has no
    config of."""
    plan = shapes_for(CONFIGS[model], tp)
    shapes = [g.to_dict() for g in plan.gemms]
    items, _ = gemm_rows.plan_items(shapes, ["marlin", "bf16"])
    by_name = {it["name"]: it for it in items}
    counted: list[tuple[dict[str, Any], str, int]] = []
    for g in plan.gemms:
        if g.experts:
            continue
        item = by_name.get(g.name)
        if item is not None:
            counted.append((item, item["backends"][0], g.calls_per_token))
    moe = next((it for it in items if it["kind"] == "moe"), None)
    moe_calls = next((g.calls_per_token for g in plan.gemms if g.experts), 0)
    if moe is not None:
        counted.append((moe, moe["backends"][0], moe_calls))
    gm = gemm_rows.MODELS[machine]
    am = dict(allreduce.MODELS[machine])
    am["graph_latency_us"] /= allreduce_speedup
    am["busbw_gbps"] *= allreduce_speedup
    o_proj = next((g for g in plan.gemms if g.name == "o_proj"), None)
    layers = o_proj.calls_per_token if o_proj is not None else 0
    count = 2 * layers if tp > 1 else 0
    per_token = plan.step_allreduces.bytes_per_token
    gemm_s: list[float] = []
    ar_s: list[float] = []
    for m in range(1, max_batch + 1):
        gemm_s.append(sum(gemm_rows.modelled_gemm_us(it, backend, m, gm) * calls
                          for it, backend, calls in counted) * 1e-6)
        ar_s.append(count * allreduce.modelled_us(am, m * per_token, "graph", tp) * 1e-6 if count else 0.0)
    return StepParts(tuple(gemm_s), tuple(ar_s), count)


def modelled_rows_high(parts: StepParts, batch: int) -> float:
    """Seconds the parts of a step at ``batch`` can read in a modelled run at most: each row's time is drawn
    up to the top of its jitter range (``MODELLED_JITTER``)."""
    return (parts.gemm_s[batch - 1] * gemm_rows.MODELLED_JITTER[1]
            + parts.allreduce_s[batch - 1] * allreduce.MODELLED_JITTER[1])
