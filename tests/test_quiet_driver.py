"""The dashboard's terminal driver (kimitui/tui/quiet_driver.py) on a real pty: while nothing happens its
input thread waits for the terminal with no timeout (Textual's wakes ten times a second: how often, per
second, is a figure of benchmarks/timing_figures.py); a lone Escape still arrives as a key once its parser's
deadline passes, an arrow as an arrow, and quitting ends the program (the thread's wait is woken, not
timed out)."""

from __future__ import annotations

import fcntl
import os
import platform
import pty
import select
import struct
import subprocess
import sys
import termios
import textwrap
from pathlib import Path

from tests.waiting import wait_until

APP = textwrap.dedent("""
    import sys
    from textual.app import App
    from textual.widgets import Static
    from kimitui.tui.quiet_driver import QuietLinuxDriver

    class Keys(App[None]):
        def compose(self):
            yield Static("ready")

        def on_mount(self):
            print("mounted", file=open(sys.argv[1], "a"), flush=True)

        def on_key(self, event):
            with open(sys.argv[1], "a") as log:
                print(event.key, file=log)
            if event.key == "q":
                self.exit()

    Keys(driver_class=QuietLinuxDriver).run()
""")


SELECT_CALLS = {"x86_64": {23: "select", 270: "pselect6"}, "aarch64": {72: "pselect6"}}
"""The system calls a selectors.SelectSelector waits in, by number; their 5th argument is the timeout (a
pointer: 0 when there is none)."""


def _selects(pid: int) -> list[tuple[str, int]]:
    """(call, timeout pointer) of each thread of PID blocked in select now, from /proc/PID/task/*/syscall."""
    calls = SELECT_CALLS.get(platform.machine(), {})
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/syscall").read_text().split()
        except OSError:
            continue
        if fields and fields[0].isdigit() and int(fields[0]) in calls:
            out.append((calls[int(fields[0])], int(fields[5], 16)))
    return out


def test_the_input_thread_sleeps_and_keys_still_arrive(tmp_path: Path) -> None:
    script, log = tmp_path / "keys_app.py", tmp_path / "keys.log"
    script.write_text(APP)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "TERM": "xterm-256color", "PYTHONPATH": str(root)}
    proc = subprocess.Popen([sys.executable, str(script), str(log)], stdin=slave, stdout=slave, stderr=slave,
                            env=env, start_new_session=True)
    os.close(slave)
    out = bytearray()

    def read_until(done, what: str) -> None:  # type: ignore[no-untyped-def]
        """Read the terminal (a short select is the poll's interval) until DONE() (tests/waiting.py)."""

        def read() -> bool:
            if select.select([master], [], [], 0.05)[0]:
                try:
                    out.extend(os.read(master, 65536))
                except OSError:  # EIO: the program closed the terminal
                    pass
            return bool(done())

        try:
            wait_until(read, what, interval=0)
        except AssertionError as exc:
            raise AssertionError(f"{exc}:\n{out.decode(errors='replace')[-1500:]}") from None

    def logged() -> list[str]:
        return log.read_text().split() if log.exists() else []

    try:
        read_until(lambda: "mounted" in logged(), "the app mounted")
        read_until(lambda: b"ready" in out, "the app drawn")
        if platform.machine() in SELECT_CALLS:  # the system call numbers are known here
            # idle: the input thread waits in select with no timeout (Textual's waits 0.1 s and wakes again)
            read_until(lambda: (waits := _selects(proc.pid)) and all(timeout == 0 for _, timeout in waits),
                       "the input thread waiting for the terminal with no timeout")
        os.write(master, b"\x1b")  # a lone Escape: a key once nothing follows it
        read_until(lambda: "escape" in logged(), "the lone Escape as a key")
        os.write(master, b"\x1b[A")
        read_until(lambda: "up" in logged(), "the arrow as a key")
        os.write(master, b"q")
        # a wait with no timeout that nothing woke would never end: the exit says the quit woke it
        read_until(lambda: proc.poll() is not None, "the program's exit")
        assert proc.wait() == 0, out.decode(errors="replace")[-1500:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert logged()[1:] == ["escape", "up", "q"]


def test_the_dashboard_runs_on_it_where_textual_would_run_its_linux_driver() -> None:
    from kimitui.core.session import Session
    from kimitui.tui.app import KimituiApp
    from kimitui.tui.quiet_driver import QuietLinuxDriver

    assert KimituiApp(Session()).driver_class is QuietLinuxDriver
