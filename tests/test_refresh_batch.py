"""Widgets repainted in one redraw tell the screen from the redraw (kimitui/tui/widgets/refresh_batch.py):
no Prompt wakes their own tasks, the screen gets one Update each, and what they show reaches the screen."""

from __future__ import annotations

import time
from collections import Counter

from textual import messages
from textual.message import Message
from textual.message_pump import MessagePump

from kimitui.core.events import GpuSample, HostSample, ProcSample
from kimitui.core.session import QueueSource, Session
from kimitui.tui.widgets.gpu_table import GpuTable
from kimitui.tui.widgets.refresh_batch import refresh_batch
from kimitui.tui.widgets.status_bar import StatusBar
from tests.app_probe import ProbedApp


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
    original = MessagePump.post_message

    def counting(pump: MessagePump, message: Message) -> bool:
        posted[type(pump).__name__, type(message).__name__] += 1
        return original(pump, message)

    async with app.run_test(size=(120, 40)) as pilot:
        for seq in (1, 2):
            source.put(sample(seq))
        deadline = time.monotonic() + 10
        while app.session.state.sample_seq != 2 or app.frames == 0:
            assert time.monotonic() < deadline
            await pilot.pause()
        await pilot.pause()
        table = app.query_one(GpuTable)
        MessagePump.post_message = counting  # type: ignore[method-assign]
        try:
            source.put(sample(3))
            while "303W" not in table.render_line(1).text:  # the new power figure, as the screen renders it
                assert time.monotonic() < deadline, table.render_line(1).text
                await pilot.pause()
            await pilot.pause()
        finally:
            MessagePump.post_message = original  # type: ignore[method-assign]
        assert posted["GpuTable", "Prompt"] == posted["StatusBar", "Prompt"] == 0, posted
        assert posted["BandScreen", "Update"] >= 2, posted  # the GPU table and the header, at least
        strips = app.screen._compositor.render_strips()
        screen_text = "\n".join(strip.text for strip in strips)
        assert "303W" in screen_text and f"events {app.session.state.events}" in screen_text  # the header too


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
        await pilot.pause()
        assert "Layout" in screen_got
        prompts.clear()
        with refresh_batch():
            bar.call_next(lambda: ran.append("next"))
            assert prompts == ["prompt"]
        deadline = time.monotonic() + 5
        while not ran:
            assert time.monotonic() < deadline, "the callback never ran"
            await pilot.pause()
        assert ran == ["next"]
        await pilot.pause()
        prompts.clear()
        bar.refresh()
        assert prompts == ["prompt"]
