"""The benchmark sections of a run's report: the serving sweep (macro) with its per-request distributions,
the GEMM and all-reduce tables (micro). Each takes the folded session state."""

from __future__ import annotations

import math
from typing import Any

from kimitui.core.describe import single_stream_words, verdict_line
from kimitui.core.events import AllReduceRow, MacroPoint, level_failed
from kimitui.core.events.macro import level_words
from kimitui.core.figures import percentile, single_stream
from kimitui.core.level_energy import NO_POWER
from kimitui.core.level_requests import LevelRequests
from kimitui.core.level_result import LevelResult
from kimitui.core.micro_words import gemm_words
from kimitui.core.printable import printable
from kimitui.core.server_metrics import prefix_cache_warning
from kimitui.core.state import SessionState, Sweep
from kimitui.report.format import fmt_bytes, fmt_num, table


def peak_point(points: list[MacroPoint]) -> MacroPoint | None:
    """The level of the highest output tok/s (a failed level, or one without the figure, is none)."""
    scored = [(tok, p) for p in points if (tok := p.result.output_throughput) is not None and not level_failed(p)]
    return max(scored, key=lambda s: s[0])[1] if scored else None


def _input_cell(p: MacroPoint) -> str:
    r = p.result
    mean, std, asked = r.figure("mean_input_tokens"), r.figure("std_input_tokens"), r.figure("requested_input_len")
    if mean is None:
        return "n/a"
    text = f"{mean:.1f} ±{std:.1f}" if std is not None else f"{mean:.1f}"
    return text + (f" ({asked:.0f})" if asked is not None else "")


def macro_section(state: SessionState) -> list[str]:
    lines = ["## Serving sweep (macro)", ""]
    sweeps = [s for s in state.sweeps if s.points]
    if not sweeps:
        return [*lines, "No macro benchmark points in this run."]
    from kimitui.report.campaign import throughput_plot

    for n, sweep in enumerate(sweeps):
        if len(sweeps) > 1:
            lines += [f"### Sweep {n + 1}" + (f": {sweep.title}" if sweep.title else ""), ""]
        lines += _sweep(sweep)
    return lines + throughput_plot(state.macro_points) + _distributions(state)


def _level(p: MacroPoint) -> str:
    """A level's cell: its concurrency, or its rate (``2.5 req/s``) where the sweep's levels are rates."""
    return f"{p.rate:g} req/s" if p.rate is not None else str(p.concurrency)


def _sweep(sweep: Sweep) -> list[str]:
    points = sweep.point_list
    by_rate = sweep.axis == "rate"
    single = single_stream(points)
    peak = peak_point(points)
    head = []
    if by_rate:
        cap = points[0].concurrency
        head.append(f"Levels by request rate (Poisson arrivals, at most {cap} requests at once)")
    elif single.tok_s is not None:
        tpot = sweep.points[1].result.tpot.mean
        head.append(f"Single stream: **{single_stream_words(single).replace('tok/s', 'output tok/s')}**"
                    + (f" (TPOT mean {tpot:.1f} ms)" if tpot is not None else ""))
    else:
        head.append(f"Single stream: {single_stream_words(single)}")
    if peak is not None:
        head.append(f"peak **{fmt_num(peak.result.output_throughput, '.0f')} tok/s** at "
                    + (f"{peak.rate:g} req/s" if peak.rate is not None else f"concurrency {peak.concurrency}"))
    failed = sweep.failed_levels
    if failed:
        head.append(f"{len(failed)} level(s) FAILED: every request failed")
    top, pk = points[0].result.top_percentile, points[0].result.top_word
    lines = ["; ".join(head) + ".", "",
             "Latencies in ms, as vLLM's `bench serve` defines them (ITL per chunk, TPOT per output token); "
             "input tokens: achieved mean ± spread (asked).", ""]
    thought = any(p.result.reasoning for p in points)  # a reasoning model: its first output token beside TTFT
    metered = bool(sweep.energy)  # the host's GPU power was recorded during the levels
    rows = []
    for p in points:
        r = p.result
        counts = f"{fmt_num(r.completed, 'd')}/{fmt_num(r.failed, 'd')}"
        if r.all_failed:
            rows.append([_level(p), counts, f"FAILED: {r.first_error or 'no reason given'}",
                         *(["n/a"] * (7 + 3 * thought + 2 * metered)), fmt_num(r.duration)])
            continue
        energy = sweep.energy.get(p.key)
        power = ([fmt_num(energy.tokens_per_joule(r.output_throughput), ".3g"),
                  fmt_num(energy.joules_per_request(r.duration, r.completed), ".4g")] if energy is not None
                 else ["n/a", "n/a"]) if metered else []
        ttfo = [fmt_num(r.ttfo.mean), fmt_num(r.ttfo.p(top)), fmt_num(r.figure("mean_reasoning_tokens"), ".0f")]
        rows.append([_level(p), counts,
                     fmt_num(r.output_throughput), fmt_num(r.ttft.mean), fmt_num(r.ttft.p(top)),
                     *(ttfo if thought else []),
                     fmt_num(r.tpot.mean), fmt_num(r.tpot.p(top)), fmt_num(r.itl.mean),
                     fmt_num(r.e2el.mean, ".0f"), _input_cell(p), *power, fmt_num(r.duration)])
    lines += table(["request rate" if by_rate else "concurrency", "ok/failed", "output tok/s", "TTFT mean",
                    f"TTFT {pk}",
                    *(["TTFO mean", f"TTFO {pk}", "thinking tok"] if thought else []), "TPOT mean", f"TPOT {pk}",
                    "ITL mean", "E2EL mean", "input tok", *(["tok/J", "J/req"] if metered else []), "duration s"],
                   rows)
    if metered:
        gpus = sorted({i for e in sweep.energy.values() for i in e.gpus})
        lines += ["", f"Energy: the GPUs the service ran on ({', '.join(map(str, gpus))}), their power as sampled "
                      "during each level: tok/J = output tok/s / mean watts; J/req = mean watts x duration / "
                      "completed requests."]
    else:
        lines += ["", f"Energy per token: not known ({NO_POWER})."]
    if thought:
        lines += ["", "TTFO: time to the first output token, the first token of the answer after the model's "
                      "thinking (TTFT counts the first token of either); thinking tok: reasoning tokens per request. "
                      "TPOT and ITL run over thinking and answer alike."]
    lines += _server_table(points)
    methods = sorted({m for p in points if (m := p.result.input_len_method) is not None})
    if methods:
        lines += ["", "Input lengths: " + ", ".join(_METHODS.get(x, x) for x in methods) + "."]
    dropped = sorted({f for p in points for f in p.result.request_fields_dropped})
    if dropped:
        names = ", ".join(f"`{printable(f)}`" for f in dropped)
        lines += ["", f"Request fields the server rejected: {names}; the sweep went without them (without "
                      "`ignore_eos` an output may end before max_tokens: its length is the server's usage count)."]
    lines += _verdict(sweep)
    client = [f"- {level_words(p.concurrency, p.rate)}: {w}" for p in points for w in p.result.client_warnings]
    if client:
        lines += ["", "The load generator may have distorted these figures:", "", *client]
    warm = [f"- {level_words(p.concurrency, p.rate)}: {w}" for p in points if (w := prefix_cache_warning(p.result))]
    if warm:
        lines += ["", "A warm prefix cache lowered these levels' TTFT:", "", *warm]
    return lines


SERVER_FIGURES = (("TTFT", "ttft", "mean_ttft_ms"), ("ITL", "itl", "mean_itl_ms"), ("E2EL", "e2e", "mean_e2el_ms"))


def _server_table(points: list[MacroPoint]) -> list[str]:
    """Per level, the server's own means (from its /metrics histograms over the level) beside the client's
    and the difference between them: the network and client overhead, measured. Nothing when no level
    has the server's figures."""
    read = [p for p in points if any(key in p.result.server.mean_ms for _, key, _ in SERVER_FIGURES)]
    if not read:
        return []
    cached = any(p.result.figure("prefix_cache_queries") is not None for p in read)
    rows = []
    for p in read:
        r = p.result
        row = [_level(p), fmt_num(r.count("server_requests"), "d")]
        for _, key, client in SERVER_FIGURES:
            row += [fmt_num(r.figure(client)), fmt_num(r.server.mean_ms.get(key)),
                    fmt_num(r.server.overhead_ms.get(key), "+.1f")]
        row.append(fmt_num(r.server.mean_ms.get("queue")))
        rows.append([*row, _hit_cell(r)] if cached else row)
    head = ["request rate" if read[0].rate is not None else "concurrency", "server requests"]
    for name, _, _ in SERVER_FIGURES:
        head += [f"{name} client", f"{name} server", f"{name} overhead"]
    head += ["queue server", *(["prefix cache hit"] if cached else [])]
    engine = read[0].result.server.engine or "the server"
    return ["", f"Client vs server ({engine}'s /metrics, mean ms over each level's measured requests; overhead: "
                "client minus server, the network and the client measured"
                + ("; prefix cache hit: the share of the level's prompt tokens the server found cached" if cached
                   else "") + "):", "",
            *table(head, rows)]


def _hit_cell(r: LevelResult) -> str:
    rate = r.figure("prefix_cache_hit_rate")
    cell = "n/a" if rate is None else f"{rate:.1%}"
    return cell + (" (reset)" if r.server.prefix_cache_reset else "")


def _verdict(sweep: Sweep) -> list[str]:
    """The sweep's verdict (where the SLOs hold at p99, the knee) and each level's goodput."""
    if sweep.verdict is None:
        return []
    lines = ["", f"Verdict: {verdict_line(sweep.verdict)}."]
    good = [f"{p.label}: {fmt_num(good, '.2f')}/s of "
            f"{fmt_num(p.result.figure('request_throughput'), '.2f')}/s" for p in sweep.point_list
            if (good := p.result.figure("request_goodput")) is not None]
    if good:
        lines += ["", "Goodput (completed requests meeting every SLO, per second, of all completed): "
                  + "; ".join(good) + "."]
    return lines


_METHODS = {"tokenize": "exact, counted by the server's /tokenize",
            "usage": "exact, calibrated from the server's usage.prompt_tokens",
            "estimated": "estimated (the server did not count them)", "dataset": "from the dataset"}
BOX_WIDTH = 48


def _box(values: list[float], lo: float, hi: float, log: bool) -> str:
    """One text box plot on [lo, hi]: ``-`` from min to p25 and p75 to max, ``=`` p25 to p75, ``|`` median."""
    def col(v: float) -> int:
        if log:
            v, a, b = math.log10(max(v, lo)), math.log10(lo), math.log10(hi)
        else:
            a, b = lo, hi
        return min(BOX_WIDTH - 1, max(0, round((v - a) / (b - a) * (BOX_WIDTH - 1)))) if b > a else 0

    s = sorted(values)
    q = [col(percentile(s, p)) for p in (0, 25, 50, 75, 100)]
    cells = [" "] * BOX_WIDTH
    for i in range(q[0], q[4] + 1):
        cells[i] = "-"
    for i in range(q[1], q[3] + 1):
        cells[i] = "="
    cells[q[2]] = "|"
    return "".join(cells)


def _distributions(state: SessionState) -> list[str]:
    if not state.macro_requests and not state.rate_requests:
        return ["", "No per-request records in this run (distributions need them)."]
    out: list[str] = []
    for levels, word in ((state.macro_requests, "c="), (state.rate_requests, "req/s ")):
        out += _boxes(levels, word)
    return out


def _boxes(levels: dict[Any, LevelRequests], word: str) -> list[str]:
    """The TTFT and TPOT boxes of LEVELS (by concurrency, or by rate: WORD names them)."""
    out: list[str] = []
    for name, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms")):
        series = {c: getattr(levels[c], key) for c in sorted(levels) if getattr(levels[c], key)}
        if not series:
            continue
        lo = min(min(v) for v in series.values())
        hi = max(max(v) for v in series.values())
        log = lo > 0 and hi / lo >= 20
        lo = lo if log else 0.0
        scale = f"{'log scale, ' if log else ''}{lo:.3g} to {hi:.4g} ms"
        out += ["", f"{name} per request at each level ({scale}; `-` min to max, `=` p25 to p75, `|` median):",
                "", "```text"]
        for c, values in series.items():
            s = sorted(values)
            where = f"c={c:<5}" if word == "c=" else f"{c:<6g}/s "
            out.append(f"{where}{_box(values, lo, hi, log)}  p50 {percentile(s, 50):.4g}  "
                       f"p99 {percentile(s, 99):.4g}  max {s[-1]:.4g}  (n={len(s)})")
        out.append("```")
    return out


def _micro_env(state: SessionState, part: str) -> list[str]:
    """What the run's workers found (device, torch, backends, bandwidth), one line each; simulated runs say so."""
    lines = []
    for run in state.micro_runs:
        env = run.env.get(part)
        if env is None:
            continue
        bw = ""
        if env.mem_bw_gbps:
            bw = f"; copy bandwidth {env.mem_bw_gbps:,.0f} GB/s measured" + (
                f" (datasheet {env.datasheet_gbps:,.0f} GB/s)" if env.datasheet_gbps else "")
        elif env.datasheet_gbps:
            bw = f"; bandwidth {env.datasheet_gbps:,.0f} GB/s (datasheet)"
        sim = "**Simulated: modelled figures, not measured.** " if env.simulated else ""
        lines.append(f"- {sim}Run {run.plan.run_id} on {run.plan.host or '?'}: {env.device or '?'}"
                     + (f", torch {env.torch}" if env.torch else "") + bw)
        lines += [f"  - {name}: {what}" for name, what in env.backends.items()]
    return [*lines, ""] if lines else []


def gemm_section(state: SessionState) -> list[str]:
    from kimitui.core.micro_words import INT4_NOTE

    lines = ["## GEMM (micro)", ""]
    rows_in = state.gemm
    if not rows_in:
        return [*lines, "No GEMM rows in this run."]
    rows = []
    for r in rows_in:
        w = gemm_words(r)
        rows.append([w[k] for k in ("name", "m", "nk", "dtype", "backend", "kernel", "time", "roofline", "pct_roof",
                                    "tflops", "gbps", "rel_err")])
    checked = [r for r in rows_in if r.correct is not None]
    head = [*lines, *_micro_env(state, "gemm"),
            "Times in us; roofline = bytes moved / memory bandwidth (the copy measured on the host); "
            "% roof = roofline / time.", ""]
    if checked:
        ok = sum(1 for r in checked if r.correct)
        head += [f"Correctness against the dequantized bf16 reference: {ok} of {len(checked)} rows within the "
                 "relative error limit (0.04).", ""]
    if any(r.backend == "torch-int4" for r in rows_in):
        head += [f"> {INT4_NOTE}.", ""]
    capped = [r for r in rows_in if r.throttle]
    tail = ["", "Measured under a clock cap (NVML's clock event reasons and violation counters while the row ran: "
                "the figure is the capped GPU's): "
            + "; ".join(f"{gemm_words(r)['name']} M={r.m} {r.backend}: {gemm_words(r)['cap']}" for r in capped)
            + "."] if capped else []
    return head + table(["GEMM", "M", "N x K", "dtype", "backend", "kernel", "time", "roofline", "% roof",
                         "TFLOP/s", "GB/s", "rel err"], rows, "lrllllrrrrrr") + tail


def allreduce_section(state: SessionState) -> list[str]:
    from kimitui.core.micro_words import NCCL_HEAD, burst_line, cap_words, nccl_line

    lines = ["## All-reduce (micro)", ""]
    rows_in = state.allreduce
    if not rows_in:
        return [*lines, "No all-reduce rows in this run."]
    topo = state.topology
    limit = topo.link_gbps if topo is not None else None
    if topo is not None:
        lines += [f"Interconnect ({topo.source}): {topo.summary}" + (
            f"; link limit {limit:.0f} GB/s per direction ({topo.link_kind})" if limit else ""), ""]
    lines += _micro_env(state, "allreduce")
    rows = [[fmt_num(r.tokens, "d"), fmt_bytes(r.size_bytes), str(r.ranks), r.dtype, str(r.burst), r.mode,
             f"{r.time_us:.1f}", f"{r.algbw_gbps:.2f}", f"{r.busbw_gbps:.2f}",
             f"{r.busbw_gbps / limit:.0%}" if limit else "n/a", str(r.wrong)] for r in rows_in]
    lines += ["Time per all-reduce in us (a burst row: captured in one CUDA graph, total / burst); "
              "busbw = algbw x 2(n-1)/n; % link = busbw / the link's bandwidth per direction.", "",
              *table(["tokens", "size", "ranks", "dtype", "burst", "mode", "time", "algbw GB/s", "busbw GB/s",
                      "% link", "#wrong"], rows, "rrrlrlrrrrr")]
    singles: dict[tuple[str, int], dict[str, AllReduceRow]] = {}
    for r in rows_in:
        if r.burst == 1:
            singles.setdefault((r.run_id, r.size_bytes), {})[r.mode] = r
    singles = {key: m for key, m in singles.items() if "eager" in m or "graph" in m}  # nccl-tests' two groups
    if singles:
        lines += ["", "In nccl-tests' columns (torch.distributed works in place: the two groups are eager and CUDA "
                  "graph):", "", "```", *NCCL_HEAD.split("\n"),  # our own three lines: each a line of the document
                  *[nccl_line(m.get("eager"), m.get("graph")) for m in singles.values()], "```"]
    bursts = [r for r in rows_in if r.burst > 1]
    if bursts:
        lines += ["", *[f"- {burst_line(r)}" for r in bursts]]
    capped = [r for r in rows_in if r.throttle]
    if capped:
        lines += ["", "Measured under a clock cap (NVML's clock event reasons and violation counters of the ranks' "
                  "GPUs while the row ran; the lowest SM clock among them): "
                  + "; ".join(f"{fmt_bytes(r.size_bytes)} {r.mode}" + (f" burst of {r.burst}" if r.burst > 1 else "")
                              + f": {cap_words(r)}" for r in capped) + "."]
    return lines
