"""The "Run macro sweep" dialog: target, workload and levels, checked before the sweep starts.

Defaults: the live host's OpenAI URL, the model ``/v1/models`` lists first, completions, concurrency
1,2,...,128, ``4x`` requests per level (4 per concurrency slot: 4 at c=1, 512 at c=128, so c=1 is over in
seconds and every level reaches its concurrency; a plain number is a fixed count per level), 128 output
tokens, 128-token synthetic prompts, one warm-up request per level, vLLM's ``ignore_eos`` sent (a server
that refuses it gets the sweep without it, and a warning), no goodput SLOs (vLLM's ``--goodput`` form). Request
rates (``2,4,8``) make the levels rates under one cap (the highest concurrency); search (with SLOs) finds the
highest concurrency, or rate, meeting them instead of running every level (``kimitui.bench.macro.search``).
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static

from kimitui.bench.macro import ConfigError, MacroConfig
from kimitui.bench.macro.config import DEFAULT_LEVELS, DEFAULT_REQUESTS, parse_levels, parse_rates, parse_requests
from kimitui.bench.macro.search import RateSearch, SloSearch
from kimitui.bench.macro.verdict import parse_goodput, slo_dict, slo_text
from kimitui.tui import fmt

FIELDS: tuple[tuple[str, str, str], ...] = (
    # (id, label, hint)
    ("url", "URL", "OpenAI-compatible server"),
    ("model", "model", "blank: the first of /v1/models"),
    ("concurrency", "concurrency", "1 to 512; with rates: the cap"),
    ("rates", "request rates", "req/s 2,4,8 (blank: closed loop)"),
    ("requests", "requests", "N a level, or Nx: N a stream"),
    ("max-tokens", "max tokens", "output tokens per request"),
    ("input-len", "input length", "synthetic prompt tokens"),
    ("warmup", "warm-up", "requests a level, not counted"),
    ("goodput", "goodput SLOs", "p99 ms: ttft:200,tpot:50"),
)


def form_defaults(url: str, previous: MacroConfig | None = None) -> dict[str, str]:
    """The dialog's initial values: the last sweep's settings when there was one."""
    if previous is not None:
        requests = (f"{previous.requests_per_stream}x" if previous.requests_per_stream is not None
                    else str(previous.requests))
        return {"url": previous.url, "model": previous.model or "", "endpoint": previous.endpoint,
                "concurrency": ",".join(map(str, previous.concurrency)), "requests": requests,
                "max-tokens": str(previous.max_tokens), "input-len": str(previous.input_len),
                "warmup": str(previous.warmup), "ignore-eos": "yes" if previous.ignore_eos else "no",
                "goodput": slo_text(slo_dict(previous.slo)), "rates": ",".join(f"{r:g}" for r in previous.rate_levels),
                "search": "yes" if previous.search else "no"}
    return {"url": url, "model": "", "endpoint": "completions",
            "concurrency": ",".join(map(str, DEFAULT_LEVELS)), "requests": DEFAULT_REQUESTS,
            "max-tokens": "128", "input-len": "128", "warmup": "1", "ignore-eos": "yes", "goodput": "",
            "rates": "", "search": "no"}


def _int(values: dict[str, str], key: str, what: str) -> int:
    try:
        return int(values[key].strip())
    except ValueError:
        raise ConfigError(f"{what}: a whole number, not {values[key]!r}") from None


def parse_form(values: dict[str, str]) -> MacroConfig:
    """A checked configuration from the dialog's texts; ConfigError says what to fix."""
    levels = parse_levels(values["concurrency"])
    rates = parse_rates(values.get("rates", ""))
    per_stream, requests = parse_requests(values["requests"])
    search = values.get("search", "no")
    if search not in ("yes", "no"):
        raise ConfigError(f"search: yes or no, not {search!r}")
    endpoint = values["endpoint"]
    if endpoint not in ("completions", "chat"):
        raise ConfigError(f"unknown endpoint {endpoint!r}")
    ignore_eos = values.get("ignore-eos", "yes")
    if ignore_eos not in ("yes", "no"):
        raise ConfigError(f"ignore_eos: yes or no, not {ignore_eos!r}")
    config = MacroConfig(
        url=values["url"].strip(), model=values["model"].strip() or None,
        endpoint="chat" if endpoint == "chat" else "completions",
        concurrency=[max(levels)] if rates else levels, rate_levels=rates, search=search == "yes",
        requests=requests, requests_per_stream=per_stream,
        max_tokens=_int(values, "max-tokens", "max tokens"), input_len=_int(values, "input-len", "input length"),
        warmup=_int(values, "warmup", "warm-up"), ignore_eos=ignore_eos == "yes",
        slo=parse_goodput([values.get("goodput", "")]),
    )
    config.validate()
    return config


def sweep_scale(config: MacroConfig, pace: dict[int, float] | None = None) -> str:
    """What the sweep asks of the server, and how long it takes at the pace measured here before (output tok/s by
    concurrency, from the session's last sweep: the nearest level measured stands for one not measured)."""
    if config.search:
        search = (RateSearch(min(config.rate_levels), max(config.rate_levels)) if config.rate_levels
                  else SloSearch(min(config.concurrency), max(config.concurrency)))
        low, high = (f"{search.lowest:g}", f"{search.highest:g} req/s") if config.rate_levels else \
            (f"c={search.lowest:g}", f"c={search.highest:g}")
        return f"a search from {low} to {high}: at most {search.planned} probes, each as long as it needs to tell"
    if config.rate_levels:
        rates = config.rate_levels
        requests = sum(config.rate_level_requests(r) for r in rates)
        seconds = sum(config.rate_level_requests(r) / r for r in rates)
        about = f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"
        return (f"{len(rates)} rate{'s' if len(rates) != 1 else ''}, {requests:,} requests, "
                f"{requests * config.max_tokens:,} output tokens; about {about} of arrivals")
    levels = config.concurrency
    requests = sum(config.level_requests(c) for c in levels)
    tokens = requests * config.max_tokens
    text = f"{len(levels)} level{'s' if len(levels) != 1 else ''}, {requests:,} requests, {tokens:,} output tokens"
    measured = {c: r for c, r in (pace or {}).items() if r > 0}
    if not measured:
        return text + "; how long depends on the server (no sweep measured here yet)"
    seconds = 0.0
    for c in levels:
        rate = measured[min(measured, key=lambda m: (abs(m - c), m))]
        seconds += config.level_requests(c) * config.max_tokens / rate
    about = f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"
    return text + f"; about {about} at the pace last measured here"


class MacroDialog(ModalScreen[MacroConfig | None]):
    """Enter (in a field) or Start runs the sweep; Escape or Cancel closes the dialog."""

    DEFAULT_CSS = """
    MacroDialog { align: center middle; }
    MacroDialog > Vertical {
        width: 96; max-width: 100%; height: auto; max-height: 100%; border: round $accent; background: $surface;
        padding: 0 1; border-title-color: $accent; border-title-style: bold;
    }
    MacroDialog .row { height: 1; }
    MacroDialog .row Label { width: 13; color: $text-muted; }
    MacroDialog .row Input, MacroDialog .row Select { width: 32; }
    MacroDialog .row .hint { width: 1fr; padding-left: 1; color: $text-muted; text-wrap: nowrap;
                             text-overflow: ellipsis; }
    MacroDialog #dialog-error { height: auto; color: $error; text-style: bold; }
    MacroDialog #dialog-scale { height: auto; color: $text-muted; margin-top: 1; }
    MacroDialog #dialog-buttons { height: 1; align-horizontal: right; margin-top: 1; }
    MacroDialog #dialog-box { padding-top: 1; }
    MacroDialog #dialog-buttons Button { margin-left: 2; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Cancel"),
        # Priority: focus moves when the key is read, not after the field in hand has seen it, so what is
        # typed fast after a tab lands in the next field (a key is forwarded to the field focused then).
        Binding("tab", "app.focus_next", "Next field", show=False, priority=True),
        Binding("shift+tab", "app.focus_previous", "Previous field", show=False, priority=True),
    ]
    AUTO_FOCUS = "#url"

    def __init__(self, url: str, previous: MacroConfig | None = None, pace: dict[int, float] | None = None) -> None:
        super().__init__()
        self.values = form_defaults(url, previous)
        self.pace = pace or {}
        self.ready = False
        """Every field is there (an Input says it changed as it mounts)."""

    def compose(self) -> ComposeResult:
        box = Vertical(id="dialog-box")
        box.border_title = "Run macro sweep"
        with box:
            for key, label, hint in FIELDS[:2]:
                yield from self._row(key, label, hint)
            with Horizontal(classes="row"):
                yield Label("endpoint")
                yield Select([("completions", "completions"), ("chat", "chat")], value=self.values["endpoint"],
                             allow_blank=False, compact=True, id="endpoint")
                yield Static("the OpenAI API called", classes="hint")
            for key, label, hint in FIELDS[2:]:
                yield from self._row(key, label, hint)
            with Horizontal(classes="row"):
                yield Label("ignore_eos")
                yield Select([("send", "yes"), ("do not send", "no")], value=self.values["ignore-eos"],
                             allow_blank=False, compact=True, id="ignore-eos")
                yield Static("vLLM's: every output max tokens", classes="hint")
            with Horizontal(classes="row"):
                yield Label("levels")
                yield Select([("run every one", "no"), ("search (SLOs)", "yes")], value=self.values["search"],
                             allow_blank=False, compact=True, id="search")
                yield Static("search: the highest within SLOs", classes="hint")
            yield Static("", id="dialog-scale")
            yield Static("", id="dialog-error")
            with Horizontal(id="dialog-buttons"):
                yield Button("Start", variant="primary", id="start", compact=True)
                yield Button("Cancel", id="cancel", compact=True)

    def _row(self, key: str, label: str, hint: str) -> ComposeResult:
        with Horizontal(classes="row"):
            yield Label(label)
            yield Input(self.values[key], id=key, compact=True, select_on_focus=False)
            yield Static(hint, classes="hint")

    def on_mount(self) -> None:
        self.query_one("#url", Input).focus()
        self.ready = True
        self.show_scale()

    def show_scale(self) -> None:
        """The sweep's size (and time, where a pace was measured) for the levels and counts typed so far."""
        try:
            text = sweep_scale(parse_form(self.form_values()), self.pace)
        except ConfigError:
            text = ""
        self.query_one("#dialog-scale", Static).update(Content(text))

    def on_input_changed(self, event: Input.Changed) -> None:
        if self.ready:
            self.show_scale()

    def on_select_changed(self, event: Select.Changed) -> None:
        if self.ready:
            self.show_scale()

    def form_values(self) -> dict[str, str]:
        values = {key: self.query_one(f"#{key}", Input).value for key, _, _ in FIELDS}
        values["endpoint"] = str(self.query_one("#endpoint", Select).value)
        values["ignore-eos"] = str(self.query_one("#ignore-eos", Select).value)
        values["search"] = str(self.query_one("#search", Select).value)
        return values

    def submit(self) -> None:
        try:
            config = parse_form(self.form_values())
        except ConfigError as exc:
            self.query_one("#dialog-error", Static).update(Content(fmt.printable(str(exc))))
            return
        self.dismiss(config)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "start":
            self.submit()
        else:
            self.dismiss(None)

    def action_close(self) -> None:
        self.dismiss(None)
