"""The replay's controls beyond play, speed and phase jumps: one event back (``,``), +-10 s (``left`` /
``right``), a jump to a typed time (``g``), loop (``l``). A mixin of the app: each acts on its player and
redraws (``_after_control``)."""

from __future__ import annotations

from textual.app import App

from kimitui.core.replay import Player
from kimitui.tui.screens.jump_dialog import JumpDialog

SEEK_STEP_S = 10.0


class ReplayControls(App[None]):
    player: Player | None

    def _after_control(self) -> None:
        raise NotImplementedError

    def action_step_back(self) -> None:
        if self.player is not None:
            if not self.player.step_back():
                self.notify("at the start of the run", timeout=3)
            self._after_control()

    def action_seek_by(self, seconds: float) -> None:
        if self.player is not None:
            self.player.seek_by(float(seconds))
            self._after_control()

    def action_toggle_loop(self) -> None:
        if self.player is not None:
            on = self.player.toggle_loop()
            self.notify("loop on: the end plays on from the start" if on else "loop off", timeout=3)
            self._after_control()

    def action_jump(self) -> None:
        player = self.player
        if player is None:
            return
        reader = player.reader

        def jumped(target: float | None) -> None:
            if target is not None and self.player is player:
                player.seek_time(target)
                self._after_control()

        self.push_screen(JumpDialog(reader.start_time, reader.end_time, player.run_time), jumped)
