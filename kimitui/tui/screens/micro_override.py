"""The micro benchmarks were refused (the GPUs in scope hold memory): run anyway, in a modal that says what
that means and who holds them."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from kimitui.core.events import ProcRef
from kimitui.tui import fmt


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
