"""Running the micro benchmarks from the dashboard (live only): ``K`` starts them on the watched host,
``x`` on the Micro tab cancels (every rank ends, the GPUs are freed, the telemetry shows it).

The run is a worker in the app's loop; ``publish`` is ``session.publish``, so everything it does is an
event, recorded and drawn like any other. A refusal (the GPUs hold memory) shows its holders on the tab
and offers to run anyway, in a modal that says what that means.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from kimitui.core.events import HostSample, ProcRef
from kimitui.tui import fmt

if TYPE_CHECKING:
    from kimitui.tui.app import KimituiApp

NEEDS_LIVE = "the micro benchmarks need a live host (kimitui demo, kimitui connect HOST)"


class OverrideScreen(ModalScreen[bool]):
    """The GPUs hold memory: run anyway (y) or not (n / esc)."""

    BINDINGS = [Binding("y", "answer(True)", "Run anyway"), Binding("n,escape", "answer(False)", "No")]

    SHOWN = 6
    """Holders listed by pid (the Micro tab lists every one)."""

    def __init__(self, detail: str, holders: Sequence[ProcRef] = ()) -> None:
        super().__init__()
        self.detail, self.holders = detail, list(holders)

    def compose(self) -> ComposeResult:
        parts: list[str | tuple[str, str]] = [("The GPUs in scope hold memory", "bold"), "\n\n",
                                              fmt.printable(self.detail)]
        if self.holders:
            parts += ["\n\n", (f"held by {len(self.holders)} process(es):", "bold")]
            for h in self.holders[: self.SHOWN]:
                parts += ["\n", f"  pid {h.pid:<7} GPU {fmt.gpu_list(h.gpus):<5} {fmt.mib(h.mem_mib):>7} MiB  ",
                          fmt.shorten(fmt.command_gist(h.cmdline), 40)]
            if len(self.holders) > self.SHOWN:
                parts += ["\n", (f"  and {len(self.holders) - self.SHOWN} more (the Micro tab lists them)",
                                 "$text-muted")]
        parts += ["\n\nBenchmarks beside another process measure both and may run out of memory. Free the GPUs "
                  "first (F), or run anyway:\n\n", ("y", "bold"), " run anyway    ", ("n", "bold"),
                  " / esc: do not run"]
        with Vertical(id="micro-override"):
            yield Static(Content.assemble(*parts))

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)


class MicroController:
    def __init__(self, app: KimituiApp) -> None:
        self.app = app
        self.cancel_event: asyncio.Event | None = None
        self.task_running = False
        self.defaults: dict[str, object] = {}
        """MicroConfig fields set on every run started here (the demo's pace, a test's small sizes)."""

    @property
    def running(self) -> bool:
        return self.task_running

    def start(self, force: bool = False) -> None:
        live = self.app.live
        if live is None:
            self.app.notify(NEEDS_LIVE, title="micro", severity="warning", timeout=6)
            return
        if self.running:
            self.app.notify("a micro run is in progress: x on the Micro tab cancels it", title="micro", timeout=5)
            return
        from kimitui.bench.micro.runner import MicroConfig
        from kimitui.phases.micro import micro_phase

        state = self.app.session.state
        sample = HostSample(state.sample_t, host=state.host, gpus=list(state.gpus.values()), procs=list(state.procs)) \
            if state.gpus else None
        cfg = MicroConfig(force=force)
        if live.simulated:
            cfg.modelled, cfg.sim_dir, cfg.pace_s = "rtx-pro-6000", live.sim_dir, 0.05
        for key, value in self.defaults.items():
            setattr(cfg, key, value)
        cancel = self.cancel_event = asyncio.Event()
        self.task_running = True
        self.app.action_show_view("micro")

        async def run() -> None:
            try:  # the campaign's micro phase: its start, the runner, its end
                res = await micro_phase(self.app.session.publish, live.host, live.label, cfg, sample, cancel)
                if res.refused or any(p.status == "refused" for p in res.parts.values()):
                    detail = next(iter(res.parts.values())).detail if res.parts else "the GPUs hold memory"
                    self.app.push_screen(OverrideScreen(detail, res.refused), callback=self._override)
            except Exception as exc:  # a run that cannot start is a notification, never a crash
                self.app.notify(f"micro run failed: {exc}", title="micro", severity="error", timeout=10)
            finally:
                self.task_running = False

        self.app.run_worker(run(), group="micro", name="micro run", exit_on_error=False)

    def _override(self, run_anyway: bool | None) -> None:
        if run_anyway:
            self.start(force=True)

    def cancel(self) -> None:
        if self.cancel_event is not None and self.running:
            self.cancel_event.set()
            self.app.notify("cancelling: every rank is stopped", title="micro", timeout=4)
