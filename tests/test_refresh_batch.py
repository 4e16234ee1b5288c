"""Widgets repainted in one redraw tell the screen from the redraw (kimitui/tui/widgets/refresh_batch.py):
no Prompt wakes their own tasks, the screen gets one Update each, and what they show reaches the screen."""

from __future__ import annotations

import asyncio
from collections import Counter

from textual import messages
from textual.message import Message
from textual.message_pump import MessagePump

from kimitui.core.events import GpuSample, HostSample, ProcSample
from kimitui.core.session import QueueSource, Session
from kimitui.tui.widgets.gpu_table import GpuTable
from kimitui.tui.widgets.refresh_batch import _batch, _paint_only, refresh_batch
from kimitui.tui.widgets.status_bar import StatusBar
from tests.app_probe import ProbedApp
from tests.waiting import pilot_until


def sample(seq: int) -> HostSample:
    gpus = [GpuSample(i, f"GPU-{i}", "NVIDIA H200", mem_used_mib=90000.0 + seq * 100, mem_total_mib=143771.0,
                      util_pct=float(seq % 100), temp_c=50.0, power_w=300.0 + seq, sm_clock_mhz=1980.0)
            for i in range(4)]
    procs = [ProcSample(pid=1000, start_time=5000, user="vllm", gpu_mem_mib={0: 1400.0}, kind="cuda",
                        cmdline="python3 worker", state="S", gpus=[0])]
    return HostSample(t=1000.0 + seq, host="h", seq=seq, gpus=gpus, procs=procs)


async def test_a_redraw_tells_the_screen_without_waking_each_widget() -> None:
    source = QueueSource()
    app = ProbedApp(Session(), sources=[source], host_label="h")
    posted: Counter[tuple[str, str]] = Counter()
    woken: list[str] = []
    by: list[str] = []
    """Who posted the screen the GPU table's repaints."""
    """Widgets prompted from inside a redraw's batch when all their idle had to do was repaint."""
    original = MessagePump.post_message

    def counting(pump: MessagePump, message: Message) -> bool:
        posted[type(pump).__name__, type(message).__name__] += 1
        if isinstance(message, messages.Prompt) and _batch.get() is not None and _paint_only(pump):  # type: ignore[arg-type]
            woken.append(type(pump).__name__)
        if isinstance(message, messages.Update) and message.widget is table:
            by.append("its own idle" if asyncio.current_task() is table._task else "the redraw")
        return original(pump, message)

    async with app.run_test(size=(120, 40)) as pilot:
        for seq in (1, 2):
            source.put(sample(seq))
        await pilot_until(pilot, lambda: app.session.state.sample_seq == 2 and app.frames > 0, "samples 1 and 2 drawn")
        await pilot.pause()
        table = app.query_one(GpuTable)
        MessagePump.post_message = counting  # type: ignore[method-assign]
        try:
            # A frame in which Textual also lays the screen out (a late footer, a header line that grew) leaves
            # the table to its idle, in Textual's order, by design: the next sample's frame is a plain repaint.
            for seq in range(3, 9):
                source.put(sample(seq))
                # the new power figure, as the screen renders it
                await pilot_until(pilot, lambda s=seq: f"{300 + s}W" in table.render_line(1).text,
                                  f"sample {seq}'s power figure drawn")
                await pilot.pause()
                if "the redraw" in by:
                    break
        finally:
            MessagePump.post_message = original  # type: ignore[method-assign]
        # What the batch promises: no widget whose idle would only repaint is woken from the redraw. (A layout
        # Textual runs meanwhile, as a loaded machine's late footer asks for, still prompts from outside the
        # batch: that is Textual's order, not the redraw's, and is not counted.)
        assert woken == [], posted
        assert "the redraw" in by, (by, posted)  # a sample's row reached the screen from the redraw's batch
        assert posted["BandScreen", "Update"] >= 2, posted  # the GPU table and the header, at least
        strips = app.screen._compositor.render_strips()
        screen_text = "\n".join(strip.text for strip in strips)
        assert f"{300 + seq}W" in screen_text and f"events {app.session.state.events_folded}" in screen_text


async def test_only_a_plain_repaint_is_batched() -> None:
    """A plain repaint inside a batch is posted to the screen when the batch ends, not from a Prompt; a
    layout, or a callback asked for next (run from the idle), still prompts the widget; outside a batch a
    repaint prompts it, as Textual does."""
    app = ProbedApp(Session(), host_label="h")
    ran: list[str] = []
    async with app.run_test(size=(120, 40)) as pilot:
        bar = app.query_one(StatusBar)
        await pilot.pause()
        prompts: list[str] = []
        original = bar.post_message

        def keep(message: Message) -> bool:
            if isinstance(message, messages.Prompt):
                prompts.append("prompt")
            return original(message)

        bar.post_message = keep  # type: ignore[method-assign]
        screen_got: list[str] = []
        screen_post = app.screen.post_message

        def to_screen(message: Message) -> bool:
            if getattr(message, "widget", None) is bar:
                screen_got.append(type(message).__name__)
            return screen_post(message)

        app.screen.post_message = to_screen  # type: ignore[method-assign]
        with refresh_batch():
            bar.refresh()
            assert prompts == []
        assert screen_got == ["Update"]  # from the batch's end
        # a layout asked for inside a batch is left to the widget's idle, in Textual's order
        screen_got.clear()
        with refresh_batch():
            bar.refresh()
            bar.refresh(layout=True)
            assert prompts == ["prompt"]
        assert screen_got == []
        await pilot_until(pilot, lambda: "Layout" in screen_got, "the layout at the screen")
        prompts.clear()
        with refresh_batch():
            bar.call_next(lambda: ran.append("next"))
            assert prompts == ["prompt"]
        await pilot_until(pilot, lambda: ran, "the callback to run")
        assert ran == ["next"]
        await pilot.pause()
        prompts.clear()
        bar.refresh()
        assert prompts == ["prompt"]
