"""The keys that act on the host through a controller (``controllers/``): a sweep (``M``), a micro run (``K``),
the cleanup (``F``) and the restart (``R``), their cancel keys, the campaign's pause / skip / abort, and Ctrl-C
(which asks first while one of them acts). A mixin of the app: a campaign running here makes the others say so
instead of starting beside it."""

from __future__ import annotations

from textual.actions import SkipAction
from textual.app import App

from kimitui.tui.controllers.base import Controller
from kimitui.tui.controllers.campaign import RUNNING, CampaignController
from kimitui.tui.controllers.cleanup import CleanupController
from kimitui.tui.controllers.macro import MacroController
from kimitui.tui.controllers.micro import MicroController


class HostKeys(App[None]):
    campaign: CampaignController
    cleanup: CleanupController
    macro: MacroController
    micro: MicroController
    controllers: tuple[Controller, ...]

    @property
    def active_view(self) -> str:
        raise NotImplementedError

    def campaign_busy(self) -> bool:
        """A campaign runs here: F, M, K and R say so instead of starting on the host beside it."""
        if self.campaign.running:
            self.notify(RUNNING, title="campaign", severity="warning", timeout=6)
            return True
        return False

    def action_campaign_pause(self) -> None:
        self.campaign.toggle_pause()

    def action_campaign_skip(self) -> None:
        self.campaign.skip_next()

    def action_campaign_abort(self) -> None:
        self.campaign.cancel()

    def action_macro_sweep(self) -> None:
        if not self.campaign_busy():
            self.macro.start()

    def action_cancel_macro(self) -> None:
        self.macro.cancel()

    def action_cancel_macro_key(self) -> None:
        if self.active_view != "bench" or not self.macro.running:
            raise SkipAction()  # the key's other bindings get it
        self.macro.cancel()

    def action_micro_run(self) -> None:
        if not self.campaign_busy():
            self.micro.start()

    def action_cancel_micro_key(self) -> None:
        if self.active_view != "micro" or not self.micro.running:
            raise SkipAction()  # the key's other bindings get it
        self.micro.cancel()

    # -- cleanup (live only): the dialog, the consent modals and the worker are controllers/cleanup.py's

    def action_free_gpus(self) -> None:
        if not self.campaign_busy():
            self.cleanup.start()

    def action_cancel_cleanup(self) -> None:
        self.cleanup.cancel()

    def action_cancel_cleanup_idle(self) -> None:
        self.action_cancel_cleanup()

    def busy(self) -> str | None:
        """What acts on the host now (Ctrl-C asks before quitting), or None."""
        return next((c.BUSY for c in self.controllers if c.running), None)

    def action_interrupt(self) -> None:
        """Ctrl-C: quit, as in htop and k9s; while something acts on the host, ask first (again: quit)."""
        from kimitui.tui.screens.quit_screen import QuitScreen

        busy = self.busy()
        if busy is None or isinstance(self.screen, QuitScreen):
            self.exit()
            return
        self.push_screen(QuitScreen(busy), callback=lambda quit_: self.exit() if quit_ else None)

    def action_restart_service(self) -> None:
        if not self.campaign_busy():
            self.cleanup.restart()
