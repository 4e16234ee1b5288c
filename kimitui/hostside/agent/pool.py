"""The threads requests run on: a pool (a slow request never delays another) and a lane (one after another,
in the order they came)."""

from __future__ import annotations

import threading
import time

from ..wire import err, log

TYPE_CHECKING = False  # typing is not imported at run time: this module stays light
if TYPE_CHECKING:
    from typing import Any


def _say_failed(exc: BaseException) -> None:
    try:
        log("error", f"request thread failed: {err(exc)}")
    except (BrokenPipeError, ValueError):  # the channel is gone
        pass

class Pool:
    """Threads for requests: each request runs on an idle thread, or on a new one when none is idle, so a
    request that waits (a read that blocks, a service command) never delays another. A thread idle for
    IDLE_S ends."""

    IDLE_S = 30.0

    def __init__(self) -> None:
        import queue

        self.jobs: Any = queue.Queue()
        self.lock = threading.Lock()
        self.idle = 0
        """Threads waiting for a job, less the jobs queued for them."""
        self.pending = 0
        """Jobs submitted and not finished."""
        self.done = threading.Condition(self.lock)

    def submit(self, fn: Any, *args: Any) -> None:
        with self.lock:
            self.pending += 1
            self.jobs.put((fn, args))
            if self.idle > 0:
                self.idle -= 1
                return
        threading.Thread(target=self._work, name="request", daemon=True).start()

    def _work(self) -> None:
        import queue

        while True:
            try:
                fn, args = self.jobs.get(timeout=self.IDLE_S)
            except queue.Empty:
                with self.lock:
                    if self.idle > 0:  # more threads wait than jobs are queued: this one ends
                        self.idle -= 1
                        return
                continue  # a job was queued for this thread meanwhile
            try:
                fn(*args)
            except Exception as exc:  # answer() replies to every error of a request: this is the agent's own
                _say_failed(exc)
            finally:
                with self.lock:
                    self.pending -= 1
                    self.done.notify_all()
            with self.lock:
                self.idle += 1

    def wait_idle(self, timeout: float) -> bool:
        """Until every submitted job has finished, or TIMEOUT seconds (a read that blocks is not waited on
        for ever): whether they all finished."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while self.pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.done.wait(left)
        return True


class Lane(threading.Thread):
    """One thread running its jobs in the order they came (the sample stream's start and stop)."""

    def __init__(self, name: str) -> None:
        import queue

        threading.Thread.__init__(self, name=name, daemon=True)
        self.jobs: Any = queue.Queue()

    def submit(self, fn: Any, *args: Any) -> None:
        if not self.is_alive():
            self.start()
        self.jobs.put((fn, args))

    def run(self) -> None:
        while True:
            fn, args = self.jobs.get()
            fn(*args)
