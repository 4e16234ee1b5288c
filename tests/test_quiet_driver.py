"""The dashboard's terminal driver (kimitui/tui/quiet_driver.py) on a real pty: while nothing happens its
input thread sleeps (Textual's wakes ten times a second); a lone Escape still arrives as a key once its
parser's deadline passes, an arrow as an arrow, and quitting ends the program at once."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

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


def _switches(pid: int) -> dict[str, int]:
    """Each thread's voluntary context switches (a thread that wakes from a wait adds one)."""
    counts = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:
            continue
        counts[tid] = int(next(line.split()[1] for line in status.splitlines() if line.startswith("voluntary_ctxt")))
    return counts


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

    def read_until(done, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while not done():
            left = deadline - time.monotonic()
            assert left > 0, out.decode(errors="replace")[-1500:]
            if select.select([master], [], [], min(left, 0.05))[0]:
                try:
                    out.extend(os.read(master, 65536))
                except OSError:
                    return

    def logged() -> list[str]:
        return log.read_text().split() if log.exists() else []

    try:
        read_until(lambda: "mounted" in logged())
        read_until(lambda: b"ready" in out)
        # idle: two seconds in which Textual's input thread would wake 20 times (no thread here should)
        start = time.monotonic()
        before = _switches(proc.pid)
        read_until(lambda: time.monotonic() - start > 2.0)
        woke = {tid: n - before.get(tid, 0) for tid, n in _switches(proc.pid).items()}
        assert max(woke.values()) < 8, f"wake-ups by thread in 2 s of nothing: {woke}"
        os.write(master, b"\x1b")  # a lone Escape: a key once nothing follows it
        read_until(lambda: "escape" in logged())
        os.write(master, b"\x1b[A")
        read_until(lambda: "up" in logged())
        os.write(master, b"q")
        quit_at = time.monotonic()
        read_until(lambda: proc.poll() is not None)
        assert time.monotonic() - quit_at < 3.0
        assert proc.wait(5) == 0, out.decode(errors="replace")[-1500:]
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
