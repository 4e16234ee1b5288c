"""Command palette entries: replay controls, speeds, views and one entry per loaded theme."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Protocol, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

from kimitui.core.replay import SPEEDS

if TYPE_CHECKING:
    from kimitui.core.replay import Player
    from kimitui.live.context import LiveContext
    from kimitui.tui.controllers.micro import MicroController

Command = tuple[str, str, Callable[[], object]]


class PaletteApp(Protocol):
    """What the palette's entries call of the app (the app lists this module's provider: typed against this,
    the palette does not import the app back)."""

    player: Player | None
    live: LiveContext | None
    loaded_theme_names: list[str]
    micro: MicroController

    def action_toggle_pause(self) -> None: ...
    def action_next_phase(self) -> None: ...
    def action_prev_phase(self) -> None: ...
    def action_step(self) -> None: ...
    def action_to_end(self) -> None: ...
    def action_set_speed(self, speed: float) -> None: ...
    def action_show_view(self, view: str) -> None: ...
    def action_macro_sweep(self) -> None: ...
    def action_cancel_macro(self) -> None: ...
    def action_free_gpus(self) -> None: ...
    def action_restart_service(self) -> None: ...
    def action_micro_run(self) -> None: ...
    def action_help(self) -> None: ...
    def action_cancel_cleanup(self) -> None: ...
    def action_set_theme(self, name: str) -> None: ...


def palette_commands(app: PaletteApp) -> list[Command]:
    """(title, help, callback) for every entry; replay entries only in replay mode."""
    out: list[Command] = []
    if app.player is not None:
        out += [
            ("Replay: pause / resume", "space", app.action_toggle_pause),
            ("Replay: next phase", "n: jump past the next phase boundary", app.action_next_phase),
            ("Replay: previous phase", "p: jump past the previous phase boundary", app.action_prev_phase),
            ("Replay: step one event", ".", app.action_step),
            ("Replay: step back one event", ",", app.action_step_back),
            ("Replay: jump to a time…", "g: mm:ss, +30s, -5m, @14:05", app.action_jump),
            ("Replay: 10 s back", "left", partial(app.action_seek_by, -10.0)),
            ("Replay: 10 s forward", "right", partial(app.action_seek_by, 10.0)),
            ("Replay: loop on / off", "l: the end plays on from the start", app.action_toggle_loop),
            ("Replay: jump to end", "e / End", app.action_to_end),
        ]
        out += [(f"Replay: speed {s:g}x", "set the replay speed", partial(app.action_set_speed, s))
                for s in SPEEDS]
    out += [
        ("View: dashboard", "d: GPUs, processes, log", partial(app.action_show_view, "dashboard")),
        ("View: benchmarks", "b: throughput plot and tables", partial(app.action_show_view, "bench")),
        ("View: cleanup", "c: cleanup steps and verdict", partial(app.action_show_view, "cleanup")),
        ("Benchmarks: run macro sweep…", "M: concurrency sweep against the live OpenAI server, plotted live",
         app.action_macro_sweep),
        ("Benchmarks: cancel macro sweep", "x on the Benchmarks tab: finished levels are kept",
         app.action_cancel_macro),
        ("Cleanup: free the GPUs…", "F: graceful stop, process kill, the others, device kill, verify; each step "
         "previewed and asked (live only)", app.action_free_gpus),
        ("Cleanup: restart the service…", "R: start the service again and wait for its health endpoint; "
         "previewed and asked (live only)", app.action_restart_service),
        ("View: micro", "u: GEMM and all-reduce results, interconnect, plots", partial(app.action_show_view, "micro")),
        ("Benchmarks: run micro benchmarks", "K: GEMMs at the model's shapes and all-reduces on the host (live only)",
         app.action_micro_run),
        ("Benchmarks: cancel micro run", "x on the Micro tab: every rank ends, the GPUs are freed",
         app.micro.cancel),
        ("Help", "F1 / ?: keys", app.action_help),
    ]
    if app.live is not None:
        out.append(("Cleanup: cancel", "x: decline the rest of the running cleanup", app.action_cancel_cleanup))
    out += [(f"Theme: {name}", f"switch to the {name} theme", partial(app.action_set_theme, name))
            for name in app.loaded_theme_names]
    return out


class KimituiCommands(Provider):
    def _commands(self) -> list[Command]:
        return palette_commands(cast("PaletteApp", self.app))

    async def discover(self) -> Hits:
        for title, help_text, callback in self._commands():
            yield DiscoveryHit(title, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, text=title, help=help_text)
