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


def _crosses(box: Any, segments: list[tuple[tuple[float, float], tuple[float, float]]]) -> bool:
    """A segment (display coordinates) enters the box."""
    for (xa, ya), (xb, yb) in segments:
        steps = 16
        for k in range(steps + 1):  # the segment's points, a few pixels apart at the figure's size
            f = k / steps
            if box.contains(xa + (xb - xa) * f, ya + (yb - ya) * f):
                return True
    return False


def _place_notes(fig: Any, ax: Any, notes: list[tuple[Any, tuple[float, float]]]) -> None:
    """Each note (an annotation of a point, in data coordinates) moved to the first of a few places around
    its point where it crosses no curve of the axes, stays inside them, and overlaps neither the legend nor
    a note placed before it: above or below the point first, then to either side."""
    renderer = fig.canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    segments = []
    for line in ax.get_lines():
        if line.get_linestyle() in ("None", "none", "", " "):
            continue
        pts = line.get_transform().transform(line.get_xydata())
        segments += list(zip(map(tuple, pts[:-1]), map(tuple, pts[1:]), strict=True))
    taken = [leg.get_window_extent(renderer)] if (leg := ax.get_legend()) is not None else []
    places = ((-10, 12, "right"), (10, -18, "left"), (-10, -18, "right"), (10, 12, "left"), (-14, -4, "right"),
              (14, -4, "left"), (-10, 24, "right"), (10, -30, "left"))
    for note, _ in notes:
        for dx, dy, ha in places:
            note.set_position((dx, dy))
            note.set_ha(ha)
            box = note.get_window_extent(renderer).padded(2)
            if (inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1
                    and not _crosses(box, segments) and not any(box.overlaps(t) for t in taken)):
                break
        else:
            note.set_position(places[0][:2])
            note.set_ha(places[0][2])
        taken.append(note.get_window_extent(renderer).padded(2))


def throughput(plt: Any, runs: list[Run]) -> Any:
    if not any(level_tok_s(r.state.macro_points) for r in runs):
        return None
    from kimitui.report.compare import knee_of

    fig, ax = plt.subplots(figsize=(7, 4.2))
    notes = []
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
                note = ax.annotate(f"{r.label + ' ' if len(runs) > 1 else ''}{word} c={at}", (at, dict(levels)[at]),
                                   textcoords="offset points", xytext=(-10, 12), ha="right", fontsize=8,
                                   color=line.get_color())
                notes.append((note, (at, dict(levels)[at])))
    ax.set_xscale("log", base=2)
    ax.margins(x=0.06, y=0.14)  # room for a note above the highest point
    ax.set_ylim(bottom=0)
    ax.set_xlabel("concurrency")
    ax.set_ylabel("output tok/s")
    ax.set_title(_title(runs, "Output tok/s against concurrency"))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    _place_notes(fig, ax, notes)
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
            # the median in the run's colour, over the box: where p25 to p75 is one value the box is a line
            box = ax.boxplot(data, positions=where, widths=width * 0.9, whis=(0, 100), patch_artist=True,
                             medianprops={"color": colour, "linewidth": 2.5, "zorder": 3})
            for patch in box["boxes"]:
                patch.set(facecolor=colour, alpha=0.45)
            ax.plot([], [], color=colour, linewidth=6, alpha=0.45, label=_legend(r, len(runs) > 1))
    ax.set_xticks(range(len(levels)), [f"c={c}" for c in levels])
    ax.set_xlabel("concurrency (box: p25 to p75, thick line: median, whiskers: min to max)")
    ax.set_ylabel(f"{name} per request, ms")
    ax.set_title(_title(runs, f"{name} per request at each level"))
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")  # named: "best" searches every point (slow)
    return fig


Mark = tuple[str, float, str]
"""(step, when it began, its status)."""


def _step_starts(run: Run) -> list[Mark]:
    """The first cleanup's steps that began, in order of their start: the earliest of each step's events
    (its preview, the operator's answer, its first signal or outcome, else its result: a step that asked
    nothing and sent nothing, e.g. a skipped one, has only its result)."""
    cleanups = run.digest.state.cleanups
    if not cleanups:
        return []
    out = []
    for step in cleanups[0].steps.values():
        times = [t for t in (step.preview.t if step.preview is not None else None, step.started,
                             step.signals[0].sent.t if step.signals else None,
                             step.outcomes[0].t if step.outcomes else None,
                             step.result.t if step.result is not None else None) if t is not None]
        if times:
            out.append((step.step, min(times), step.status))
    return sorted(out, key=lambda m: m[1])


def _transition_samples(run: Run) -> tuple[list[HostSample], list[Mark]]:
    """The samples of the transition (the cleanup phase, or the first cleanup's steps) and its step marks
    (each at the step's start)."""
    d = run.digest
    span = next((s for s in d.state.phases if s.phase == "cleanup"), None)
    marks = _step_starts(run)
    done = [t for (n, _), t in d.step_done_at.items() if n == 0]
    if span is not None:
        lo, hi = span.start, span.end if span.end is not None else d.reader.end_time
    elif marks:
        lo, hi = d.state.cleanups[0].plan.t, max(done or [marks[-1][1]])
    else:
        return [], []
    lo, hi = lo - 1.0, hi + 1.0
    samples = [s for i, t in zip(d.sample_idx, d.sample_times, strict=True) if lo <= t <= hi
               and isinstance(s := d.reader.decoded(i), HostSample)]
    return samples, [m for m in marks if lo <= m[1] <= hi]


GpuLine = tuple[list[int], list[float], list[float]]
"""(the GPUs it stands for, seconds, GiB)."""


def _gpu_lines(samples: list[HostSample]) -> list[GpuLine]:
    """One line per GPU, drawn once for GPUs that read alike: the same samples and, at each, memory within
    0.5 % of the largest reading (a pixel at the figure's size), so eight GPUs that rise and fall together
    are one line named 'GPU 0-7' rather than eight lines on top of each other."""
    t0 = samples[0].t
    series: dict[int, tuple[list[float], list[float]]] = {}
    for s in samples:
        for g in s.gpus:
            if g.mem_used_mib is not None:
                xs, ys = series.setdefault(g.index, ([], []))
                xs.append(s.t - t0)
                ys.append(g.mem_used_mib / 1024)
    top = max((y for _, ys in series.values() for y in ys), default=0.0)
    tol = max(top * 0.005, 1 / 1024)
    lines: list[GpuLine] = []
    for i in sorted(series):
        xs, ys = series[i]
        same = next((ln for ln in lines if ln[1] == xs
                     and all(abs(a - b) <= tol for a, b in zip(ln[2], ys, strict=True))), None)
        if same is not None:
            same[0].append(i)
        else:
            lines.append(([i], xs, ys))
    return lines


LABEL_PT = 7.0
"""The step labels' font size."""


Placed = tuple[float, int, float, float]
"""(a mark's x, its label's row (0 the top), the label's left and right x)."""


def _spans(cluster: list[tuple[float, float]], left_side: bool, pad: float) -> list[tuple[float, float]]:
    """The labels of a cluster of marks ((x, label's width) each) in one column beside their lines: to the
    right of the last, or to the left of the first."""
    edge = cluster[0][0] - pad if left_side else cluster[-1][0] + pad
    return [(edge - w, edge) if left_side else (edge, edge + w) for _, w in cluster]


def _clash(placed: list[Placed], cluster: list[tuple[float, float]], spans: list[tuple[float, float]],
           first: int, pad: float, lines: bool) -> bool:
    """The cluster's labels, from row ``first`` down, overlap a label placed before (or, with ``lines``,
    a line crosses a label: a mark's line runs from the bottom up to its own label's row)."""
    for k, ((left, right), (x, _)) in enumerate(zip(spans, cluster, strict=True)):
        row = first + k
        for m, r, a, b in placed:
            if ((r == row and left - pad < b and a < right + pad)  # another label in this row
                    or (lines and r < row and left < m < right)  # a line that passes through this row
                    or (lines and r > row and a < x < b)):  # this line would cross a label below
                return True
    return False


def _label_rows(clusters: list[list[tuple[float, float]]], x0: float, x1: float,
                pad: float) -> list[tuple[list[Placed], bool]]:
    """Where each cluster's labels go: their rows and spans, and whether they stand left of the lines.
    Each cluster takes the highest rows where it overlaps no label and no line crosses a label, on a side
    that keeps it inside [x0, x1] (the right when both do, and at the same row)."""
    placed: list[Placed] = []
    out = []
    for cluster in clusters:
        widest = max(w for _, w in cluster)
        right_fits = cluster[-1][0] + pad + widest <= x1
        left_fits = cluster[0][0] - pad - widest >= x0
        sides = [side for side, fits in ((False, right_fits), (True, left_fits)) if fits] or [False]
        rows = range(len(placed) + 1)
        fits = [(r, k) for r in rows for k, side in enumerate(sides)
                if not _clash(placed, cluster, _spans(cluster, side, pad), r, pad, True)]
        if fits:
            first, left_side = fits[0][0], sides[fits[0][1]]
        else:  # nowhere without a crossing line: at least no label on another
            left_side = sides[0]
            first = next(r for r in rows if not _clash(placed, cluster, _spans(cluster, left_side, pad), r, pad,
                                                       False))
        mine = [(x, first + k, left, right)
                for k, ((x, _), (left, right)) in enumerate(zip(cluster, _spans(cluster, left_side, pad),
                                                                 strict=True))]
        placed += mine
        out.append((mine, left_side))
    return out


def _label_steps(fig: Any, ax: Any, marks: list[Mark], t0: float, data_top: float) -> None:
    """Each step's mark (a line at its start: dashed, dotted when the step did not run) and its name,
    horizontal, in a band above the data. Steps that start within 12 pixels of each other are one cluster:
    their names stacked a row apart in their order, in one column beside their lines (to the right, or to
    the left when that would leave the axes); no label on another, no line across a label. The y range
    grows to make room for the band."""
    renderer = fig.canvas.get_renderer()
    box = ax.get_window_extent(renderer)
    x0, x1 = ax.get_xlim()
    per_s = box.width / (x1 - x0)
    pad = 3.0 / per_s  # 3 pixels, in seconds
    row_h = LABEL_PT * 1.45 * fig.dpi / 72 / box.height  # a row, as a fraction of the axes' height
    clusters: list[list[tuple[float, str, Any, float]]] = []  # (x, status, text, width)
    for step, t, status in marks:
        x = t - t0
        word = step if status in ("done", "running", "previewed", "confirmed") else f"{step} ({status})"
        text = ax.text(x, 1.0, word, transform=ax.get_xaxis_transform(), fontsize=LABEL_PT, color="#444444",
                       va="top")
        entry = (x, status, text, text.get_window_extent(renderer).width / per_s)
        if clusters and x - clusters[-1][-1][0] <= 4 * pad:
            clusters[-1].append(entry)
        else:
            clusters.append([entry])
    lowest = -1
    where = _label_rows([[(x, w) for x, _, _, w in c] for c in clusters], x0, x1, pad)
    for cluster, (mine, left_side) in zip(clusters, where, strict=True):
        for (x, status, text, _), (_, row, left, right) in zip(cluster, mine, strict=True):
            y = 1 - 0.015 - row * row_h
            text.set_position((right if left_side else left, y))
            text.set_ha("right" if left_side else "left")
            ax.axvline(x, ymax=y, color="#777777", linewidth=0.8, linestyle="--" if status == "done" else ":")
            lowest = max(lowest, row)
    band = (lowest + 1) * row_h + 0.04
    bottom = ax.get_ylim()[0]
    ax.set_ylim(bottom, bottom + (max(data_top, 1e-9) * 1.02 - bottom) / (1 - band))


def memory(plt: Any, runs: list[Run]) -> Any:
    from kimitui.core.procdisplay import gpu_list

    shown = [(r, *_transition_samples(r)) for r in runs]
    shown = [(r, samples, marks) for r, samples, marks in shown if samples]
    if not shown:
        return None
    fig, axes = plt.subplots(len(shown), 1, figsize=(7, 3.4 * len(shown)), squeeze=False)
    drawn = []
    for ax, (r, samples, marks) in zip(axes[:, 0], shown, strict=True):
        lines = _gpu_lines(samples)
        n = len(lines)
        step = min(1.2, 4.0 / (n - 1)) if n > 1 else 0.0
        for k, (gpus, xs, ys) in enumerate(lines):  # the first drawn widest: where lines coincide, each shows
            ax.plot(xs, ys, drawstyle="steps-post", linewidth=1.3 + (n - 1 - k) * step, solid_capstyle="butt",
                    label=f"GPU {gpu_list(gpus)}", zorder=2 + k)
        ax.set_xlim(-0.1, max(xs[-1] for _, xs, _ in lines) + 0.1)
        ax.set_xlabel("seconds from the transition's first sample")
        ax.set_ylabel("GPU memory used, GiB")
        who = f"{r.label}: " if len(runs) > 1 else ""
        ax.set_title(f"{who}GPU memory through the transition (lines: each step's start)")
        ax.grid(True, alpha=0.3)
        alike = any(len(gpus) > 1 for gpus, _, _ in lines)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  title="GPUs that read alike\nshare a line" if alike else None, title_fontsize=7)
        drawn.append((ax, marks, samples[0].t, max(y for _, _, ys in lines for y in ys)))
    fig.tight_layout()
    for ax, marks, t0, top in drawn:
        _label_steps(fig, ax, marks, t0, top)
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


def _size(n: float, _: Any = None) -> str:
    """A message size as its tick reads: '4 KiB', '64 MiB'."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n:g} B"


def allreduce(plt: Any, runs: list[Run]) -> Any:
    if not any(row.burst == 1 for r in runs for row in r.state.allreduce):
        return None
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for r in runs:  # eager under graph, wider: where the two coincide (large messages), both show
        for mode, style, width, mark in (("eager", "-", 3.2, "o"), ("graph", "--", 1.4, ".")):
            pts = sorted((row.size_bytes, row.time_us) for row in r.state.allreduce if row.burst == 1
                         and row.mode == mode)
            if pts:
                xs, ys = zip(*pts, strict=True)
                label = f"{r.label + ': ' if len(runs) > 1 else ''}{mode}"
                ax.plot(xs, ys, style, linewidth=width, marker=mark, markersize=5, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(_size))
    ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))  # a label every 1-2-5, not only at each power of 10
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("message size")
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
