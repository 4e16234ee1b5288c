"""The "Free the GPUs" setup dialog: which service, which GPUs, what clean means, whose processes.

Returns a ``CleanupRequest`` (validated with the same parsers as ``kimitui cleanup``) or None when
cancelled. Nothing is signalled from here: each step still asks in its own consent modal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Static

from kimitui.cleanup.services import ServiceManager
from kimitui.cleanup.setup import SERVICE_FORMS, UsageError, parse_gpus, parse_service
from kimitui.tui import fmt

DEFAULT_THRESHOLD_MIB = 64.0


@dataclass(slots=True)
class CleanupRequest:
    """What the operator set up: the parsed service (None: "none" chosen, free the GPUs of whatever holds
    them), GPUs (None: all)."""

    service_spec: str
    service: ServiceManager | None
    gpus: list[int] | None
    threshold_mib: float
    allow_other_users: bool


def parse_request(service: str, gpus: str, threshold: str, allow_other_users: bool) -> CleanupRequest:
    """The dialog's fields as a request; UsageError (one line) for a bad field."""
    spec = service.strip()
    manager = parse_service(spec)
    gpu_list = parse_gpus(gpus)
    try:
        mib = float(threshold.strip() or DEFAULT_THRESHOLD_MIB)
    except ValueError:
        raise UsageError(f"clean threshold {threshold!r}: expected MiB, e.g. 64") from None
    if not 0 <= mib <= 1024 * 1024:
        raise UsageError(f"clean threshold {threshold!r}: expected 0 MiB or more")
    return CleanupRequest(spec, manager, gpu_list, mib, allow_other_users)


class CleanupSetupScreen(ModalScreen[CleanupRequest | None]):
    DEFAULT_CSS = """
    CleanupSetupScreen { align: center middle; }
    CleanupSetupScreen > Vertical {
        width: 84; max-width: 100%; height: auto; max-height: 100%;
        border: round $accent; background: $surface; padding: 0 2;
    }
    CleanupSetupScreen #setup-title { text-style: bold; color: $accent; }
    CleanupSetupScreen .field-label { color: $text-muted; margin-top: 1; }
    CleanupSetupScreen #setup-about { color: $text-muted; }
    CleanupSetupScreen Input { width: 100%; }
    CleanupSetupScreen #setup-row { height: auto; }
    CleanupSetupScreen #setup-row > Vertical { width: 1fr; height: auto; }
    CleanupSetupScreen Checkbox { margin-top: 1; }
    CleanupSetupScreen .field-hint { color: $text-muted; text-style: italic; padding: 0 1; }
    CleanupSetupScreen #setup-error { color: $error; height: auto; margin-top: 1; }
    CleanupSetupScreen #setup-buttons { height: 1; margin-top: 1; align-horizontal: right; }
    CleanupSetupScreen #setup-buttons Button { margin-left: 2; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "start", "Start", show=False),
    ]

    def __init__(self, host_label: str, default_service: str | None, gpus: list[int],
                 lookup: Callable[[ServiceManager], Awaitable[str | None]] | None = None) -> None:
        """``lookup`` says why a service cannot be found on the host (None when it can): the dialog stays
        open with that line instead of starting a cleanup for a service that is not there."""
        super().__init__()
        self.host_label = host_label
        self.default_service = default_service or ""
        self.gpus = gpus
        self.lookup = lookup
        self.looking = False

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Content(fmt.printable(f"Free the GPUs on {self.host_label}")), id="setup-title")
            yield Static("Each step (graceful stop, process kill, the others on the GPUs that are not the service, "
                         "device kill) is previewed and asked for; then every GPU in scope is verified clean.",
                         id="setup-about")
            yield Label("Service (none: no service, only the others on the GPUs)", classes="field-label")
            yield Input(self.default_service, placeholder=SERVICE_FORMS, id="setup-service", compact=True)
            yield Static(SERVICE_FORMS, classes="field-hint")
            with Horizontal(id="setup-row"):
                with Vertical():
                    yield Label("GPUs in scope (all, or e.g. 0,1)", classes="field-label")
                    yield Input("all", id="setup-gpus", compact=True)
                    known = fmt.gpu_list(self.gpus) if self.gpus else "none seen yet"
                    yield Static(f"this host: GPU {known}", classes="field-hint")
                with Vertical():
                    yield Label("Clean within (MiB of idle)", classes="field-label")
                    yield Input(f"{DEFAULT_THRESHOLD_MIB:g}", id="setup-threshold", type="number", compact=True)
                    yield Static("per GPU, above its idle baseline", classes="field-hint")
            yield Checkbox("Allow other users' processes to be signalled", False, id="setup-others", compact=True)
            error = Static("", id="setup-error")
            error.display = False
            yield error
            with Horizontal(id="setup-buttons"):
                yield Button("Cancel (esc)", id="setup-cancel", compact=True)
                yield Button("Preview first step (enter)", variant="warning", id="setup-start", compact=True)

    def on_mount(self) -> None:
        self.query_one("#setup-service", Input).focus()

    def request(self) -> CleanupRequest:
        return parse_request(self.query_one("#setup-service", Input).value,
                             self.query_one("#setup-gpus", Input).value,
                             self.query_one("#setup-threshold", Input).value,
                             self.query_one("#setup-others", Checkbox).value)

    def action_start(self) -> None:
        if self.looking:
            return
        try:
            req = self.request()
        except UsageError as exc:
            self._error(str(exc).replace("--service ", "service ").replace("--gpus ", "GPUs "))
            return
        unknown = [i for i in req.gpus or [] if self.gpus and i not in self.gpus]
        if unknown:
            self._error(f"GPU {','.join(map(str, unknown))} not on this host (it has GPU {fmt.gpu_list(self.gpus)})")
            return
        if req.service is None or self.lookup is None:
            self.dismiss(req)
            return
        self.looking = True
        self._error(f"looking up {req.service.label} on {self.host_label} ...")
        self.run_worker(self._start_if_found(req), group="service-lookup", exclusive=True)

    async def _start_if_found(self, req: CleanupRequest) -> None:
        assert self.lookup is not None and req.service is not None
        try:
            missing = await self.lookup(req.service)
        except Exception as exc:  # a failed look-up is no answer: say so, start nothing
            missing = f"{req.service.label}: cannot be looked up: {exc}"
        finally:
            self.looking = False
        if missing is not None:
            self._error(missing)
            return
        self._error("")
        self.dismiss(req)

    def _error(self, text: str) -> None:
        error = self.query_one("#setup-error", Static)
        error.update(Content(fmt.printable_lines(text)))  # a lookup's failure is the host's words: not markup
        error.display = bool(text)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_start()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "setup-start":
            self.action_start()
        else:
            self.action_cancel()
