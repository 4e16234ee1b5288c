"""The append-only audit log: one JSON line per preview, consent, signal, outcome and result.

Opened with O_APPEND (each line is one write, so concurrent cleanups never interleave within a line);
default path $XDG_DATA_HOME/kimitui/audit.log. Each line holds the operator, the host, and the event's
own fields (pid, start time, command line, signal, outcome, times).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from kimitui.core.events import Event


def default_audit_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "kimitui" / "audit.log"


class AuditLog:
    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_audit_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def write(self, record: dict[str, Any]) -> None:
        if self._fd is None:
            raise ValueError("audit log closed")
        line = json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n"
        os.write(self._fd, line.encode())

    def record(self, event: Event, host: str, operator: str) -> None:
        data = event.to_dict()
        t = data.pop("t")
        kind = data.pop("type")
        self.write({"t": t, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)), "event": kind,
                    "host": host, "operator": operator, **data})

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_audit(path: str | Path) -> list[dict[str, Any]]:
    out = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out
