"""The report's figures as images (``kimitui report RUN --figures DIR``, ``kimitui compare ... --figures DIR``):
PNG and SVG, with matplotlib (the optional extra ``kimitui[figures]``; the Agg backend, no display needed).

One run or several alike (the compare report's runs: one line, box or bar each): output tok/s against
concurrency with each run's plateau and knee, the TTFT and TPOT per request at each level, GPU memory through
the transition with the step marks, the decode-step budget as stacked bars, all-reduce latency against size
on log axes. Every figure is drawn from the fold of the runs, the same figures the text gives (the text plots
stay for the terminal). A figure the runs have nothing for is not written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimitui.core.events import HostSample
from kimitui.core.figures import budget_impossible, level_tok_s, plateau
from kimitui.report.budget_text import SEGMENTS, parts

if TYPE_CHECKING:
    from kimitui.report.compare import Run

INSTALL = "pip install 'kimitui[figures]'"
COLOURS = {"allreduce": "#d62728", "int4": "#1f77b4", "bf16": "#7fb3e0", "rest": "#c7c7c7"}


class FiguresUnavailable(Exception):
    """matplotlib is not installed: the one line the command prints."""


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise FiguresUnavailable(f"--figures needs matplotlib, which is not installed: {INSTALL}") from None
    matplotlib.use("Agg")
    matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "kimitui", "font.size": 9})
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, folder: Path, stem: str) -> Path:
    """The figure as STEM.png and STEM.svg (no date in either: the same runs give the same files)."""
    fig.tight_layout()
    png = folder / f"{stem}.png"
    fig.savefig(png, dpi=110, metadata={"Software": None})
    fig.savefig(folder / f"{stem}.svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return png


def _title(runs: list[Run], what: str) -> str:
    return what if len(runs) == 1 else f"{what}: " + " vs ".join(r.label for r in runs)


def _legend(run: Run, many: bool) -> str:
    return f"{run.label}: {run.name}" if many else run.name


# -- the figures --------------------------------------------------------------------------------------------


def throughput(plt: Any, runs: list[Run]) -> Any:
    if not any(level_tok_s(r.state.macro_points) for r in runs):
        return None
    from kimitui.report.compare import knee_of

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for r in runs:
        levels = sorted(level_tok_s(r.state.macro_points))
        if not levels:
            continue
        cs, tps = zip(*levels, strict=True)
        (line,) = ax.plot(cs, tps, marker="o", label=_legend(r, len(runs) > 1))
        at_plateau = plateau(levels)  # where tok/s went flat, if it did (the budget's level is not a plateau)
        at_knee, _ = knee_of(r.state)
        for at, mark, word in ((at_plateau, "s", "plateau"), (at_knee, "D", "knee")):
            if at is not None and at in dict(levels):
                ax.plot([at], [dict(levels)[at]], marker=mark, markersize=11, fillstyle="none",
                        color=line.get_color(), linestyle="none")
                ax.annotate(f"{r.label + ' ' if len(runs) > 1 else ''}{word} c={at}", (at, dict(levels)[at]),
                            textcoords="offset points", xytext=(-8, 10 if word == "knee" else -16), ha="right",
                            fontsize=8, color=line.get_color())
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency")
    ax.set_ylabel("output tok/s")
    ax.set_title(_title(runs, "Output tok/s against concurrency"))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def distributions(plt: Any, runs: list[Run], key: str, name: str) -> Any:
    levels = sorted({c for r in runs for c, lv in r.state.macro_requests.items() if getattr(lv, key)})
    if not levels:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    width = 0.8 / len(runs)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, r in enumerate(runs):
        data, where = [], []
        for i, c in enumerate(levels):
            lv = r.state.macro_requests.get(c)
            if lv is not None and getattr(lv, key):
                data.append(getattr(lv, key))
                where.append(i + (k - (len(runs) - 1) / 2) * width)
        if data:
            colour = colours[k % len(colours)]
            box = ax.boxplot(data, positions=where, widths=width * 0.9, whis=(0, 100), patch_artist=True)
            for patch in box["boxes"]:
                patch.set(facecolor=colour, alpha=0.45)
            ax.plot([], [], color=colour, linewidth=6, alpha=0.45, label=_legend(r, len(runs) > 1))
    ax.set_xticks(range(len(levels)), [f"c={c}" for c in levels])
    ax.set_ylabel(f"{name} per request, ms")
    ax.set_title(_title(runs, f"{name} per request at each level (box p25 to p75, whiskers min to max)"))
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _transition_samples(run: Run) -> tuple[list[HostSample], list[tuple[str, float]]]:
    """The samples of the transition (the cleanup phase, or the first cleanup's steps) and its step marks."""
    d = run.digest
    span = next((s for s in d.state.phases if s.phase == "cleanup"), None)
    marks = [(step, t) for (n, step), t in sorted(d.step_done_at.items(), key=lambda kv: kv[1]) if n == 0]
    if span is not None:
        lo, hi = span.start, span.end if span.end is not None else d.reader.end_time
    elif marks:
        lo, hi = d.state.cleanups[0].plan.t, marks[-1][1]
    else:
        return [], []
    lo, hi = lo - 1.0, hi + 1.0
    samples = [s for i, t in zip(d.sample_idx, d.sample_times, strict=True) if lo <= t <= hi
               and isinstance(s := d.reader.decoded(i), HostSample)]
    return samples, [(step, t) for step, t in marks if lo <= t <= hi]


def memory(plt: Any, runs: list[Run]) -> Any:
    shown = [(r, *_transition_samples(r)) for r in runs]
    shown = [(r, samples, marks) for r, samples, marks in shown if samples]
    if not shown:
        return None
    fig, axes = plt.subplots(len(shown), 1, figsize=(7, 3.2 * len(shown)), squeeze=False)
    for ax, (r, samples, marks) in zip(axes[:, 0], shown, strict=True):
        t0 = samples[0].t
        gpus = sorted({g.index for s in samples for g in s.gpus})
        for i in gpus:
            xs, ys = [], []
            for s in samples:
                g = next((g for g in s.gpus if g.index == i), None)
                if g is not None and g.mem_used_mib is not None:
                    xs.append(s.t - t0)
                    ys.append(g.mem_used_mib / 1024)
            ax.plot(xs, ys, drawstyle="steps-post", linewidth=1.2, label=f"GPU {i}")
        top = ax.get_ylim()[1]
        for step, t in marks:
            ax.axvline(t - t0, color="#888888", linestyle="--", linewidth=0.8)
            ax.text(t - t0, top, f" {step}", rotation=90, va="top", fontsize=7, color="#555555")
        ax.set_xlabel("seconds from the transition's first sample")
        ax.set_ylabel("GPU memory used, GiB")
        who = f"{r.label}: " if len(runs) > 1 else ""
        ax.set_title(f"{who}GPU memory through the transition (dashed: each step's result)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, ncol=4, loc="center right")
    return fig


def budget(plt: Any, runs: list[Run]) -> Any:
    rows = [(r, row) for r in runs if r.budget is not None for row in r.budget.rows]
    if not rows:
        return None
    ms = sorted({row.m for _, row in rows})
    fig, ax = plt.subplots(figsize=(7, 4.2))
    with_budget = [r for r in runs if r.budget is not None]
    width = 0.8 / len(with_budget)
    for k, r in enumerate(with_budget):
        assert r.budget is not None
        for i, m in enumerate(ms):
            row = next((x for x in r.budget.rows if x.m == m), None)
            if row is None:
                continue
            x = i + (k - (len(with_budget) - 1) / 2) * width
            bottom = 0.0
            over = budget_impossible(row)  # the measured parts exceed the TPOT: no share is real
            for key, _, what in SEGMENTS:
                ms_part = parts(row)[key]
                ax.bar(x, ms_part, width * 0.9, bottom=bottom, color=COLOURS[key],
                       label=what if k == 0 and i == 0 else None,
                       **({"hatch": "//", "edgecolor": "red"} if over else {}))
                bottom += ms_part
            if over and row.tpot_ms is not None:
                ax.hlines(row.tpot_ms, x - width * 0.45, x + width * 0.45, colors="black", linestyles="--",
                          linewidths=1.5)  # the TPOT the parts should fit in
                measured = (row.allreduce_ms or 0.0) + (row.gemm_ms or 0.0)
                ax.annotate(f"over TPOT by {measured - row.tpot_ms:.1f} ms", (x, bottom), textcoords="offset points",
                            xytext=(0, 12 if len(with_budget) > 1 else 2), ha="center", va="bottom", fontsize=7,
                            color="red")
                ax.set_ylim(0, max(ax.get_ylim()[1], bottom * 1.1))  # room for the note above the bar
            if len(with_budget) > 1:
                ax.text(x, bottom, r.label, ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(ms)), [f"M={m}" for m in ms])
    ax.set_ylabel("ms per decode step")
    ax.set_title(_title(with_budget, "Where a decode step's time goes"))
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def allreduce(plt: Any, runs: list[Run]) -> Any:
    if not any(row.burst == 1 for r in runs for row in r.state.allreduce):
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for r in runs:
        for mode, style in (("eager", "-"), ("graph", "--")):
            pts = sorted((row.size_bytes, row.time_us) for row in r.state.allreduce if row.burst == 1
                         and row.mode == mode)
            if pts:
                xs, ys = zip(*pts, strict=True)
                label = f"{r.label + ': ' if len(runs) > 1 else ''}{mode}"
                ax.plot(xs, ys, style, marker=".", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size, bytes")
    ax.set_ylabel("time per all-reduce, us")
    ax.set_title(_title(runs, "All-reduce latency against size"))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


FIGURES: tuple[tuple[str, str, Callable[[Any, list[Run]], Any]], ...] = (
    ("throughput", "Output tok/s against concurrency", throughput),
    ("ttft", "TTFT per request at each level", lambda plt, runs: distributions(plt, runs, "ttft_ms", "TTFT")),
    ("tpot", "TPOT per request at each level", lambda plt, runs: distributions(plt, runs, "tpot_ms", "TPOT")),
    ("memory", "GPU memory through the transition", memory),
    ("budget", "Where a decode step's time goes", budget),
    ("allreduce", "All-reduce latency against size", allreduce),
)
"""(file stem, title, the function that draws it, None when the runs have nothing for it)."""


def compare_figures(runs: list[Run], folder: Path) -> list[tuple[str, Path]]:
    """Every figure the runs have something for, as PNG and SVG in ``folder`` (made if missing): (title,
    the PNG's path) of each, in order."""
    plt = _pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for stem, title, draw in FIGURES:
        fig = draw(plt, runs)
        if fig is not None:
            out.append((title, _save(plt, fig, folder, stem)))
    return out
