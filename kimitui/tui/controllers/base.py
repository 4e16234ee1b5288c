"""The one shape of a controller: what a key starts on the host (a sweep, the micro benchmarks, a cleanup, a
campaign), at most one of each at a time."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from kimitui.tui.controllers.port import AppPort


class Controller(ABC):
    """``start()`` is the key's action (a dialog first where the work has one; options a controller adds are
    keyword arguments with defaults), ``cancel()`` stops it the graceful way (what finished is kept) and
    ``running`` says whether it acts on the host now. It publishes into the session and draws nothing: every
    view follows it through the fold. The app owns one of each; it sees the app only as an ``AppPort``."""

    BUSY: ClassVar[str]
    """What acts on the host while it runs, in Ctrl-C's question ("a sweep is running")."""

    def __init__(self, app: AppPort) -> None:
        self.app = app

    @property
    @abstractmethod
    def running(self) -> bool: ...

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def cancel(self) -> None: ...

    def close(self) -> None:  # noqa: B027 (most have nothing to do: their workers end with the app)
        """The app is going away."""
