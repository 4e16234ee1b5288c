"""What every event is: a frozen, typed record with its time and its registry name."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True, slots=True)
class Event:
    """Base of every event. ``t`` is unix time in seconds."""

    t: float
    type: ClassVar[str] = "event"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"t": self.t, "type": self.type}
        for f in dataclasses.fields(self):
            if f.name != "t":
                out[f.name] = _plain(getattr(self, f.name))
        return out

def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value
