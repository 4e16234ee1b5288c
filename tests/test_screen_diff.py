"""The screen diff (kimitui/tui/screen_diff.py): what it writes leaves the terminal as Textual's own updates
would, in fewer bytes."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from textual._compositor import ChopsUpdate, LayoutUpdate

from kimitui.core.events import GpuSample, HostSample, ProcSample
from kimitui.core.session import QueueSource, Session
from kimitui.tui import app as app_module
from kimitui.tui.screen_diff import ScreenShadow, minimal_update
from tests.app_probe import ProbedApp
from tests.screen_emulator import Terminal
from tests.waiting import pilot_until

SIZE = (120, 40)


class Capturing(ProbedApp):
    """The dashboard, headless, keeping every update Textual hands to the terminal."""

    CSS_PATH = str(Path(app_module.__file__).with_name("app.tcss"))

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.updates: list[object] = []

    def _display(self, screen, renderable):  # type: ignore[no-untyped-def]
        if renderable is not None:
            self.updates.append(renderable)
        super()._display(screen, renderable)


def chops(app: Capturing) -> int:
    """The partial updates handed to the terminal so far."""
    return sum(isinstance(u, ChopsUpdate) for u in app.updates)


def sample(seq: int) -> HostSample:
    gpus = [GpuSample(i, f"GPU-{i}", "NVIDIA H200", mem_used_mib=90000.0 + (seq * 37 + i) % 900,
                      mem_total_mib=143771.0, util_pct=float((seq * 7 + i) % 100), temp_c=50.0 + seq % 3,
                      power_w=300.0 + seq % 50, sm_clock_mhz=1980.0) for i in range(8)]
    procs = [ProcSample(pid=1000 + k, start_time=5000 + k, user="vllm", gpu_mem_mib={k % 8: 1400.0 + seq},
                        kind="cuda", cmdline=f"python3 worker {k}", state="S", gpus=[k % 8]) for k in range(16)]
    return HostSample(t=1000.0 + seq / 2, host="h", seq=seq, gpus=gpus, procs=procs)


async def test_the_diff_leaves_the_screen_as_textual_would() -> None:
    source = QueueSource()
    app = Capturing(Session(), sources=[source], host_label="h")
    async with app.run_test(size=SIZE) as pilot:
        for seq in range(1, 9):
            before = chops(app)
            source.put(sample(seq))
            # each sample's new figures reach the terminal as a partial update (the first may be the layout)
            await pilot_until(pilot, lambda seq=seq, before=before: app.session.state.sample_seq == seq
                              and (chops(app) > before or (seq == 1 and app.frames > 0)), f"sample {seq} drawn")
        for view in ("cleanup", "dashboard"):  # another tab: a bigger partial update, and back
            before = len(app.updates)
            app.action_show_view(view)
            await pilot_until(pilot, lambda before=before: len(app.updates) > before, f"the {view} tab drawn")
        console = Console(color_system="256", force_terminal=True, width=SIZE[0], height=SIZE[1])
        whole, diffed = Terminal(*SIZE), Terminal(*SIZE)
        shadow = ScreenShadow()
        sent_whole = sent_diffed = partial = 0
        for update in app.updates:
            if not isinstance(update, LayoutUpdate | ChopsUpdate):
                continue
            before = update.render_segments(console)
            after = minimal_update(shadow, update, SIZE, console).render_segments(console)  # type: ignore[attr-defined]
            whole.feed(before)
            diffed.feed(after)
            assert diffed.cells == whole.cells, f"update {partial}: the screens differ:\n{diffed.text()}"
            if isinstance(update, ChopsUpdate):
                partial += 1
                sent_whole += len(before.encode())
                sent_diffed += len(after.encode())
    assert partial >= 7  # one a sample after the first, waited for above
    assert "GPU" in whole.text()
    assert sent_diffed * 3 < sent_whole, (sent_diffed, sent_whole)


def test_a_wide_character_is_sent_whole() -> None:
    from rich.segment import Segment
    from rich.style import Style
    from textual.geometry import Region
    from textual.strip import Strip

    console = Console(color_system="256", force_terminal=True, width=10, height=1)
    red = Style(color="red")
    shadow = ScreenShadow()
    first = LayoutUpdate([[Strip([Segment("ab中cdef  ", red)])]], Region(0, 0, 10, 1))
    minimal_update(shadow, first, (10, 1), console)
    chops = ChopsUpdate([{0: Strip([Segment("ab文cdef  ", red)])}], [(0, 0, 10)], [[10]])
    out = minimal_update(shadow, chops, (10, 1), console).render_segments(console)  # type: ignore[attr-defined]
    term = Terminal(10, 1)
    term.feed(first.render_segments(console))
    term.feed(out)
    assert term.text() == "ab文cdef  "
    assert "\x1b[1;3H" in out and "cdef" not in out


def test_cursor_moves_are_the_shortest_and_land_where_meant() -> None:
    from rich.segment import Segment
    from rich.style import Style
    from textual.geometry import Region
    from textual.strip import Strip

    from kimitui.tui.screen_diff import cursor_move

    assert cursor_move(None, 61, 6) == "\x1b[7;62H"
    assert cursor_move((64, 5), 62, 6) == "\x1b[B\b\b"  # one down, two back
    assert cursor_move((64, 5), 60, 9) == "\x1b[10;61H"  # as short as the relative one: absolute
    assert cursor_move((100, 12), 0, 13) == "\r\x1b[B"
    assert cursor_move((5, 9), 0, 0) == "\x1b[H"
    # One figure in each of 8 rows of a column (the GPU table's utilisation): each reached from the one above
    console = Console(color_system="256", force_terminal=True, width=20, height=8)
    red = Style(color="red")
    shadow = ScreenShadow()
    first = LayoutUpdate([[Strip([Segment(f"gpu {i}  41%".ljust(20), red)])] for i in range(8)], Region(0, 0, 20, 8))
    minimal_update(shadow, first, (20, 8), console)
    lines = [{0: Strip([Segment(f"gpu {i}  4{i}%".ljust(20), red)])} for i in range(8)]
    chops = ChopsUpdate(lines, [(y, 0, 20) for y in range(8)], [[20]] * 8)
    out = minimal_update(shadow, chops, (20, 8), console).render_segments(console)  # type: ignore[attr-defined]
    term = Terminal(20, 8)
    term.feed(first.render_segments(console))
    term.feed(out)
    assert term.text().splitlines() == [f"gpu {i}  4{i}%".ljust(20) for i in range(8)]
    # rows 0 and 2-7 change (row 1 reads 41% still): one absolute move, then down and back a cell each
    assert out == "\x1b[1;9H\x1b[31m0\x1b[2B\b2" + "".join(f"\x1b[B\b{i}" for i in range(3, 8)) + "\x1b[0m", repr(out)
    # after a write to the last column the cursor's place is not sure: the next move is absolute
    wide = ChopsUpdate([{0: Strip([Segment("gpu 0  40%".ljust(19) + "x", red)])},
                        {0: Strip([Segment("gpu 1  40%".ljust(19) + "y", red)])}, *lines[2:]],
                       [(0, 0, 20), (1, 0, 20)], [[20]] * 8)
    out = minimal_update(shadow, wide, (20, 8), console).render_segments(console)  # type: ignore[attr-defined]
    term.feed(out)
    assert term.text().splitlines()[:2] == ["gpu 0  40%".ljust(19) + "x", "gpu 1  40%".ljust(19) + "y"]
    assert "\x1b[2;" in out, repr(out)


def test_a_strip_diffed_by_its_segments_sends_what_its_cells_would() -> None:
    """A chop whose strip has the segments of the one the row holds, but a few (a table row with one new
    figure), is diffed from those segments alone (_changed_window): what is written is byte for byte what
    diffing every cell writes, through 400 random updates of segments that keep or change their width, wide
    characters, combining marks, off-screen ends and control segments."""
    import random

    from rich.segment import Segment
    from rich.style import Style
    from textual.geometry import Region
    from textual.strip import Strip

    from kimitui.tui import screen_diff

    rng = random.Random(7)
    width, height = 30, 4
    console = Console(color_system="256", force_terminal=True, width=width, height=height)
    styles = [Style(color="red"), Style(color="red", bold=True), Style(bgcolor="blue"), None,
              Style(color="red", meta={"row": 1})]
    texts = ["ab", "cd", "42", "中", "文", "e\u0301", "\u0301x", "    ", "█▅", "x"]

    def segment() -> Segment:
        return Segment(rng.choice(texts), rng.choice(styles))

    rows = [[segment() for _ in range(rng.randint(8, 14))] for _ in range(height)]
    first = LayoutUpdate([[Strip(row)] for row in rows], Region(0, 0, width, height))
    by_window, by_cells = ScreenShadow(), ScreenShadow()
    terminal = Terminal(width, height)
    for shadow in (by_window, by_cells):
        minimal_update(shadow, first, (width, height), console)
    terminal.feed(first.render_segments(console))
    windowed = 0
    real_window = screen_diff._changed_window
    for step in range(400):
        y = rng.randrange(height)
        row = rows[y]
        kind = rng.random()
        if kind < 0.6:  # one or two segments anew, as wide or not
            for _ in range(rng.randint(1, 2)):
                row[rng.randrange(len(row))] = segment()
        elif kind < 0.7:
            row.insert(rng.randrange(len(row)), segment())
        elif kind < 0.75:
            row[rng.randrange(len(row))] = Segment("\x1b[5n", None, [(1,)])  # a control segment
        elif kind < 0.8:
            rows[y] = row = [segment() for _ in range(rng.randint(8, 14))]
        # else: the same segments in a new strip
        update = ChopsUpdate([{0: Strip(list(r))} if i == y else {} for i, r in enumerate(rows)],
                             [(y, 0, width)], [[width]] * height)
        windows: list[object] = []

        def counted(a: Strip, b: Strip, windows: list[object] = windows) -> object:
            windows.append(real_window(a, b))
            return windows[-1]

        screen_diff._changed_window = counted  # type: ignore[assignment]
        try:
            out = minimal_update(by_window, update, (width, height), console).render_segments(console)  # type: ignore[attr-defined]
        finally:
            screen_diff._changed_window = real_window
        screen_diff._changed_window = lambda a, b: screen_diff.WHOLE  # type: ignore
        try:
            whole = minimal_update(by_cells, update, (width, height), console).render_segments(console)  # type: ignore[attr-defined]
        finally:
            screen_diff._changed_window = real_window
        assert out == whole, (step, out, whole)
        assert by_window.rows == by_cells.rows, step
        windowed += any(w not in (None, screen_diff.WHOLE) for w in windows)
        rows[y] = [s for s in rows[y] if not s.control]
    assert windowed >= 40  # the windowed path taken often (61 of 400 with this seed)


def test_figures_in_columns_are_written_down_each_column() -> None:
    """Three figures a row in one look (a GPU's memory, power and history value), 8 rows: written column by
    column (a step down and back between them) when that is shorter than row by row; the screen is the same."""
    from rich.segment import Segment
    from rich.style import Style
    from textual.geometry import Region
    from textual.strip import Strip

    console = Console(color_system="256", force_terminal=True, width=60, height=8)
    grey = Style(color="grey70")

    def line(i: int, a: str) -> Strip:
        return Strip([Segment(f"gpu {i}  {a}0.1 GiB".ljust(25) + f"{a}50W".ljust(25) + f"9{a}.5".ljust(10), grey)])

    first = LayoutUpdate([[line(i, "1")] for i in range(8)], Region(0, 0, 60, 8))
    shadow = ScreenShadow()
    minimal_update(shadow, first, (60, 8), console)
    chops = ChopsUpdate([{0: line(i, "2")} for i in range(8)], [(y, 0, 60) for y in range(8)], [[60]] * 8)
    out = minimal_update(shadow, chops, (60, 8), console).render_segments(console)  # type: ignore[attr-defined]
    term = Terminal(60, 8)
    term.feed(first.render_segments(console))
    term.feed(out)
    assert [row.rstrip() for row in term.text().splitlines()] == [line(i, "2").text.rstrip() for i in range(8)]
    # down the first column, then the second, then the third: one absolute move a column
    assert out.count("\x1b[B\b") == 21 and out.count("H") == 3, repr(out)
    assert len(out) < 3 * 8 * 9, len(out)  # row by row: an absolute move to each row's first figure, steps right


def test_a_full_update_is_written_once_a_look_and_then_only_what_changed() -> None:
    """The first full update writes every cell (the shadow knows none), each look's SGR once per run of it
    rather than Textual's reset and SGR per segment; the next (a layout that changed as the tables filled, a
    screen pushed) only its changed cells; the terminal left as Textual's own writes would leave it. After a
    suspend (``forget``) every cell is written again; a full update of a part of an unknown screen is sent as
    it is."""
    from rich.segment import Segment
    from rich.style import Style
    from textual.geometry import Region
    from textual.strip import Strip

    console = Console(color_system="256", force_terminal=True, width=30, height=4)
    red, blue = Style(color="red", bgcolor="black"), Style(color="blue", bgcolor="black")

    def frame(util: str) -> LayoutUpdate:
        return LayoutUpdate([[Strip([Segment(f"gpu {i}", red), Segment(f"  {util}%".ljust(24), blue)])]
                             for i in range(4)], Region(0, 0, 30, 4))

    def written(shadow: ScreenShadow, update: LayoutUpdate) -> str:
        out = minimal_update(shadow, update, (30, 4), console)
        assert out is not update
        return out.render_segments(console)  # type: ignore[attr-defined]

    shadow, term, textual = ScreenShadow(), Terminal(30, 4), Terminal(30, 4)
    first = written(shadow, frame("41"))
    term.feed(first)
    textual.feed(frame("41").render_segments(console))
    assert term.cells == textual.cells and shadow.complete
    assert len(first) < len(frame("41").render_segments(console)), (len(first), repr(first))
    assert written(shadow, frame("41")) == ""
    second = written(shadow, frame("47"))
    term.feed(second)
    textual.feed(frame("47").render_segments(console))
    assert term.cells == textual.cells and len(second) < 40, repr(second)
    shadow.forget()
    assert "gpu 0" in written(shadow, frame("47"))
    partial = LayoutUpdate([[Strip([Segment("x", red)])]], Region(3, 1, 1, 1))
    fresh = ScreenShadow()
    assert minimal_update(fresh, partial, (30, 4), console) is partial and not fresh.complete


def test_a_partial_update_before_the_first_frame_writes_nothing() -> None:
    """Python 3.12's asyncio gets a partial update of the first widgets out before Textual's first (full) frame,
    which then paints everything again (3.3 KB of a 120x40 start, issue 37): before any full update, and after
    the terminal was handed away (a suspend), a partial one writes nothing; the full one that follows shows it."""
    from rich.segment import Segment
    from rich.style import Style
    from textual.geometry import Region
    from textual.strip import Strip

    console = Console(color_system="256", force_terminal=True, width=12, height=2)
    red = Style(color="red")
    shadow = ScreenShadow()
    early = ChopsUpdate([{0: Strip([Segment("connecting  ", red)])}, {}], [(0, 0, 12)], [[12], []])
    assert minimal_update(shadow, early, (12, 2), console).render_segments(console) == ""  # type: ignore[attr-defined]
    first = LayoutUpdate([[Strip([Segment("connected   ", red)])], [Strip([Segment("GPU 0  40%  ", red)])]],
                         Region(0, 0, 12, 2))
    out = minimal_update(shadow, first, (12, 2), console).render_segments(console)  # type: ignore[attr-defined]
    term = Terminal(12, 2)
    term.feed(out)
    assert term.text().splitlines() == ["connected   ", "GPU 0  40%  "]
    later = ChopsUpdate([{}, {0: Strip([Segment("GPU 0  41%  ", red)])}], [(1, 0, 12)], [[], [12]])
    out = minimal_update(shadow, later, (12, 2), console).render_segments(console)  # type: ignore[attr-defined]
    assert out == "\x1b[2;9H\x1b[31m1\x1b[0m"  # drawn once the screen is ours: the one cell that changed
    shadow.forget()  # suspended: the terminal was another program's
    assert minimal_update(shadow, later, (12, 2), console).render_segments(console) == ""  # type: ignore[attr-defined]
