"""Reading a report figure back from its SVG (matplotlib writes text as <text>, ``svg.fonttype = 'none'``):
its labels with estimated boxes, its axes' areas and its data lines; the sample runs the figure tests draw."""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from kimitui.core.runfile import RunReader

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "sample_runs" / "campaign-demo-8x-rtx-pro-6000.jsonl.gz"
PAIR = [ROOT / "sample_runs" / f"campaign-demo-8x-rtx-pro-6000-allreduce-{n}x.jsonl.gz" for n in (1, 2)]
SVG = "{http://www.w3.org/2000/svg}"
STEP_EVENTS = ("step_preview", "consent", "signal", "signal_outcome", "step_result")
WIDTH_EM = 0.62
"""A generous average width of a DejaVu Sans character, in ems: labels' boxes are estimated no smaller."""


@dataclass(frozen=True)
class Label:
    text: str
    x: float
    y: float
    size: float
    anchor: str
    rotation: float

    def box(self) -> tuple[float, float, float, float]:
        """(left, top, right, bottom) in the SVG's units, estimated from the font size (horizontal text)."""
        width = WIDTH_EM * self.size * len(self.text)
        left = {"start": self.x, "middle": self.x - width / 2, "end": self.x - width}[self.anchor]
        return left, self.y - 0.76 * self.size, left + width, self.y + 0.24 * self.size


def labels(svg: Path) -> list[Label]:
    out = []
    for el in ET.parse(svg).iter(f"{SVG}text"):
        style = el.get("style", "")
        found = re.search(r"font-size: ([\d.]+)px", style)
        if found is None:  # mathtext (the log axis' 2^k ticks): tspans, not a label of ours
            continue
        size = float(found.group(1))
        anchor = m.group(1) if (m := re.search(r"text-anchor: (\w+)", style)) else "start"
        transform = el.get("transform", "")
        rotation = float(m.group(1)) if (m := re.search(r"rotate\((-?[\d.]+)", transform)) else 0.0
        if el.get("x") is not None:
            x, y = float(el.get("x", "0")), float(el.get("y", "0"))
        else:
            m = re.search(r"translate\((-?[\d.]+) (-?[\d.]+)\)", transform)
            x, y = (float(m.group(1)), float(m.group(2))) if m else (0.0, 0.0)
        out.append(Label(el.text or "", x, y, size, anchor, rotation))
    return out


def axes_boxes(svg: Path) -> list[tuple[float, float, float, float]]:
    """Each axes' area (left, top, right, bottom): its clip rectangle."""
    return [(float(r.get("x", "0")), float(r.get("y", "0")), float(r.get("x", "0")) + float(r.get("width", "0")),
             float(r.get("y", "0")) + float(r.get("height", "0")))
            for c in ET.parse(svg).iter(f"{SVG}clipPath") for r in c.iter(f"{SVG}rect")]


def curves(svg: Path) -> list[tuple[str, float, list[tuple[float, float]]]]:
    """The data lines drawn in the axes: (colour, width, points), not the grid (grey, thin)."""
    out = []
    for el in ET.parse(svg).iter(f"{SVG}path"):
        style = el.get("style", "")
        colour = re.search(r"stroke: (#[0-9a-f]{6})", style)
        width = re.search(r"stroke-width: ([\d.]+)", style)
        if el.get("clip-path") is None or colour is None or width is None or colour.group(1) == "#b0b0b0":
            continue
        nums = [float(v) for v in re.findall(r"-?[\d.]+", el.get("d", ""))]
        pts = list(zip(nums[::2], nums[1::2], strict=True))
        if len(pts) >= 2 and float(width.group(1)) >= 1.0:
            out.append((colour.group(1), float(width.group(1)), pts))
    return out


def overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def inside(a: tuple[float, float, float, float], area: tuple[float, float, float, float]) -> bool:
    return area[0] <= a[0] and a[2] <= area[2] and area[1] <= a[1] and a[3] <= area[3]


def crosses(box: tuple[float, float, float, float], pts: list[tuple[float, float]]) -> bool:
    for (xa, ya), (xb, yb) in itertools.pairwise(pts):
        for k in range(65):
            x, y = xa + (xb - xa) * k / 64, ya + (yb - ya) * k / 64
            if box[0] <= x <= box[2] and box[1] <= y <= box[3]:
                return True
    return False


def draw(runs: list[Path], folder: Path) -> Path:
    from kimitui.report.compare import load_runs
    from kimitui.report.figures import compare_figures

    compare_figures(load_runs([RunReader(p) for p in runs]), folder)
    return folder
