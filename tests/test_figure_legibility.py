"""Issue 33 item 9: figures a reader can read, checked on what the figure contains. The report's figures
are read back from their SVG (matplotlib writes text as <text>, ``svg.fonttype = 'none'``): every step of
the transition named whole and horizontal inside the axes, no two labels in one place, each mark at its
step's start (its first event, not its result), GPUs that read alike drawn once and named together ('GPU
2-5'), the plateau's note clear of the curves; and the Micro tab's GEMM plot has a legend naming every
series, each series marked in the plot by its letter."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kimitui.core.events import HostSample
from kimitui.core.runfile import RunReader
from tests.figure_svg import DEMO, PAIR, STEP_EVENTS, Label, axes_boxes, crosses, curves, draw, inside, labels, overlap


def step_starts(path: Path) -> tuple[float, dict[str, float]]:
    """Independently of the figure: the transition's first sample (the x axis' zero) and each step's first
    event within the transition, in seconds from it."""
    reader = RunReader(path)
    events = [reader.decoded(i) for i in range(len(reader))]
    start = next(ev.t for ev in events if ev is not None and ev.type == "phase_start"
                 and getattr(ev, "phase", "") == "cleanup")
    end = next(ev.t for ev in events if ev is not None and ev.type == "phase_end"
               and getattr(ev, "phase", "") == "cleanup")
    t0 = next(ev.t for ev in events if isinstance(ev, HostSample) and ev.t >= start - 1.0)
    first: dict[str, float] = {}
    for ev in events:
        if ev is not None and ev.type in STEP_EVENTS and start <= ev.t <= end + 1.0:
            first.setdefault(ev.step, ev.t - t0)  # type: ignore[attr-defined]
    return t0, first


def x_scale(texts: list[Label], area: tuple[float, float, float, float]) -> tuple[float, float]:
    """(SVG x of 0 s, SVG units per second) from the x axis' tick labels under the axes."""
    ticks = sorted((float(t.text), t.x) for t in texts if t.anchor == "middle" and area[3] < t.y < area[3] + 20
                   and re.fullmatch(r"\d+(\.\d+)?", t.text))
    (s0, x0), (s1, x1) = ticks[0], ticks[-1]
    per_s = (x1 - x0) / (s1 - s0)
    return x0 - s0 * per_s, per_s


def test_memory_names_every_step_whole_apart_and_at_its_start(tmp_path: Path) -> None:
    svg = draw([DEMO], tmp_path) / "memory.svg"
    texts = labels(svg)
    (area,) = axes_boxes(svg)
    _, starts = step_starts(DEMO)
    assert {"drain", "graceful", "process", "device", "verify", "reset"} <= set(starts)
    zero, per_s = x_scale(texts, area)
    boxes = {}
    for step, at in starts.items():
        found = [t for t in texts if t.text.strip().split(" ")[0] == step]
        assert len(found) == 1, (step, [t.text for t in texts])
        label = found[0]
        assert label.rotation == 0, f"{step!r} is drawn rotated ({label.rotation} degrees)"
        assert inside(label.box(), area), f"{step!r} leaves the axes: {label.box()} not in {area}"
        edge = label.box()[0] if label.anchor == "start" else label.box()[2]
        mark = zero + at * per_s
        assert abs(edge - mark) <= 14, f"{step!r} is labelled at {(edge - zero) / per_s:.2f} s, it began at {at:.2f} s"
        boxes[step] = label.box()
    for a in boxes:
        for b in boxes:
            assert a == b or not overlap(boxes[a], boxes[b]), f"{a!r} and {b!r} are drawn on each other"


def gpu_groups(path: Path) -> list[str]:
    """Independently of the figure: the GPUs whose memory reads the same at every sample of the transition,
    named as the legend should ('GPU 2-5')."""
    from kimitui.core.procdisplay import gpu_list

    reader = RunReader(path)
    events = [reader.decoded(i) for i in range(len(reader))]
    start = next(ev.t for ev in events if ev is not None and ev.type == "phase_start"
                 and getattr(ev, "phase", "") == "cleanup")
    end = next(ev.t for ev in events if ev is not None and ev.type == "phase_end"
               and getattr(ev, "phase", "") == "cleanup")
    series: dict[int, list[float | None]] = {}
    for ev in events:
        if isinstance(ev, HostSample) and start - 1.0 <= ev.t <= end + 1.0:
            for g in ev.gpus:
                series.setdefault(g.index, []).append(g.mem_used_mib)
    groups: dict[tuple[float | None, ...], list[int]] = {}
    for i in sorted(series):
        groups.setdefault(tuple(series[i]), []).append(i)
    return [f"GPU {gpu_list(g)}" for g in sorted(groups.values())]


def test_memory_draws_gpus_that_read_alike_once_and_names_them(tmp_path: Path) -> None:
    svg = draw([DEMO], tmp_path) / "memory.svg"
    named = [t.text for t in labels(svg) if re.fullmatch(r"GPU [\d,-]+", t.text)]
    expected = gpu_groups(DEMO)
    assert len(expected) < 8  # the demo's eight GPUs: some read alike
    assert named == expected, named
    lines = curves(svg)
    assert len(lines) == len(expected)
    assert len({w for _, w, _ in lines}) == len(lines)  # each a different width: where they coincide, all show


def test_memory_of_two_runs_labels_each_apart(tmp_path: Path) -> None:
    svg = draw(PAIR, tmp_path) / "memory.svg"
    texts = labels(svg)
    areas = axes_boxes(svg)
    assert len(areas) == 2
    steps = [t for t in texts if t.text.strip().split(" ")[0] in ("drain", "graceful", "process", "others", "device",
                                                          "verify", "reset")]
    assert len(steps) == 14  # seven steps in each run
    for s in steps:
        assert s.rotation == 0 and any(inside(s.box(), a) for a in areas), s
    for i, a in enumerate(steps):
        for b in steps[i + 1:]:
            assert not overlap(a.box(), b.box()), (a.text, b.text)


LEVELS = {1: 50.0, 2: 98.0, 4: 190.0, 8: 350.0, 16: 560.0, 32: 600.0, 64: 610.0, 128: 612.0}
"""A sweep that flattens: its knee at c=16, its plateau at c=32 (the notes of both, near each other)."""


def sweep_run(path: Path, scale: float) -> Path:
    from kimitui.core.events import MacroPoint
    from kimitui.core.runfile import RunWriter

    with RunWriter(path, host="node") as w:
        for k, (c, tok_s) in enumerate(LEVELS.items()):
            w.append(MacroPoint(1.0 + k, concurrency=c, metrics={
                "completed": 2 * c, "failed": 0, "num_prompts": 2 * c, "output_throughput": tok_s * scale,
                "mean_tpot_ms": 20.0, "median_tpot_ms": 20.0, "mean_ttft_ms": 80.0, "duration": 3.0}))
    return path


@pytest.mark.parametrize("scales", [(1.0,), (1.0, 1.08)], ids=["one run", "two runs"])
def test_throughput_notes_clear_of_the_curves(tmp_path: Path, scales: tuple[float, ...]) -> None:
    runs = [sweep_run(tmp_path / f"sweep-{k}.jsonl", scale) for k, scale in enumerate(scales)]
    svg = draw(runs, tmp_path / "figs") / "throughput.svg"
    texts = labels(svg)
    (area,) = axes_boxes(svg)
    notes = [t for t in texts if re.search(r"(plateau|knee) c=\d+$", t.text)]
    assert len(notes) == 2 * len(runs), [t.text for t in texts]
    lines = [pts for _, _, pts in curves(svg)]
    assert len(lines) == len(runs)
    legend = [t for t in texts if t.text.endswith(".jsonl")]
    for note in notes:
        assert inside(note.box(), area), note
        for pts in lines:
            assert not crosses(note.box(), pts), f"{note.text!r} crosses a curve"
        for entry in legend:
            assert not overlap(note.box(), entry.box()), (note.text, entry.text)
    for i, a in enumerate(notes):
        for b in notes[i + 1:]:
            assert not overlap(a.box(), b.box()), (a.text, b.text)


async def test_the_micro_gemm_plot_has_a_legend_naming_each_series() -> None:
    from kimitui.core.replay import Player
    from kimitui.core.session import Session
    from kimitui.resources import bundled_sample_run
    from kimitui.tui.app import KimituiApp
    from kimitui.tui.views.micro_view import MicroView
    from tests.screen_text import screen_text
    from tests.support import BIG, FakeClock
    from tests.waiting import pilot_until

    session = Session()
    app = KimituiApp(session, player=Player(RunReader(bundled_sample_run()), session, clock=FakeClock()))
    async with app.run_test(size=BIG) as pilot:
        await pilot.press("e", "u")
        await pilot_until(pilot, lambda: bool(app.query(MicroView)), "the Micro tab mounted")
        view = app.query_one(MicroView)
        await pilot_until(pilot, lambda: bool(view.plotted.get("gemm-roof", ({},))[0]), "the GEMM plot")
        series = view.plotted["gemm-roof"][0]
        assert len(series) >= 10  # type: ignore[arg-type]
        await pilot_until(pilot, lambda: "GEMM % of roofline vs M:" in screen_text(app), "the legend")
        screen = screen_text(app)
        after = screen[screen.index("GEMM % of roofline vs M:"):]
        marks = re.findall(r"(?:^|\s)([A-Z]) (\S[^\n]*?)(?=\s{2,}|\s*$)", after, re.M)
        named = {name.strip(): mark for mark, name in marks}
        for name in series:  # type: ignore[union-attr]
            assert name in named, f"the legend does not name {name!r}: {after[:400]}"
        rows = screen.splitlines()
        top = next(i for i, line in enumerate(rows) if "─ GEMM % of roofline vs M ─" in line)
        left = rows[top].index("╭─ GEMM")
        right = rows[top].index("╮", left)
        box = [line[left:right] for line in rows[top + 1:] if len(line) > right and line[right] == "│"]
        frame = [line[min(i for i in (line.find("┤"), line.find("│")) if i >= 0) + 1:]
                 for line in box if "┤" in line or "│" in line]  # the plot's rows, right of its y axis
        cells = "".join(frame)
        marks = {named[name] for name in series}  # type: ignore[union-attr]
        shown = {m for m in marks if m in cells}
        assert shown == marks, (shown, cells)  # each series' letter is in the plot, none hidden
        lettered = view.lettered
        assert all(lettered[name] for name in series)  # type: ignore[union-attr]


def test_series_on_one_line_are_lettered_at_different_m_and_no_cell_holds_two_letters() -> None:
    from kimitui.tui.views.micro_view import mark_points, nice_ticks

    same = [(1.0, 70.0), (8.0, 70.2), (32.0, 70.1), (128.0, 69.9)]
    series = {"a": same, "b": same, "c": list(same), "d": [(1.0, 20.0), (8.0, 21.0), (32.0, 22.0), (128.0, 23.0)]}
    at = mark_points(series, 10, (0.0, 100.0))
    assert [at[k][-1][0] for k in "abc"] == [128.0, 32.0, 8.0]  # one line: each letter at its own M
    assert len(at["d"]) == 4
    cells = [(x, int(y * 9 / 100 + 0.5)) for pts in at.values() for x, y in pts]
    assert len(cells) == len(set(cells))
    assert nice_ticks(0.0, 63.0) == [0.0, 20.0, 40.0, 60.0, 80.0]  # not plotext's 0.1 10.6 21.0 ...
    assert nice_ticks(17.4, 81.4) == [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
