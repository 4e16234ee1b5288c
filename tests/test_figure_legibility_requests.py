"""Issue 33 item 9, the other figures: ttft.png, tpot.png and allreduce.png read back from their SVG (the helpers
of tests/test_figure_legibility.py). Each box's median is drawn in its run's colour over the box (matplotlib's
default, orange, hid the box where p25 to p75 is one value and read as another run's colour), the title fits
the figure with three runs, the x axis is named; the all-reduce's eager and graph lines, which coincide for
large messages, both show, and its ticks read as sizes and plain numbers."""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.figure_svg import DEMO, PAIR, ROOT, SVG, axes_boxes, curves, draw, inside, labels, overlap

H200 = ROOT / "sample_runs" / "campaign-1x-h200.jsonl.gz"
BLACK_OR_GRID = ("#000000", "#b0b0b0")


def boxes_and_medians(svg: Path) -> tuple[list[tuple[int, str, float, float]], list[tuple[int, str, float, float]]]:
    """The boxes (filled patches in the axes) and the medians (thick horizontal lines in a colour) in the
    order drawn: (place in the document, colour, left x, right x)."""
    boxes, medians = [], []
    for k, el in enumerate(ET.parse(svg).iter(f"{SVG}path")):
        style = el.get("style", "")
        if el.get("clip-path") is None:
            continue
        nums = [float(v) for v in re.findall(r"-?[\d.]+", el.get("d", ""))]
        xs, ys = nums[::2], nums[1::2]
        if not xs:
            continue
        fill = re.search(r"fill: (#[0-9a-f]{6}); opacity", style)
        stroke = re.search(r"fill: none; stroke: (#[0-9a-f]{6})", style)
        if fill is not None:
            boxes.append((k, fill.group(1), min(xs), max(xs)))
        elif stroke is not None and stroke.group(1) not in BLACK_OR_GRID and max(ys) - min(ys) < 0.01:
            medians.append((k, stroke.group(1), min(xs), max(xs)))
    return boxes, medians


@pytest.mark.parametrize("stem", ["ttft", "tpot"])
@pytest.mark.parametrize("runs", [[H200], PAIR], ids=["one run", "two runs"])
def test_each_box_has_its_median_in_its_colour_over_it(tmp_path: Path, runs: list[Path], stem: str) -> None:
    boxes, medians = boxes_and_medians(draw(runs, tmp_path) / f"{stem}.svg")
    assert len(boxes) >= 4 and len({c for _, c, _, _ in boxes}) == len(runs)
    assert len(medians) == len(boxes), (boxes, medians)
    for at, colour, left, right in boxes:
        mine = [m for m in medians if left - 0.5 <= m[2] and m[3] <= right + 0.5]
        assert len(mine) == 1, (colour, left, right, medians)
        assert mine[0][1] == colour, f"the box in {colour} has its median in {mine[0][1]}"
        assert mine[0][0] > at  # drawn after the box: over it


@pytest.mark.parametrize("stem", ["ttft", "tpot"])
def test_request_figures_title_fits_and_the_axes_are_named(tmp_path: Path, stem: str) -> None:
    svg = draw([*PAIR, H200], tmp_path) / f"{stem}.svg"
    width = float(ET.parse(svg).getroot().get("width", "0").removesuffix("pt"))
    texts = labels(svg)
    (area,) = axes_boxes(svg)
    for t in texts:
        if t.rotation:  # the y label, along the axis
            continue
        assert t.box()[0] >= 0 and t.box()[2] <= width, f"{t.text!r} leaves the figure ({t.box()}, width {width})"
    title = [t for t in texts if t.y < area[1]]
    assert [t.text for t in title] == [f"{stem.upper()} per request at each level: A vs B vs C"]
    under = [t.text for t in texts if t.y > area[3] and not t.text.startswith("c=")]
    assert len(under) == 1 and under[0].startswith("concurrency") and "median" in under[0], under


def test_allreduce_lines_that_coincide_both_show(tmp_path: Path) -> None:
    lines = curves(draw(PAIR, tmp_path) / "allreduce.svg")
    assert len(lines) == 4  # eager and graph of each run
    coinciding = 0
    for (_, wide, a), (_, narrow, b) in itertools.combinations(lines, 2):  # in the order drawn
        if any(abs(xa - xb) < 1.0 and abs(ya - yb) < 1.0 for xa, ya in a for xb, yb in b):
            coinciding += 1
            assert narrow <= wide - 1.0, f"a line {narrow} wide drawn over one {wide} wide hides it"
    assert coinciding >= 2  # each run's eager and graph meet for large messages


def test_allreduce_ticks_read_as_sizes_and_plain_numbers(tmp_path: Path) -> None:
    svg = draw([DEMO], tmp_path) / "allreduce.svg"
    texts = labels(svg)
    (area,) = axes_boxes(svg)
    sizes = [t for t in texts if t.anchor == "middle" and area[3] < t.y < area[3] + 20]
    assert len(sizes) >= 5 and all(re.fullmatch(r"\d+ (B|KiB|MiB|GiB)", t.text) for t in sizes), [t.text for t in sizes]
    assert {"1 KiB", "1 MiB"} <= {t.text for t in sizes}
    times = [t for t in texts if t.anchor == "end" and t.x < area[0]]
    assert len(times) >= 5 and all(re.fullmatch(r"\d+", t.text) for t in times), [t.text for t in times]
    for a, b in itertools.combinations(sizes + times, 2):
        assert not overlap(a.box(), b.box()), (a.text, b.text)
    assert all(inside(t.box(), (0, 0, 504, 302.4)) for t in sizes + times)
