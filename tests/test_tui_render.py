"""The dashboard's tables draw what DataTable draws: KeyedTable (a Line API widget with its own caches)
gives the same segments as a DataTable with the same rows, for every kind of cell the views make, with
and without focus, scrolled, with a cursor; a table synced incrementally draws exactly what a table
built from scratch with the same rows draws, and renders again only the cells that changed."""

from __future__ import annotations

import pytest
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.color import Color
from textual.filter import LineFilter
from textual.geometry import Region
from textual.widgets import DataTable

from kimitui.core.events import GpuSample, ProcSample
from kimitui.tui.palette import Colors
from kimitui.tui.widgets import keyed_table
from kimitui.tui.widgets.gpu_table import NAME_WIDTH, GpuTable, gpu_cells
from kimitui.tui.widgets.keyed_table import Cell, KeyedTable, Row
from kimitui.tui.widgets.proc_table import ProcTable, proc_cells
from tests.app_probe import ProbedApp
from tests.waiting import pilot_until

COLORS = Colors(primary="#0178D4", accent="#ffa62b", success="#4EBF71", warning="#ffa62b", error="#ba3c5b",
                muted="#808080", foreground="#e0e0e0")


class Table(KeyedTable):
    COLUMNS = (("a", "A", 6), ("b", "B", 12), ("c", "C", None), ("d", "D", 1), ("e", "E", 3))


class CursorTable(Table):
    CURSOR = True


def odd_cells(k: int) -> list[Cell]:
    """Cells at the edges: empty, too wide, wide characters, styled spans, every justify and
    overflow, a plain string with markup, and a Text that ends in a newline."""
    return [
        Text(f"{k}", justify="right"),
        Text("a command far too long for its column " * 2, no_wrap=True, overflow="ellipsis",
             style="bold"),
        [Text(""), Text("GPU 漢字 全角", justify="center"), Text("x" * 40, overflow="fold"),
         Text("right  ", justify="right", style="on red"), Text("left", justify="left", style="underline"),
         Text.assemble(("██▌", "red"), (" 12.3/95.6 GiB", "green"))][k % 6],
        Text("wide", no_wrap=False),
        "[b]plain[/b] str" if k % 2 else Text("full justify it", justify="full", end="\n"),
    ]


def gpu(i: int, used: float) -> GpuSample:
    return GpuSample(i, f"GPU-{i}", "NVIDIA RTX PRO 6000 Blackwell Server Edition", mem_used_mib=used,
                     mem_total_mib=97887.0, util_pct=None if i == 3 else float(i * 13),
                     temp_c=60.0, power_w=300.0 + i, sm_clock_mhz=2100.0, error="fell off the bus" if i == 5 else "")


def proc(k: int) -> ProcSample:
    return ProcSample(pid=1000 + k, start_time=5000 + k, user="a-very-long-user-name" if k == 2 else "vllm",
                      gpu_mem_mib={k % 8: 1400.0 * k}, kind=("cuda", "handle", "other")[k % 3],
                      unit="vllm.service", cmdline="python3 -m vllm.entrypoints.openai.api_server " * (k % 4),
                      visible=k != 5, gpus=[k % 8])


class Tables(App[None]):
    CSS = "KeyedTable, DataTable { height: 9; width: 100; }"

    def compose(self) -> ComposeResult:
        yield Table(id="t1")
        yield Table(id="t2")
        yield GpuTable(id="gpus")
        yield ProcTable(id="procs")


def draw(table: KeyedTable | DataTable[Cell]) -> list[object]:
    strips = table.render_lines(Region(0, 0, table.size.width, table.size.height))
    assert all(strip.cell_length == Segment.get_line_length(list(strip)) == table.size.width for strip in strips)
    lines = [list(strip) for strip in strips]
    if isinstance(table, KeyedTable) and any(c.hidden for c in table.columns):
        # a segment's meta names its column by its index among all columns; a DataTable has only the shown
        shown_index = {i: n for n, i in enumerate(i for i, c in enumerate(table.columns) if not c.hidden)}
        lines = [[renumbered(segment, shown_index) for segment in line] for line in lines]
    return lines


def renumbered(segment: Segment, shown_index: dict[int, int]) -> Segment:
    meta = segment.style.meta if segment.style is not None else {}
    if "column" not in meta or meta.get("out_of_bounds") or segment.style is None:
        return segment
    style = segment.style + Style.from_meta({**meta, "column": shown_index[meta["column"]]})
    return Segment(segment.text, style, segment.control)


def twin(table: KeyedTable) -> DataTable[Cell]:
    """A DataTable with the table's shown columns (DataTable has no hidden ones)."""
    data: DataTable[Cell] = DataTable(zebra_stripes=True, cursor_type="row", show_cursor=table.show_cursor)
    for column in table.columns:
        if not column.hidden:
            data.add_column(column.label, key=column.key, width=column.width)
    return data


def shown(table: KeyedTable, cells: list[Cell]) -> list[Cell]:
    return [cell for column, cell in zip(table.columns, cells, strict=True) if not column.hidden]


class BoxedTables(Tables):
    """Tables with what Textual's styles cache adds to lines: our tables draw through it (bare_lines.py)."""

    CSS = Tables.CSS + "KeyedTable, DataTable { border: round red; padding: 0 1; tint: red 10%; }"


@pytest.mark.parametrize("boxed", [False, True], ids=["bare", "boxed"])
async def test_tables_draw_what_a_datatable_with_the_same_rows_draws(boxed: bool) -> None:
    app = BoxedTables() if boxed else Tables()
    async with app.run_test(size=(110, 60)) as pilot:
        odd = CursorTable(id="odd")
        await app.mount(odd)
        rows: dict[str, list[Row]] = {
            "odd": [(str(k), odd_cells(k)) for k in range(12)],
            "gpus": [(str(i), gpu_cells(gpu(i, 90000.0 + i), COLORS, NAME_WIDTH)) for i in range(8)],
            "procs": [(str(k), proc_cells(proc(k), COLORS)) for k in range(9)],
        }
        checked = scrolled_x = 0
        for table_id, table_rows in rows.items():
            ours = app.query_one(f"#{table_id}", KeyedTable)
            theirs = twin(ours)
            await app.mount(theirs)
            ours.sync(table_rows)
            for key, cells in table_rows:
                theirs.add_row(*shown(ours, cells), key=key)
            await pilot.pause()
            assert ours.size == theirs.size
            assert ours._bare_box() is not boxed
            assert draw(ours) == draw(theirs), table_id
            for table in (ours, theirs):  # the cursor on another row, scrolled, focused
                table.move_cursor(row=4)
            await pilot.pause()
            for table in (ours, theirs):
                table.scroll_to(x=5, y=2, animate=False, immediate=True)
            await pilot.pause()
            assert (ours.scroll_offset, ours.cursor_row) == (theirs.scroll_offset, theirs.cursor_row), table_id
            scrolled_x += ours.scroll_x > 0
            assert draw(ours) == draw(theirs), table_id
            focused = []
            for table in (ours, theirs):  # one at a time
                table.focus()
                await pilot.pause()
                focused.append(draw(table))
            assert focused[0] == focused[1] != draw(ours), table_id
            checked += 1
            app.set_focus(None)
            await theirs.remove()
        # the process table is wider than its 100 columns; boxed, the GPU table is wider than its 96 too
        assert checked == 3 and scrolled_x == (2 if boxed else 1)
        # at 100 columns the process table gives the Unit column's room to the command, not the User's
        procs = app.query_one("#procs", KeyedTable)
        assert [c.key for c in procs.columns if c.hidden] == ["unit"]


async def test_a_table_given_a_box_and_back_draws_what_a_datatable_draws() -> None:
    """A table drawing its own lines, then boxed at run time (Textual's path), then bare again: its lines are
    never ones kept from the other path."""
    app = Tables()
    async with app.run_test(size=(110, 60)) as pilot:
        ours = app.query_one("#gpus", KeyedTable)
        theirs = twin(ours)
        await app.mount(theirs)
        app.set_focus(None)
        for step, (border, value) in enumerate([(None, 90000.0), (("round", "red"), 91000.0), (None, 92000.0),
                                                 (("heavy", "blue"), 93000.0)]):
            rows = [(str(i), gpu_cells(gpu(i, value + i), COLORS, NAME_WIDTH)) for i in range(8)]
            ours.sync(rows)
            for key, cells in rows:
                if step == 0:
                    theirs.add_row(*shown(ours, cells), key=key)
                else:
                    for column, cell in zip([c for c in ours.columns if not c.hidden], shown(ours, cells), strict=True):
                        theirs.update_cell(key, column.key, cell)
            for table in (ours, theirs):
                table.styles.border = border or ("none", "red")
            await pilot.pause()
            assert ours._bare_box() is (border is None), step
            assert draw(ours) == draw(theirs), step
            assert f"{(value + 7) / 1024:.1f}" in "".join(s.text for s in draw(ours)[-1]), step  # type: ignore[attr-defined]
        # a line filter of the app's that is not one of Textual's own (each segment alone): the lines are
        # filtered whole, after the table drew them, as Textual does
        ours.styles.border = theirs.styles.border = ("none", "red")

        class Shout(LineFilter):
            def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
                return [Segment(s.text.upper(), s.style) for s in segments]

        app._filters.append(Shout())
        for table in (ours, theirs):
            table.refresh()
        await pilot.pause()
        assert ours._bare_box() and ours._filters == ((), None)
        assert draw(ours) == draw(theirs)
        header = "".join(s.text for s in draw(ours)[0])  # type: ignore[attr-defined]
        assert header == header.upper() and any(c.isalpha() for c in header), header


async def test_cells_render_as_datatable_renders_them() -> None:
    """render_cell (inlined, with a shortcut for a one-line Text that fits) against the renderables
    DataTable renders a cell with, at many widths, plain and under a cursor's styles."""
    from rich.padding import Padding
    from rich.style import Style
    from textual.renderables.styled import Styled
    from textual.strip import Strip

    app = Tables()
    async with app.run_test(size=(100, 30)):
        console, options = app.console, app.console_options
        cells = [c for k in range(12) for c in odd_cells(k)]
        cells += [c for i in range(8) for c in gpu_cells(gpu(i, 90000.0 + i), COLORS, NAME_WIDTH)]
        cells += [c for k in range(9) for c in proc_cells(proc(k), COLORS)]
        cells += [Text("x", style="on red", justify=j) for j in ("left", "center", "right", "default", "full")]
        cells += [Text("  pad  ", justify=j, style="underline") for j in ("left", "center", "right")]
        cells += [Text("", justify=j, style="red") for j in ("left", "center", "right", "default", None)]
        cells += [Text("", justify=j) for j in ("left", "default")]
        row = Style(color="#e0e0e0", bgcolor="#1e1e1e", meta={"row": 3, "column": 1})
        cursor = Style(color="#000000", bgcolor="#ffa62b", bold=True)
        cursor_post = Style.from_color(cursor.color) + Style.from_color(bgcolor=cursor.bgcolor)
        looks = [(row, Style()), (row + cursor, cursor_post)]
        checked = 0
        for cell in map(keyed_table.as_text, cells):
            for width in (1, 2, 3, 4, 5, 9, 13, 30):
                for style, post in looks:
                    ours = Strip(keyed_table.render_cell(console, options, cell, width, style, post))
                    theirs = Strip(console.render_lines(
                        Styled(Padding(cell, (0, 1)), pre_style=style, post_style=post),
                        options.update_dimensions(width, 1).update(no_wrap=True))[0])
                    assert ours.cell_length == width
                    assert list(ours.simplify()) == list(theirs.simplify()), (cell, width)
                    checked += 1
        assert checked > 2000


async def test_incremental_sync_draws_what_a_fresh_table_draws() -> None:
    app = Tables()
    async with app.run_test(size=(110, 30)) as pilot:
        t1, t2 = app.query_one("#t1", Table), app.query_one("#t2", Table)
        app.set_focus(None)  # focus restyles a table's header: keep both alike
        rows: list[Row] = [(str(k), odd_cells(k)) for k in range(12)]
        t1.sync(rows)
        await pilot.pause()
        draw(t1)  # fill the caches with the first values
        changed: list[Row] = [(key, [*cells[:2], Text(f"new {key}", style="red"), *cells[3:]]) if int(key) % 3 == 0
                              else (key, cells) for key, cells in rows]
        rendered: list[str] = []
        render_cell = keyed_table.render_cell

        def counting(*args: object) -> object:
            rendered.append(args[2].plain)  # type: ignore[attr-defined]
            return render_cell(*args)  # type: ignore[arg-type]

        keyed_table.render_cell = counting  # type: ignore[assignment]
        try:
            t1.sync(changed)
            await pilot.pause()
            draw(t1)
        finally:
            keyed_table.render_cell = render_cell
        # only the changed cells were rendered again (the rows are 1 header + 8 visible)
        assert sorted(rendered) == ["new 0", "new 3", "new 6"]
        t2.sync(changed)
        await pilot.pause()
        assert draw(t1) == draw(t2)
        # a cell restyled with the same characters is a change too (a theme switch recolours cells)
        t1.update_cell("4", "a", Text("4", justify="right", style="red"))
        assert draw(t1) != draw(t2)
        # a cursor and a cell updated outside sync: still the same as a fresh table
        t1.update_cell("4", "a", Text("upd"))
        t2.update_cell("4", "a", Text("upd"))
        for table in (t1, t2):
            table.show_cursor = True
            table.move_cursor(row=4)
            table.refresh()
        await pilot.pause()
        assert draw(t1) == draw(t2)
        assert "upd" in "".join(seg.text for seg in draw(t1)[5])  # type: ignore[attr-defined]


async def test_keys_and_clicks_move_the_cursor_or_scroll() -> None:
    app = Tables()
    async with app.run_test(size=(110, 40)) as pilot:
        procs, t1 = app.query_one(ProcTable), app.query_one("#t1", Table)
        procs.sync([(str(k), proc_cells(proc(k), COLORS)) for k in range(30)])
        t1.sync([(str(k), odd_cells(k)) for k in range(30)])
        await pilot.pause()
        visible = procs.scrollable_content_region.height - 1  # under the header (and over a scrollbar)
        procs.focus()
        for _ in range(visible + 2):
            await pilot.press("down")
        assert procs.cursor_row == visible + 2
        assert procs.scroll_y == 3  # the cursor's row is the last one shown
        await pilot.press("home")
        assert (procs.cursor_row, procs.scroll_y) == (0, 0)
        await pilot.press("end")
        assert (procs.cursor_row, procs.scroll_y) == (29, 30 - visible)
        await pilot.click(procs, offset=(5, 2))  # the second row shown
        assert procs.cursor_row == 30 - visible + 1
        # a rebuild (another order) keeps the cursor on its row and the scroll position
        key = procs.row_keys[procs.cursor_row]
        procs.sync([(str(k), proc_cells(proc(k), COLORS)) for k in reversed(range(30))])
        assert procs.row_keys[procs.cursor_row] == key and procs.scroll_y == 30 - visible
        # without a cursor the keys scroll
        t1.focus()
        await pilot.press("down", "down")
        assert t1.scroll_y == 2 and t1.cursor_row == 0


async def test_live_events_redraw_once_per_burst_and_nothing_between() -> None:
    from kimitui.core.events import HostSample
    from kimitui.core.session import Session
    from kimitui.tui.widgets.gpu_table import GpuTable as Gpus

    session = Session()
    app = ProbedApp(session, host_label="live")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        frames = app.frames
        for seq in range(1, 21):  # a burst: published in one go, drawn once
            session.publish(HostSample(t=1000.0 + seq, host="live", seq=seq,
                                       gpus=[gpu(i, 1000.0 * seq) for i in range(2)], procs=[proc(1)]))
        await pilot_until(pilot, lambda: len(app.query_one(Gpus).row_keys) == 2, "the 2 GPU rows")
        assert app.query_one(Gpus).cell_text("1", "memory").endswith("19.5/95.6 GiB")
        assert app.frames == frames + 1
        for _ in range(5):  # nothing new: nothing drawn
            await pilot.pause()
        assert app.frames == frames + 1


def test_memory_history_lines_and_colours() -> None:
    from textual.content import Span

    from kimitui.core.events import HostSample
    from kimitui.core.state import SessionState, fold
    from kimitui.tui.widgets.memory_history import history_content

    state = SessionState()
    for seq, used in enumerate((10000.0, 50000.0, 95000.0)):
        fold(state, HostSample(t=1000.0 + seq, host="h", seq=seq, procs=[],
                               gpus=[gpu(0, used), GpuSample(1, "u1", "n", mem_used_mib=None, mem_total_mib=None)]))
    content = history_content(state, 16)
    # right-aligned sparklines scaled to the GPU's total, each cell coloured by its own level; a sample
    # without a reading is a muted dot (a gap on the same time axis), and no value is shown for now
    assert content.plain.split("\n") == ["memory history (GiB)", " 0   ▁▄█  92.8", " 1   ···     -"]
    assert list(content.spans) == [
        Span(0, 20, "$text-muted"), Span(21, 24, "$text-muted"), Span(24, 27, "$success"),
        Span(27, 28, "$warning"), Span(28, 29, "$error"), Span(36, 39, "$text-muted"), Span(39, 41, "$success"),
        Span(41, 44, "$text-muted")]


def test_sparkline_levels_clamps_and_readings_that_are_not_numbers() -> None:
    """Eight levels from 0 to the top, a reading above the top full, below 0 empty, a small one never
    blank, no reading or a NaN (a driver's or a JSON field's) a muted dot, not an exception."""
    from kimitui.tui import fmt

    top = 8.0
    assert fmt.spark_cells([0.0, 0.1, 1.0, 4.0, 7.9, 8.0, 20.0, -3.0], top, 8) == " ▁▁▄███ "
    assert fmt.spark_cells([None, float("nan"), 4.0], top, 5) == f"  {fmt.NO_READING * 2}▄"
    assert fmt.spark_cells([2.0, 4.0], 0.0, 2) == "▄█"  # no total: scaled to the highest reading


def test_memory_history_kept_lines_are_the_lines_made_anew() -> None:
    """The widget keeps each GPU's line between frames (``made``): through a history that fills, holds a
    steady figure, changes, loses readings, changes its total and is drawn at two widths, every kept line is
    the line made from scratch; and a steady GPU's line is the very line kept."""
    from kimitui.core.events import HostSample
    from kimitui.core.state import HISTORY_POINTS, SessionState, fold
    from kimitui.tui.widgets.memory_history import history_parts

    def used(seq: int, i: int) -> float | None:
        if i == 1:
            return 60000.0  # steady throughout
        if i == 2 and seq % 37 in (5, 6):
            return None  # no reading
        return 20000.0 + (seq // 50) * 7000.0 + (seq % 7) * 900.0 * (i % 3)

    state = SessionState()
    made: dict[int, dict[int, tuple[tuple[object, ...], tuple[object, ...], tuple[object, ...]]]] = {36: {}, 20: {}}
    kept = 0
    for seq in range(HISTORY_POINTS + 120):
        total = 97887.0 if seq < 200 else 143771.0
        fold(state, HostSample(t=1000.0 + seq / 2, host="h", seq=seq, procs=[], gpus=[
            GpuSample(i, f"u{i}", "n", mem_used_mib=used(seq, i), mem_total_mib=total) for i in range(4)]))
        for width in (36, 20):
            before = dict(made[width])
            lines = history_parts(state, width, made[width])
            assert lines == history_parts(state, width), (seq, width)
            kept += sum(1 for i, line in enumerate(lines[1:]) if i in before and before[i][2] is line)
    assert kept > 2 * HISTORY_POINTS  # GPU 1, steady: its line kept at each width


async def test_fraction_bar_draws_what_progress_bar_draws() -> None:
    from textual.containers import Horizontal
    from textual.widgets import ProgressBar

    from kimitui.tui.views.macro_progress import FractionBar, FractionFill

    class Bars(App[None]):
        CSS = "Horizontal { height: 1; width: 57; } ProgressBar { width: 1fr; } ProgressBar Bar { width: 1fr; }"

        def compose(self) -> ComposeResult:
            with Horizontal():
                yield ProgressBar(total=1, show_eta=False)
            with Horizontal():
                yield FractionBar()

    app = Bars()
    async with app.run_test(size=(80, 4)) as pilot:
        theirs, ours = app.query_one(ProgressBar), app.query_one(FractionBar)
        for total, progress in ((1.0, 0.0), (7.0, 1.0), (3.0, 1.5), (40.0, 39.0), (40.0, 39.9), (3.0, 3.0), (0.0, 0.0)):
            theirs.update(total=total, progress=progress)
            ours.update(total=total, progress=progress)
            await pilot.pause()
            assert ours.percentage == theirs.percentage
            bar, fill = theirs.query_one("#bar").render(), ours.query_one(FractionFill).render()
            assert ours.query_one(FractionFill).size == theirs.query_one("#bar").size
            assert vars(fill) == vars(bar), (total, progress)  # range and styles
            assert str(ours.query_one("Label").render()) == str(theirs.query_one("#percentage").render())


async def test_memory_history_repaints_only_the_lines_that_changed() -> None:
    from kimitui.core.events import HostSample
    from kimitui.core.state import SessionState, fold
    from kimitui.tui.widgets.memory_history import MemoryHistory

    class History(App[None]):
        CSS = "MemoryHistory { width: 34; }"

        def compose(self) -> ComposeResult:
            yield MemoryHistory()

    state = SessionState()
    app = History()
    async with app.run_test(size=(60, 12)) as pilot:
        history = app.query_one(MemoryHistory)
        assert [history.render_line(y).text.rstrip() for y in (0, 1)] == ["memory history (GiB)", "waiting for samples"]
        refreshed: list[object] = []
        refresh = history.refresh

        def counting(*regions: object, **kwargs: object) -> object:
            refreshed.append(regions or kwargs)
            return refresh(*regions, **kwargs)  # type: ignore[arg-type]

        for seq in range(30):  # more samples than the sparkline's 23 cells
            # GPU 0 moves in the last sample; GPU 1 holds the same memory throughout, its line stays as it is
            used = 60000.0 if seq == 29 else 10000.0
            fold(state, HostSample(t=1000.0 + seq, host="h", seq=seq, procs=[], gpus=[gpu(0, used), gpu(1, 2048.0)]))
            if seq == 29:
                before = [history.render_line(y) for y in range(3)]
                history.refresh = counting  # type: ignore[method-assign]
            history.show(state)
            await pilot.pause()
        after = [history.render_line(y) for y in range(3)]
        assert [strip.text.split()[-1] for strip in after[1:]] == ["58.6", "2.0"]
        assert after[0] is before[0] and after[2] is before[2]  # the header and GPU 1: not drawn again
        assert after[1] is not before[1]
        assert refreshed == [(Region(0, 1, 34, 1),)]  # only GPU 0's line is repainted


async def test_part_lines_draw_what_a_static_with_the_same_content_draws() -> None:
    """PartLines makes each part's segment from its style resolved once per look: the same cells as a Static
    showing Content.assemble of the parts, across themes, widths (cut with an ellipsis) and a restyle."""
    from textual.content import Content
    from textual.widget import Widget
    from textual.widgets import Static

    from kimitui.tui.widgets.part_lines import ELLIPSIS, PartLines, line_content

    lines = [
        (("ph ", "$text-muted"), ("M   C", "bold $accent"), ("    GiB", "$text-muted")),
        ("plain ", ("warn", "$warning on $panel"), "", (" err", "italic $error"), " 92.8"),
        ((" 0 ", "$text-muted"), ("▁▂▃", "$success"), ("▅▆", "$warning"), ("█", "$error"), "  ·"),
    ]

    class Both(App[None]):
        CSS = "PartLines, Static { width: 40; height: 3; color: $foreground; background: $surface; }"

        def compose(self) -> ComposeResult:
            yield PartLines(id="ours")
            yield Static(Content("\n").join([line_content(line) for line in lines]), id="theirs")

    def cells(widget: Widget) -> list[list[tuple[str, object]]]:
        """Each cell as it looks: a blank's foreground is not seen (the padding after the text may carry
        the widget's colour or none), unless it is underlined, struck through or reversed; the Static's
        offsets for text selection (its meta) are not drawn."""
        def look(char: str, style: Style) -> tuple[str, object]:
            style = style.clear_meta_and_links()
            if char == " " and not (style.underline or style.strike or style.reverse):
                return char, style.bgcolor
            return char, style
        return [[look(char, seg.style or Style()) for seg in strip for char in seg.text]
                for strip in widget.render_lines(Region(0, 0, widget.size.width, 3))]

    app = Both()
    async with app.run_test(size=(60, 8)) as pilot:
        ours, theirs = app.query_one("#ours", PartLines), app.query_one("#theirs", Static)
        ours.set_lines(lines)
        await pilot.pause()
        compared = 0
        for theme in ("textual-dark", "textual-light", "nord"):
            app.theme = theme
            await pilot.pause()
            assert cells(ours) == cells(theirs), theme
            compared += 1
        ours.styles.color = theirs.styles.color = "red"  # a restyle resolves the parts' styles again
        await pilot.pause()
        assert cells(ours) == cells(theirs)
        assert ours.render().plain == theirs.render().plain  # type: ignore[union-attr]
        assert ours._bare_box()  # drawn past Textual's styles cache (bare_lines.py) ...
        for widget in (ours, theirs):  # ... and through it once boxed
            widget.styles.padding = (0, 2)
            widget.styles.border_left = ("vkey", "blue")
            widget.styles.width = 46
        await pilot.pause()
        assert not ours._bare_box()
        assert cells(ours) == cells(theirs)
        assert "".join(char for char, _ in cells(ours)[1]).startswith("▏  plain warn")
        for widget in (ours, theirs):
            widget.styles.padding = (0, 0)
            widget.styles.border_left = ("none", "blue")
            widget.styles.width = 40
        await pilot.pause()
        assert ours._bare_box() and cells(ours) == cells(theirs)
        assert compared == 3
        # too long for the widget: cut one cell short with an ellipsis in the style of the last cell kept
        ours.overflow_ellipsis = True
        ours.styles.width = 10
        await pilot.pause()
        strip = ours.render_line(1)
        assert strip.text == "plain warn"[:9] + ELLIPSIS and strip.cell_length == 10
        assert list(strip)[-1].text == "war" + ELLIPSIS  # one segment: the same style as "war"


async def test_the_same_processes_again_are_not_sorted_or_synced() -> None:
    """A sample whose processes read as the last one's (new objects, the same figures) leaves the process
    table alone: the fold says nothing changed (issue 36 item 2); one process changed, or one more came, and
    the table shows it, making the changed row's cells only."""
    from dataclasses import replace

    from kimitui.core.events import HostSample
    from kimitui.core.state import SessionState, fold
    from kimitui.tui.widgets import proc_table
    from kimitui.tui.widgets.proc_table import ProcTable

    app = Tables()
    async with app.run_test(size=(110, 60)) as pilot:
        table = app.query_one("#procs", ProcTable)
        synced: list[int] = []
        sync = table.sync

        def counting(rows: list[Row]) -> None:
            synced.append(len(rows))
            sync(rows)

        table.sync = counting  # type: ignore[method-assign]
        made: list[int] = []
        cells = proc_table.proc_cells

        def making(p: ProcSample, colors: object) -> list[object]:
            made.append(p.pid)
            return cells(p, colors)  # type: ignore[arg-type]

        proc_table.proc_cells = making  # type: ignore[assignment]
        try:
            state = SessionState()
            for seq, procs in enumerate((
                    [proc(k) for k in range(1, 5)],
                    [proc(k) for k in range(1, 5)],  # a new sample, the same processes
                    [replace(proc(k), gpu_mem_mib={0: 9999.0}) if k == 3 else proc(k) for k in range(1, 5)],
                    [replace(proc(k), gpu_mem_mib={0: 9999.0}) if k == 3 else proc(k) for k in (1, 2, 3, 4, 6)])):
                fold(state, HostSample(float(seq), seq=seq, procs=procs))
                table.show(state, COLORS)
        finally:
            proc_table.proc_cells = cells  # type: ignore[assignment]
        await pilot.pause()
        assert synced == [4, 4, 5]
        # each row made again only when its process changed
        assert sorted(made[:4]) == [1001, 1002, 1003, 1004] and made[4:] == [1003, 1006]
        assert "9.76" in table.cell_text("1003:5003", "memory")
