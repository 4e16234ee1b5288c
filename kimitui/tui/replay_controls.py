"""The replay's controls: play and pause (``space``), speed (``+`` / ``-``, a typed speed), phase jumps
(``n`` / ``p``), one event on (``.``) and back (``,``), the end, +-10 s (``left`` / ``right``), a jump to a typed
time (``g``), loop (``l``). A mixin of the app: each acts on its player and redraws (``_after_control``)."""

from __future__ import annotations

from textual.app import App

from kimitui.core.replay import Player
from kimitui.tui.screens.jump_dialog import JumpDialog

SEEK_STEP_S = 10.0


class ReplayControls(App[None]):
    player: Player | None

    def _after_control(self) -> None:
        raise NotImplementedError

    def action_toggle_pause(self) -> None:
        if self.player is not None:
            self.player.toggle_pause()
            self._after_control()

    def action_faster(self) -> None:
        if self.player is not None:
            self.player.faster()
            self._after_control()

    def action_slower(self) -> None:
        if self.player is not None:
            self.player.slower()
            self._after_control()

    def action_set_speed(self, speed: float) -> None:
        if self.player is not None:
            self.player.set_speed(float(speed))
            self._after_control()

    def action_next_phase(self) -> None:
        if self.player is not None:
            if not self.player.next_phase():
                self.notify("no later phase boundary", timeout=3)
            self._after_control()

    def action_prev_phase(self) -> None:
        if self.player is not None:
            if not self.player.prev_phase():
                self.notify("already at the start", timeout=3)
            self._after_control()

    def action_step(self) -> None:
        if self.player is not None:
            if not self.player.step():
                self.notify("end of the run", timeout=3)
            self._after_control()

    def action_to_end(self) -> None:
        if self.player is not None:
            self.player.to_end()
            self._after_control()

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
