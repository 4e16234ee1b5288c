"""The registry: every event type by its name, declared here from each module of the vocabulary (no module adds
itself by side effect), and the JSON line of an event both ways."""

from __future__ import annotations

import json
from typing import Any

from kimitui.core.error_words import json_words
from kimitui.core.events import campaign, cleanup, fleet, host, macro, micro, phase
from kimitui.core.events.base import Event, _plain  # noqa: F401 (to_dict's helper, kept importable)
from kimitui.core.typed import FieldTypeError, build


def _by_name(*modules: object) -> dict[str, type[Event]]:
    out: dict[str, type[Event]] = {}
    for module in modules:
        for cls in module.EVENTS:  # type: ignore[attr-defined]
            assert cls.type not in out, f"two events named {cls.type}"
            out[cls.type] = cls
    return out


EVENT_TYPES: dict[str, type[Event]] = _by_name(host, phase, cleanup, macro, micro, campaign, fleet)
"""Every event type by its ``type`` name."""


class EventDecodeError(ValueError):
    """A line that is not a valid event."""




def from_dict(data: dict[str, Any]) -> Event:
    """Build an event from its JSON object, every field checked against its annotation
    (``kimitui.core.typed``); unknown keys are ignored (forward compatible). EventDecodeError names the
    event type and the field."""
    name = data.get("type")
    cls = EVENT_TYPES.get(name) if type(name) is str else None
    if cls is None:
        shown = repr(name) if len(repr(name)) <= 40 else repr(name)[:37] + "..."
        raise EventDecodeError(f"unknown or missing event type {shown}")
    try:
        return build(cls, data)
    except FieldTypeError as exc:
        raise EventDecodeError(f"bad {name} event: {exc}") from exc


def encode(event: Event) -> str:
    """One compact JSON line (no newline), ``t`` and ``type`` first."""
    return json.dumps(event.to_dict(), separators=(",", ":"), ensure_ascii=False)


def decode(line: str | bytes) -> Event:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise EventDecodeError(f"not JSON: {json_words(exc)}") from exc
    except UnicodeDecodeError as exc:
        raise EventDecodeError(f"not UTF-8 at byte {exc.start}") from exc
    except ValueError as exc:  # an integer of more than 4300 digits (sys.set_int_max_str_digits)
        raise EventDecodeError(f"not readable JSON: {str(exc).split(';')[0]}") from exc
    except RecursionError as exc:
        raise EventDecodeError("not readable JSON: nested too deep") from exc
    if not isinstance(data, dict):
        raise EventDecodeError("not a JSON object")
    return from_dict(data)
