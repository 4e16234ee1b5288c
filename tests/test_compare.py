"""``kimitui compare`` (issue 22 items 1 and 4) on the bundled pair (the demo campaign with the simulated
all-reduce as modelled, and 2x faster): its tables agree with each run's own ``kimitui report`` figure by
figure, its changes are the runs' own figures' changes, judged against their spread; what differs between
runs is said first; runs that share nothing say so in one line. Everything through the real command line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kimitui.core.figures import NOISE_MIN_REQUESTS, change_pct, noise, plateau, spread

ROOT = Path(__file__).resolve().parent.parent
PAIR = ("campaign-demo-8x-rtx-pro-6000-allreduce-1x", "campaign-demo-8x-rtx-pro-6000-allreduce-2x")


def kimitui(*args: str, env: dict[str, str] | None = None, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "kimitui", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TZ": "UTC", **(env or {})}, stdin=subprocess.DEVNULL, cwd=ROOT)
    if ok:
        assert done.returncode == 0, done.stderr
    return done


def tables(text: str) -> dict[str, list[dict[str, str]]]:
    """Every Markdown table of ``text`` under the heading before it: heading -> rows as {column: cell} (the
    first table under a heading; a second one gets the heading with ' #2', a third ' #3')."""
    out: dict[str, list[dict[str, str]]] = {}
    heading, lines = "", text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("#"):
            heading = lines[i].lstrip("# ")
        if lines[i].startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith(("| :", "| -")):
            head = [c.strip() for c in lines[i].strip("|").split(" | ")]
            rows = []
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                rows.append(dict(zip(head, [c.strip() for c in lines[j].strip()[1:-1].split(" | ")], strict=True)))
                j += 1
            n = sum(1 for k in out if k == heading or k.startswith(f"{heading} #"))
            key = heading if not n else f"{heading} #{n + 1}"
            out[key] = rows
            i = j
            continue
        i += 1
    return out


@pytest.fixture(scope="module")
def reports() -> tuple[str, str, str]:
    return (kimitui("compare", *PAIR).stdout, kimitui("report", PAIR[0]).stdout, kimitui("report", PAIR[1]).stdout)


def test_the_pair_is_bundled_and_small() -> None:
    for name in PAIR:
        path = ROOT / "sample_runs" / f"{name}.jsonl.gz"
        assert path.is_file() and path.stat().st_size < 120_000, path


def test_the_macro_table_is_each_runs_own_report_figure_by_figure(reports: tuple[str, str, str]) -> None:
    compare, own = tables(reports[0]), [tables(reports[1]), tables(reports[2])]
    rows = compare["Serving sweep: the change per level"] + compare["Serving sweep: the change per level #2"]
    checked = 0
    for label, mine in zip("AB", own, strict=True):
        for level in mine["Serving sweep (macro)"]:
            for figure in ("output tok/s", "TTFT mean", "TPOT mean", "ITL mean", "E2EL mean", "TTFT p99",
                           "TPOT p99"):
                (row,) = [r for r in rows if r["concurrency"] == level["concurrency"] and r["figure"] == figure]
                assert row[label] == level[figure], (label, level["concurrency"], figure)
                checked += 1
    assert checked == 2 * 4 * 7


def test_each_change_is_the_change_of_the_two_reports_figures(reports: tuple[str, str, str]) -> None:
    a, b = (tables(r)["Serving sweep (macro)"] for r in reports[1:])
    rows = tables(reports[0])["Serving sweep: the change per level"]
    for la, lb in zip(a, b, strict=True):
        for figure in ("output tok/s", "TPOT mean", "E2EL mean"):
            (row,) = [r for r in rows if r["concurrency"] == la["concurrency"] and r["figure"] == figure]
            shown = float(re.match(r"\**([+-][0-9.]+)%", row["B vs A"]).group(1))  # type: ignore[union-attr]
            # the reports round each figure to its last shown digit: the change lies within what those allow
            half_a, half_b = (0.5 * 10.0 ** -len(v.partition(".")[2]) for v in (la[figure], lb[figure]))
            va, vb = float(la[figure]), float(lb[figure])
            low, high = change_pct(va + half_a, vb - half_b), change_pct(va - half_a, vb + half_b)
            assert low is not None and high is not None and low - 0.05 <= shown <= high + 0.05, (row, low, high)
    # the faster all-reduce shortens every decode step: beyond the runs' spread where a level has the records
    at_128 = {r["figure"]: r["B vs A"] for r in rows if r["concurrency"] == "128"}
    assert at_128["TPOT mean"].startswith("**-") and at_128["TPOT mean"].endswith("beyond noise")
    assert at_128["output tok/s"].startswith("**+")
    at_1 = {r["figure"]: r["B vs A"] for r in rows if r["concurrency"] == "1"}
    assert all(v.endswith("too few requests") for v in at_1.values())  # 2 requests: no honest judgement
    assert "p25 to p75" in reports[0]


def test_the_budgets_and_micro_rows_are_each_runs_own(reports: tuple[str, str, str]) -> None:
    compare = tables(reports[0])
    for label, text in zip("AB", reports[1:], strict=True):
        mine = tables(text)
        budget = {r["M"]: r for r in mine["Phase 3: where a decode step's time goes"]}
        for row in compare["Where a decode step's time goes"]:
            if row["run"] == label:
                own = budget[row["M"]]
                assert {k: v for k, v in row.items() if k != "run"} == own
        gemm = {(r["GEMM"], r["M"], r["N x K"], r["dtype"], r["backend"]): r["time"] for r in mine["GEMM (micro)"]}
        for row in compare["GEMM"]:
            assert row[f"{label} time"] == gemm[(row["GEMM"], row["M"], row["N x K"], row["dtype"], row["backend"])]
        ar = {(r["size"], r["ranks"], r["dtype"], r["burst"], r["mode"]): r["time"] for r in mine["All-reduce (micro)"]}
        assert len(compare["All-reduce"]) == len(ar)
        for row in compare["All-reduce"]:
            assert row[f"{label} time"] == ar[(row["size"], row["ranks"], row["dtype"], row["burst"], row["mode"])]
    burst = [r for r in compare["All-reduce"] if r["burst"] == "122"]
    assert burst and all(0.45 <= float(r["B / A"].rstrip("x")) <= 0.55 for r in burst)  # 2x faster
    gemm_ratios = {r["B / A"] for r in compare["GEMM"]}
    assert gemm_ratios == {"1.00x"}  # the GEMMs are modelled alike in both


def test_single_stream_peak_plateau_and_knee_agree(reports: tuple[str, str, str]) -> None:
    rows = {r["run"]: r for r in tables(reports[0])["Throughput against concurrency"]}
    for label, text in zip("AB", reports[1:], strict=True):
        single = re.search(r"Single stream: \*\*([0-9.]+) output tok/s\*\*", text).group(1)  # type: ignore[union-attr]
        peak = re.search(r"peak \*\*([0-9]+) tok/s\*\* at concurrency ([0-9]+)", text)
        assert rows[label]["single stream"] == f"{single} tok/s"
        assert rows[label]["peak tok/s"] == f"{peak.group(1)} at c={peak.group(2)}"  # type: ignore[union-attr]
        # the sweep climbs to its last level: no plateau, no knee; the budget's verdict is about the highest level
        assert rows[label]["plateau"] == "none in the sweep" and rows[label]["knee"] == "none in the sweep"
        (marked,) = [r for r in tables(text)["Phase 3: where a decode step's time goes"] if "(" in r["M"]]
        assert marked["M"] == f"{peak.group(2)} (highest level measured)"  # type: ignore[union-attr]


def test_the_readme_shows_the_pairs_first_table_as_compare_writes_it(reports: tuple[str, str, str]) -> None:
    lines = reports[0].splitlines()
    start = lines.index("| concurrency | figure | A | B | B vs A |")
    end = lines.index("", start)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "\n".join(lines[start:end]) in readme
    assert (ROOT / "docs" / "compare-budget.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_what_differs_is_named_first(reports: tuple[str, str, str]) -> None:
    text = reports[0]
    first = text.index("## ")
    head = text[:first]
    assert "**These runs differ in what they measured**" in head
    assert "- all-reduce backend: A nccl: modelled: 8 ranks over PCIe Gen5 x16, small messages 24 us" in head
    assert "small messages 12 us, busbw 80 GB/s" in head
    settings = {r["fact"]: r for r in tables(text)["Hosts and settings"]}
    assert settings["GPUs"]["A"] == settings["GPUs"]["B"] == "8" and settings["GPUs"]["differs"] == ""
    assert settings["campaign"]["differs"] == "differs"


def test_a_one_gpu_run_against_eight_says_so_up_front() -> None:
    text = kimitui("compare", "campaign-demo-8x-rtx-pro-6000", "campaign-1x-h200").stdout
    head = text[:text.index("## ")]
    assert "- GPUs: A 8; B 1" in head and "- simulated: A yes; B no" in head
    assert "- GPU model: A NVIDIA RTX PRO 6000 Blackwell Server Edition; B NVIDIA H200" in head
    assert "- driver: A sim-580; B 580.159.04" in head


def test_runs_that_share_nothing_say_so_in_one_line() -> None:
    text = kimitui("compare", "micro-1x-h200", "real-cleanup-2x-h200").stdout
    line = [x for x in text.splitlines() if x.startswith("Nothing to compare")]
    assert line == ["Nothing to compare: these runs share no concurrency level, no micro row and no pair of "
                    "decode-step budgets."]
    assert "## Serving sweep" not in text and "## Hosts and settings" in text


def test_one_run_is_no_comparison(tmp_path: Path) -> None:
    done = kimitui("compare", PAIR[0], ok=False)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "kimitui: compare: give two runs or more (the first is the baseline)"]
    done = kimitui("compare", PAIR[0], str(tmp_path / "nope.jsonl"), ok=False)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1


def test_a_run_read_in_part_is_said_before_any_figure(tmp_path: Path) -> None:
    from kimitui.resources import find_run

    whole = find_run(PAIR[1]).read_bytes()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) * 2 // 3])  # a copy that stopped mid-transfer
    text = kimitui("compare", PAIR[0], str(cut)).stdout
    head = text[:text.index("## ")]
    assert "**Read in part**" in head and "- B: cut.jsonl.gz: compressed stream is truncated" in head
    assert "**Read in part**" not in kimitui("compare", *PAIR).stdout


def test_compare_writes_its_file_whole(tmp_path: Path) -> None:
    out = tmp_path / "cmp.md"
    kimitui("compare", *PAIR, "-o", str(out))
    assert out.read_text(encoding="utf-8").startswith("# kimitui compare: ")
    done = kimitui("compare", *PAIR, "-o", str(tmp_path / "missing" / "cmp.md"), ok=False)
    assert done.returncode == 2 and "no such directory" in done.stderr


# -- the noise rule and the figures it uses, alone --------------------------------------------------------


def test_noise_is_judged_by_the_middle_halves() -> None:
    a = [10.0, 11.0, 12.0, 13.0, 14.0, 15.0]
    assert noise(a, [x + 1.0 for x in a]) == "within noise"  # the middle halves overlap
    assert noise(a, [x + 5.0 for x in a]) == "beyond noise"
    assert noise(a, [x - 5.0 for x in a]) == "beyond noise"
    assert noise(a[: NOISE_MIN_REQUESTS - 1], [x + 50.0 for x in a]) == "too few requests"
    assert noise([], a) == "no records"
    s = spread(a)
    assert (s.n, s.p25, s.p50, s.p75) == (6, 11.25, 12.5, 13.75)


def test_change_and_plateau() -> None:
    assert change_pct(100.0, 108.0) == pytest.approx(8.0)
    assert change_pct(0.0, 1.0) is None and change_pct(None, 1.0) is None
    assert plateau([(1, 50.0), (8, 330.0), (32, 1480.0), (128, 1536.0)]) == 32  # within 5% of the highest
    assert plateau([(1, 50.0), (32, 842.0), (128, 1382.0)]) is None  # still climbing at the last level
    assert plateau([(1, 50.0)]) is None and plateau([]) is None
